"""HiKV co-design kit: an open HW/SW kit for the HiKV KV-cache compression accelerator.

Packages: :mod:`hikv.hw` (Amaranth RTL), :mod:`hikv.model` (PyTorch golden model and the
accuracy study), :mod:`hikv.sim` (cost, energy, area and serving models), :mod:`hikv.rtl_tests`
(cocotb testbenches), :mod:`hikv.scripts` (the ``hikv`` command line).

Modules here (standard library only):

* :mod:`hikv.params`       frozen, validated parameter dataclasses (hardware, model, workload,
  serving, :class:`~hikv.params.Config`); re-exports the two modules below
* :mod:`hikv.method_spec`  KV methods: HiKV's policy, :class:`~hikv.method_spec.MethodSpec` and
  the label grammar (:func:`~hikv.method_spec.parse_method`); re-exports the registry below
* :mod:`hikv.method_registry` the KV-method registry: :class:`~hikv.method_registry.MethodInfo`,
  :func:`~hikv.method_registry.register_method`, :class:`~hikv.method_registry.Method`
* :mod:`hikv.param_checks` :class:`~hikv.param_checks.ParamError` and the range checks
* :mod:`hikv.presets`      named configurations and the operating point (:func:`method_specs`)
* :mod:`hikv.toolchain`    the external tools (Verilator, Yosys) and the build cache
"""

__version__ = "0.1.0"
