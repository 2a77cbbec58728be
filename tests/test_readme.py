"""README's golden-model example runs and prints what README says it prints."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_golden_model_example_output():
    text = README.read_text()
    section = text[text.index("## The golden model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```\n(full .*?)```", section, re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    assert buf.getvalue() == shown
