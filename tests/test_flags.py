"""One number parser for every flag: ASCII digits, finite, exact integers, and a range for every
count of work so that no input runs unbounded."""

from __future__ import annotations

import pytest

from hikv.flags import FLAG_RANGES, check_flag, parse_float, parse_int
from hikv.params import ParamError
from hikv.scripts.cli import build_parser, main


@pytest.mark.parametrize("text", ["１２８", "٣", "1_000", "0x10", "8.9", "nan", "1e999", ""])
def test_parse_int_refuses(text):
    with pytest.raises(ParamError):
        parse_int(text)


def test_parse_int_and_float_accept_ascii():
    assert parse_int("128") == 128 and parse_int(" -3 ") == -3 and parse_int("1e3") == 1000
    assert parse_float("2.5e-3") == 2.5e-3 and parse_float(".5") == 0.5
    for bad in ("inf", "-Infinity", "NaN", "1e400", "٣.٥", "1,5"):
        with pytest.raises(ParamError):
            parse_float(bad)


def test_every_count_flag_has_a_range_and_every_range_is_ordered():
    for dest, (lo, hi) in FLAG_RANGES.items():
        assert lo <= hi, dest
    with pytest.raises(ParamError,
                       match=r"--trials = 1e\+20 is out of range: allowed \[1, 100,000\]"):
        check_flag("trials", "--trials", 10**20)


def _numeric_flags():
    """(command path, flag, dest, kind) of every type=int/float flag of every subcommand."""
    import argparse

    out = []

    def walk(p: argparse.ArgumentParser, path: list[str]):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, [*path, name])
            elif getattr(a.type, "__name__", "") in ("int", "float") and a.option_strings:
                out.append((path, a.option_strings[-1], a.dest, a.type.__name__))

    walk(build_parser(), [])
    return out


def test_every_numeric_flag_refuses_unicode_digits_and_huge_counts(capsys):
    flags = _numeric_flags()
    assert len(flags) > 40
    for path, flag, dest, kind in flags:
        assert main([*path, flag, "１２"]) == 2, (path, flag)
        err = capsys.readouterr().err
        assert "ASCII digits" in err and len(err.strip().splitlines()) == 1, (path, flag, err)
        if kind == "float":
            for bad in ("nan", "inf"):
                assert main([*path, flag, bad]) == 2, (path, flag, bad)
                assert "not a finite number" in capsys.readouterr().err, (path, flag, bad)
        if kind == "int" and dest in FLAG_RANGES:
            assert main([*path, flag, str(10**40)]) == 2, (path, flag)
            assert "out of range" in capsys.readouterr().err, (path, flag)
