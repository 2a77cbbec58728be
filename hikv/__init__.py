"""HiKV co-design kit: an open HW/SW kit for the HiKV KV-cache compression accelerator.

Packages, above this ground layer: :mod:`hikv.hw` (Amaranth RTL), :mod:`hikv.model` (PyTorch
golden model and the accuracy study), :mod:`hikv.sim` (cost, energy, area and serving models),
:mod:`hikv.rtl_tests` (cocotb testbenches), :mod:`hikv.scripts` (the ``hikv`` command line).
The layers and their order: docs/design.md, "Where things live"; ``tests/test_architecture.py``
keeps them.

Modules here, the ground every package stands on (standard library only; they import nothing
above them):

* :mod:`hikv.params`          frozen, validated parameter dataclasses (hardware, model,
  workload, serving, :class:`~hikv.params.Config`); re-exports the two modules below
* :mod:`hikv.method_spec`     KV methods: HiKV's policy, the built-in methods,
  :class:`~hikv.method_spec.MethodSpec` and the label grammar
  (:func:`~hikv.method_spec.parse_method`); re-exports the registry below
* :mod:`hikv.method_registry` the KV-method registry: :class:`~hikv.method_registry.MethodInfo`,
  :func:`~hikv.method_registry.register_method`, :class:`~hikv.method_registry.Method`
* :mod:`hikv.param_checks`    :class:`~hikv.param_checks.ParamError` and the range checks
* :mod:`hikv.presets`         named configurations and the operating point
  (:func:`~hikv.presets.method_specs`)
* :mod:`hikv.flags`           numbers given on the command line: one parser, each flag's range
* :mod:`hikv.io`              output files and provenance: atomic writes, rows, figures, the
  code version, output folders, file locks
* :mod:`hikv.executor`        one executor for sweeps (local processes or Ray)
* :mod:`hikv.report_section`  report sections and provenance shared by the report's sections
* :mod:`hikv.toolchain`       the external tools (Verilator, Yosys) and the build cache
* :mod:`hikv.lazy`            the packages' lazy public APIs (PEP 562)
"""

from hikv.lazy import lazy_api

__version__ = "0.1.0"

__all__, __getattr__, __dir__ = lazy_api(__name__, {m: () for m in (
    "params", "method_spec", "method_registry", "param_checks", "presets", "flags", "io",
    "executor", "report_section", "toolchain", "lazy", "hw", "model", "sim", "rtl_tests",
    "scripts")})
__all__ = ["__version__", *__all__]
