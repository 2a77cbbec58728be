"""``hikv.scripts``: the ``hikv`` command line. :mod:`~hikv.scripts.cli` dispatches to one
module per subcommand, ``cmd_<name>.py`` with ``add_arguments(parser)``, ``HELP`` (one line)
and ``run(args) -> int``; heavy imports (torch, amaranth) stay inside ``run`` so ``hikv --help``
is fast.

Subcommands: ``cmd_presets`` (list presets), ``cmd_verilog`` (Verilog of a block),
``cmd_rtl`` (a block's cocotb regression), ``cmd_report`` (cost report), ``cmd_sweep``
(parameter sweeps), ``cmd_serve`` (serving simulation), ``cmd_timing`` (clock estimates:
ASIC STA and FPGA place and route), ``cmd_accuracy`` (accuracy study),
``cmd_fetch_assets`` / ``cmd_fetch_cells`` (downloads), ``cmd_doctor`` (toolchain check);
``cmd_cluster`` (cluster serving, also ``hikv serve`` with cluster flags) shares its flags with
``cmd_serve`` through :mod:`~hikv.scripts.serving_flags` (not a subcommand). Modules are
imported on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {m: () for m in (
    "cli", "cmd_presets", "cmd_verilog", "cmd_rtl", "cmd_report", "cmd_sweep", "cmd_serve",
    "cmd_cluster", "cmd_timing", "cmd_accuracy", "cmd_fetch_assets", "cmd_fetch_cells",
    "cmd_doctor", "serving_flags")})
