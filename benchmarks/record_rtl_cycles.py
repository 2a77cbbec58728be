"""Measure sorter and loader cycles in cocotb and record them in tests/golden/rtl_cycles.json.

    python benchmarks/record_rtl_cycles.py --preset tiny --preset default --preset paper

Runs the plan of :mod:`hikv.rtl_tests.rtl_cycles` per preset (slow for default and paper:
minutes each on 2 cores), checks the rows against the cost model's timing
(:mod:`hikv.sim.cost.validate`), and replaces that preset's rows in the golden file with the command
and wall time of each run.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from hikv.rtl_tests.rtl_cycles import PLANS, measure, merge_golden
    from hikv.sim.cost import validate as V
    from hikv.sim.cost.timing import default_timing

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", choices=PLANS, required=True)
    ap.add_argument("--block", action="append", choices=("sorter", "loader"))
    args = ap.parse_args(argv)
    blocks = tuple(args.block or ("sorter", "loader"))
    for preset in args.preset:
        rows, sources = measure(preset, blocks)
        ms = [V.CycleMeasurement(block=r["block"], preset=r["preset"], cycles=r["cycles"],
                                 job={k: v for k, v in r.items()
                                      if k not in ("block", "preset", "cycles")})
              for r in rows]
        bad = V.compare(default_timing(), ms)
        for s in sources:
            print(f"{s['preset']} {s['block']}: {s['jobs']} jobs in {s['wall_s']} s "
                  f"({s['command']})")
        print(f"{preset}: {len(rows)} measured jobs, {len(bad)} differ from the timing model")
        for b in bad[:10]:
            print(f"  {b.measurement}: predicted {b.predicted}")
        merge_golden(rows, sources)
        if bad:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
