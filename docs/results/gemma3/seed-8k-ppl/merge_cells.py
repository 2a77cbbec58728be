"""Union of the rows of one perplexity cell run in parts (separate ``OUT`` folders, disjoint
method families, the same suite otherwise): ``python merge_cells.py DEST PART [PART ...]`` writes
``DEST/cells/ppl_8192.json`` (and ``.csv``) with every label once, the first part's meta, and
the parts' wall and CPU seconds summed. A later ``run_ppl_families.py DEST`` then runs only the
families still missing."""
import sys
from pathlib import Path

from hikv.model.accuracy_io import read_rows, write_rows

KEY = "ppl_8192"
dest, parts = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
rows, meta, seen = [], None, set()
wall = cpu = 0.0
for part in parts:
    r, m = read_rows(part / "cells" / f"{KEY}.json")
    meta = meta or dict(m)
    wall += float(m.get("wall_s") or 0.0)
    cpu += float(m.get("cpu_s") or 0.0)
    for row in r:
        if row["label"] not in seen:
            seen.add(row["label"])
            rows.append(row)
meta.update(wall_s=wall, cpu_s=cpu, merged_from=len(parts))
write_rows(dest / "cells", KEY, rows, meta)
print(f"{len(rows)} rows from {len(parts)} part(s) -> {dest / 'cells' / (KEY + '.json')}")
