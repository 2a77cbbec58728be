"""Build (cached) and run the randomized cocotb regression of one RTL block on Verilator,
comparing every output with the golden model. Prints a pass/fail summary with the seed and the
measured cycles; waveforms are written only with --waves (their path is printed)."""

from __future__ import annotations

import argparse

HELP = "run a block's cocotb regression (e.g. --block sorter --preset tiny --seed 1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block", required=True, help="RTL block name")
    p.add_argument("--preset", default="tiny", help="configuration preset (default: tiny)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random, "
                   "printed so the run can be repeated)")
    p.add_argument("--jobs", type=int, default=None, help="randomized jobs (default: the "
                   "block's regression size)")
    p.add_argument("--waves", action="store_true", help="dump waveforms (VCD)")
    p.add_argument("--sim", default="verilator", choices=("verilator", "icarus"),
                   help="simulator")
    p.add_argument("--capture", default=None, metavar="FILE",
                   help="sorter_loader only: real attention heads from `hikv accuracy capture` "
                        "(the preset is adapted to their head size)")


def run(args: argparse.Namespace) -> int:
    import random

    from hikv.params import ParamError
    from hikv.presets import get_preset
    from hikv.rtl_tests.registry import get_regression

    if args.jobs is not None and args.jobs < 1:
        raise ParamError(f"--jobs = {args.jobs} is out of range: allowed >= 1")
    regression = get_regression(args.block)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    cfg = get_preset(args.preset)
    extra = {}
    if args.capture is not None:
        if args.block != "sorter_loader":
            raise ParamError(f"--capture is for --block sorter_loader, not {args.block!r}")
        import torch

        try:
            extra["capture"] = torch.load(args.capture, weights_only=False)
        except (OSError, RuntimeError) as e:
            raise ParamError(f"--capture {args.capture}: {e}") from None
    rep = regression(cfg, seed=seed, jobs=args.jobs, waves=args.waves, simulator=args.sim,
                     **extra)
    status = "PASS" if rep.passed else "FAIL"
    print(f"{status} block={rep.block} preset={rep.preset} seed={rep.seed} jobs={rep.jobs}")
    for line in rep.lines:
        print(f"  {line}")
    if rep.waves:
        print(f"  waves: {rep.waves}")
    return 0 if rep.passed else 1
