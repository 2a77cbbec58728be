"""The attention-level result table of one operating point: for the preset's context N and budget
B, each method's external bytes, attention time and energy per decode step, HiKV's speedup
against full KV and against each baseline with its roofline bound beside it, every block's clock
(the timing flow's estimate of our Verilog at the preset's node; with --no-area assumed at
accel.clock_hz, not checked) with its source and critical path, and the area of HiKV's units
(sorter, loaders, scoring unit) from synthesis of our Verilog against the stated baseline
system. Prints the Markdown table, then where the
seed's reference claims (7.95x, -90% energy, 1.82-4.87x bytes, ~8% area) stand against ours,
marking references and model / synthesised figures, then a serving section (HiKV vs full KV
and the best baseline on the Azure conversation trace: throughput, TTFT/TPOT P99, goodput).
Writes report.md, report.csv, report.json,
config.json and two plots into --out. Units: bytes, seconds (us in tables), joules (uJ in
tables), m^2 (mm^2 in tables). Areas and clocks come from the cache, else from the synthesis and
timing results shipped with the kit for the named presets (used only where the RTL's hash
matches), else from the flows (minutes per block); --resynthesise always runs the flows; the
report's provenance says which."""

from __future__ import annotations

import argparse

HELP = "attention-level result table of a preset (speedup, energy, bytes, area overhead)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="paper", help="configuration preset (hikv presets)")
    p.add_argument("--out", help="output directory (default: out/report-PRESET); one holding "
                   "an earlier report's files needs --force")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier report's files in --out (deleted first)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a preset parameter, e.g. policy.scorer=page_bounds "
                        "(repeatable)")
    p.add_argument("--iso", help="iso-accuracy operating-point file (JSON, schema "
                   "hikv.iso_accuracy/1) from the accuracy study; default: nominal budgets")
    p.add_argument("--no-area", action="store_true", help="skip synthesis (no area section; "
                   "every block's clock assumed at accel.clock_hz, not checked)")
    p.add_argument("--no-fetch", action="store_true",
                   help="do not download the cell library if missing (areas and clocks that are "
                   "neither cached nor shipped become unavailable)")
    p.add_argument("--resynthesise", action="store_true",
                   help="run synthesis and timing even where the cache or the results shipped "
                   "with the kit hold them (minutes per block of default)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--serving-requests", type=int, default=None, metavar="N",
                   help="serving section: replay the first N requests of the Azure "
                   "conversation trace (default 1000, about a minute for the default preset; "
                   "0 = the whole trace, about 5 minutes)")
    p.add_argument("--no-serving", action="store_true",
                   help="skip the serving section (HiKV vs full KV and the best baseline on "
                   "the Azure conversation trace, found via HIKV_DATA or "
                   "shared/data/azure-llm-2023)")
    p.add_argument("--system", default="hikv", metavar="NAME",
                   help="the system of the serving section: hikv (the accelerator alone, "
                   "default), gpu (an A100, measured) or gpu+hikv (the A100 with decode "
                   "attention on a HiKV accelerator beside it); gpu systems serve the paper "
                   "preset when this preset's model has no measured profile")
    p.add_argument("--device-section", action="store_true",
                   help="add the serving section on a measured GPU (A100 operator profiles, "
                   "fitted attention; the first --serving-requests requests of the trace)")
    p.add_argument("--quiet", action="store_true", help="print only the output paths")


def run(args: argparse.Namespace) -> int:
    from hikv.io import prepare_out_dir
    from hikv.presets import get_preset, with_overrides
    from hikv.sim.explore.render import markdown, write_report
    from hikv.sim.explore.report import build_report, load_iso_accuracy

    cfg = with_overrides(get_preset(args.preset), args.set)
    if args.iso:
        from hikv.io import check_result_file

        check_result_file(args.iso, "--iso")   # refused if its run did not finish or changed
    iso = load_iso_accuracy(args.iso, cfg) if args.iso else None
    from hikv.params import ParamError
    from hikv.sim.serving.report import DEFAULT_REPORT_REQUESTS
    from hikv.sim.serving.systems import check_system

    check_system(args.system)
    n = DEFAULT_REPORT_REQUESTS if args.serving_requests is None else args.serving_requests
    if n < 0:
        raise ParamError(f"--serving-requests = {n} is out of range: allowed >= 0 (0: the "
                         "whole trace)")
    out = prepare_out_dir(args.out or f"out/report-{args.preset}", OWNED, force=args.force)
    rep = build_report(cfg, iso=iso, area=not args.no_area, fetch_cells=not args.no_fetch,
                       resynthesise=args.resynthesise,
                       sections=((() if args.no_serving else ("serving",))
                                 + (("serving-device",) if args.device_section else ())),
                       section_options={"serving": {"max_requests": n or None,
                                                    "system": args.system},
                                        "serving-device": {"max_requests": n or None}})
    files = write_report(rep, out, plots=not args.no_plots)
    if not args.quiet:
        print(markdown(rep))
    for f in files:
        print(f"wrote {f}")
    return 0


#: The files ``hikv report`` writes into --out (cleared by --force).
OWNED = ("report.md", "report.csv", "report.json", "config.json", "*.png")
