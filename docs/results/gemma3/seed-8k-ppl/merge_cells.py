"""Union of the rows of one perplexity cell run in parts (separate ``OUT`` folders, disjoint
method families, the same suite otherwise): ``python merge_cells.py [--length N] DEST PART
[PART ...]`` writes ``DEST/cells/ppl_N.json`` (and ``.csv``; N = 8192 by default) with every
label once, the first part's meta, and the parts' wall and CPU seconds summed. A later
``run_ppl_families.py DEST --length N`` then runs only the families still missing."""
import argparse
from pathlib import Path

from hikv.model.accuracy.io import read_rows, write_rows
from hikv.params import ParamError

ap = argparse.ArgumentParser()
ap.add_argument("--length", type=int, default=8192)
ap.add_argument("dest", type=Path)
ap.add_argument("parts", type=Path, nargs="+")
a = ap.parse_args()
key = f"ppl_{a.length}"
rows, meta, seen = [], None, set()
wall = cpu = 0.0
for part in a.parts:
    try:
        r, m = read_rows(part / "cells" / f"{key}.json")
    except ParamError as e:
        ap.error(str(e))
    meta = meta or dict(m)
    wall += float(m.get("wall_s") or 0.0)
    cpu += float(m.get("cpu_s") or 0.0)
    for row in r:
        if row["label"] not in seen:
            seen.add(row["label"])
            rows.append(row)
meta.update(wall_s=wall, cpu_s=cpu, merged_from=len(a.parts))
write_rows(a.dest / "cells", key, rows, meta)
print(f"{len(rows)} rows from {len(a.parts)} part(s) -> {a.dest / 'cells' / (key + '.json')}")
