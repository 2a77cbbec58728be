"""``hikv.scripts``: the ``hikv`` command line. :mod:`~hikv.scripts.cli` dispatches to one
module per subcommand, ``cmd_<name>.py`` with ``add_arguments(parser)``, ``HELP`` (one line)
and ``run(args) -> int``; heavy imports (torch, amaranth) stay inside ``run`` so ``hikv --help``
is fast.

Subcommands: ``cmd_presets`` (list presets), ``cmd_verilog`` (Verilog of a block),
``cmd_rtl`` (a block's cocotb regression), ``cmd_report`` (cost report), ``cmd_sweep``
(parameter sweeps), ``cmd_serve`` (serving simulation), ``cmd_timing`` (clock estimates:
ASIC STA and FPGA place and route), ``cmd_accuracy`` (accuracy study),
``cmd_fetch_assets`` / ``cmd_fetch_cells`` (downloads), ``cmd_doctor`` (toolchain check).
"""
