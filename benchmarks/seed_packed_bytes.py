"""The seed's HiKV in its packed record layout: bytes per decode step next to the accuracy the
seed suites measured (the seed's fourth claim).

    python benchmarks/seed_packed_bytes.py docs/results/smollm2/seed/cells/ppl_*.json \
        docs/results/gemma3/seed/cells/ppl_*.json [--aligns 8 2] [--json FILE]

The layout changes bytes, not answers: an evicting cache holds the same tokens and the same
Stage II elements whatever the record alignment, so a perplexity cell's accuracy holds for
every layout and only the bytes need recounting. For every budget of each committed
perplexity cell this prints, per (layer, KV head) and decode step, burst granularity with
metadata:

* ``evict`` -- HiKV's evicting Stage I without Stage II, the cell's golden byte account
  (64-byte aligned rows, the suites' preset layout);
* ``seed@64`` -- the seed's HiKV (evicting Stage I, ThinK K channels, static top-|V|
  records) in that layout, the cell's golden account;
* ``seed@A`` -- the same selections with records packed back to back at alignment ``A``
  (2 or 8 bytes), counted by the closed form (:func:`hikv.sim.cost.closed_form.step_bytes`) over the
  cell's decode steps; the closed form at 64 bytes is printed beside the cell's account
  (``cf/cell``) as the check that it counts what the golden model counted;
* perplexity against full KV for both families (the cell's rows).

Not a test: it reads committed cells. ``tests/test_seed_packed_bytes.py`` runs it on them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

#: the seed's HiKV families of the suites (hikv.model.accuracy.seed_spec.SEED_HIKV and Gemma's
#: d = 256)
SEED_PREFIX = "hikv-evict/k:think"
EVICT = "hikv-evict"


def _mean_step_bytes(label: str, cfg: Any, head_dim: int, prefix: int, window: int,
                     align: int) -> float:
    import numpy as np

    from hikv.model.accuracy import experiments as A
    from hikv.sim.cost.closed_form import step_bytes

    spec = A.parse_method(label, cfg.policy, head_dim)
    layout = dataclasses.replace(cfg.layout, head_dim=head_dim, align_bytes=align)
    acc = step_bytes(spec, layout, np.arange(prefix + 1, window), prompt=prefix)
    return float(np.mean(np.asarray(acc.k_burst + acc.v_burst + acc.meta_burst)))


def cell_rows(path: Path, aligns: tuple[int, ...] = (8, 2)) -> list[dict[str, Any]]:
    """One row per budget of the cell at ``path`` where both the seed's HiKV and HiKV
    evicting ran."""
    from hikv.params import Config, from_dict

    try:
        data = json.loads(Path(path).read_text())
        meta, rows = data["meta"], data["rows"]
        cfg = from_dict(Config, meta["config"])
        d = int(meta["shape"]["head_dim"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a seed-suite cell (a JSON object with 'meta' holding "
                         f"'config' and 'shape', and 'rows'): {exc!r}") from None
    if meta.get("cell", "").split("_")[0] != "ppl" or any("ppl" not in r for r in rows):
        raise ValueError(f"{path}: cell {meta.get('cell')!r} is not a perplexity cell "
                         f"(ppl_<N>.json)")
    from hikv.model.accuracy.iso import ppl_rel  # over the windows each row ran

    full = [r for r in rows if r["family"] == "full"]
    if not full:
        raise ValueError(f"{path}: no full-KV row")
    ppl_full = float(full[0]["ppl"])
    evict = {r["budget"]: r for r in rows if r["family"] == EVICT}
    out = []
    for s in rows:
        e = evict.get(s["budget"])
        if not s["family"].startswith(SEED_PREFIX) or e is None:
            continue
        pre, win = int(s["prefix"]), int(s["window"])
        cf64 = _mean_step_bytes(s["label"], cfg, d, pre, win, 64)
        row: dict[str, Any] = {
            "model": meta.get("model"), "length": int(s["length"]), "budget": int(s["budget"]),
            "seed_family": s["family"], "ppl_full": ppl_full,
            "evict_ppl_delta": ppl_rel(e, full[0]), "seed_ppl_delta": ppl_rel(s, full[0]),
            "evict_bytes": float(e["bytes_burst"]), "seed_bytes_64": float(s["bytes_burst"]),
            "cf_over_cell_64": cf64 / float(s["bytes_burst"])}
        for a in aligns:
            row[f"seed_bytes_{a}"] = _mean_step_bytes(s["label"], cfg, d, pre, win, a)
            row[f"seed_{a}_over_evict"] = row[f"seed_bytes_{a}"] / row["evict_bytes"]
        out.append(row)
    return out


def markdown(rows: list[dict[str, Any]], aligns: tuple[int, ...]) -> str:
    head = ["model", "N", "B", "evict: ppl", "evict: bytes", "seed: ppl", "seed@64: bytes",
            "cf/cell"] + [f"seed@{a}: bytes" for a in aligns] + \
           [f"seed@{a} / evict" for a in aligns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["model"]), f"{r['length']:,}", f"{r['budget']:,}",
                 f"{100 * r['evict_ppl_delta']:+.2f} %", f"{r['evict_bytes']:,.0f}",
                 f"{100 * r['seed_ppl_delta']:+.2f} %", f"{r['seed_bytes_64']:,.0f}",
                 f"{r['cf_over_cell_64']:.4f}"] + \
                [f"{r[f'seed_bytes_{a}']:,.0f}" for a in aligns] + \
                [f"{r[f'seed_{a}_over_evict']:.3f}x" for a in aligns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cells", nargs="+", type=Path, help="perplexity cells (ppl_<N>.json)")
    ap.add_argument("--aligns", type=int, nargs="+", default=[8, 2],
                    help="packed record alignments in bytes (2 or 8; default both)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    bad = [x for x in a.aligns if x not in (2, 8)]
    if bad:
        ap.error(f"--aligns: {bad} not allowed; a packed record alignment is 2 or 8 bytes")
    aligns = tuple(a.aligns)
    rows = []
    for p in a.cells:
        if not p.is_file():
            ap.error(f"cell {p} does not exist")
        try:
            rows += cell_rows(p, aligns)
        except ValueError as exc:
            ap.error(str(exc))
    rows.sort(key=lambda r: (str(r["model"]), r["length"], r["budget"], r["seed_family"]))
    if not rows:
        print("no cell has both the seed's HiKV and HiKV evicting rows", file=sys.stderr)
        return 1
    print(markdown(rows, aligns))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
