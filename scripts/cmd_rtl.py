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
    p.add_argument("--traffic", default=None, choices=("random", "gadakv"),
                   help="sorter only: random jobs (default) or G-AdaKV's global top-k as "
                        "Stage I jobs (--jobs = problems)")


def run(args: argparse.Namespace) -> int:
    import random

    from hikv.params import ParamError
    from hikv.presets import get_preset
    from hikv.rtl_tests.registry import get_regression

    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        raise ParamError(f"--jobs = {args.jobs} is out of range: allowed [1, {MAX_JOBS}]")
    if args.seed is not None and not 0 <= args.seed < 2**31:
        raise ParamError(f"--seed = {args.seed} is out of range: allowed [0, 2**31 - 1]")
    regression = get_regression(args.block)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    cfg = get_preset(args.preset)
    extra = {}
    if args.capture is not None:
        if args.block != "sorter_loader":
            raise ParamError(f"--capture is for --block sorter_loader, not {args.block!r}")
        extra["capture"] = load_capture(args.capture)
    if args.traffic is not None:
        if args.block != "sorter":
            raise ParamError(f"--traffic is for --block sorter, not {args.block!r}")
        extra["traffic"] = args.traffic
    rep = regression(cfg, seed=seed, jobs=args.jobs, waves=args.waves, simulator=args.sim,
                     **extra)
    status = "PASS" if rep.passed else "FAIL"
    print(f"{status} block={rep.block} preset={rep.preset} seed={rep.seed} jobs={rep.jobs}")
    for line in rep.lines:
        print(f"  {line}")
    if rep.waves:
        print(f"  waves: {rep.waves}")
    return 0 if rep.passed else 1


#: Most randomized jobs one ``hikv rtl`` run takes (each is simulated cycle by cycle).
MAX_JOBS = 1_000_000


def load_capture(path: str) -> dict:
    """A ``hikv accuracy capture`` file, loaded without running code from it
    (``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only).
    Anything else -- a missing file, another format, a pickle that needs code -- is a
    :class:`~hikv.params.ParamError` naming the file."""
    import torch

    from hikv.io import regular_file
    from hikv.params import ParamError

    what = "a file written by `hikv accuracy capture`"
    regular_file(path, what=what, flag="--capture")   # a FIFO would block torch.load
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise ParamError(f"--capture {path}: no such file (expected {what})") from None
    except OSError as e:
        raise ParamError(f"--capture {path}: cannot be read: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - whatever a foreign file makes torch raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ParamError(f"--capture {path}: not loadable as plain tensors and data "
                         f"(weights_only=True refuses files that would run code): {first}; "
                         f"expected {what}") from None
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict):
        raise ParamError(f"--capture {path}: holds no 'layers' mapping; expected {what}")
    return data
