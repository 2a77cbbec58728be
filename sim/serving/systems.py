"""The served system a serving number belongs to: ``gpu``, ``gpu+hikv`` or ``hikv``.

Every serving run prices its iterations on one of three systems, named beside every number
(``hikv serve`` / ``hikv cluster`` / ``hikv plan`` print it, CSVs carry a ``system`` column, the
report's serving section states it):

* ``gpu``: everything on a measured GPU (:mod:`hikv.sim.serving.device`: the profile's
  operators, attention fitted to published kernel times, a compressed method's selection
  kernels fitted to Quest's, :mod:`hikv.sim.serving.gpu_selection`). The default when a GPU is
  named (``--device``).
* ``gpu+hikv``: the same GPU for the linear layers, the LM head and prefill attention, and a
  HiKV accelerator beside it doing decode attention (:class:`OffloadStepCost`). The accelerator
  holds the KV cache in a memory of its own, with the bandwidth of the GPU's (the GPU's
  datasheet peak) and the capacity the GPU alone has for KV, so both systems admit the same
  requests; its PE array is sized for that bandwidth (:func:`size_offload`: full-KV decode
  attention memory-bound at the PE clock); its selection units (sorter, scoring unit) are the
  preset's, its loaders as many as the bandwidth needs. Each layer's decode sends the
  queries and the new tokens' K and V over the link and takes the outputs back
  (:class:`HostLink`, both ways priced: a latency per transfer and the bytes at the link's
  per-direction bandwidth); a prefill streams its chunk's K and V to the accelerator. The GPU
  waits for the accelerator (a layer needs the previous one's output; splitting the batch into
  two ping-ponging halves is not modelled). The accelerator runs a batch's sequences as one
  pipeline per layer (the KV heads of every sequence in turn through the memory, loaders,
  scoring unit, sorter and lanes: the attention cost model's per-head pipeline extended to the
  batch, so the memory latency and the pipeline's fill are paid once per layer, not once per
  sequence), at the estimated clocks. :func:`offload_check` compares it with the GPU's own
  decode attention for full KV over the GPU's batches and contexts; the description says
  whether the offload is ever slower.
* ``hikv``: the accelerator alone, the attention-level model
  (:mod:`hikv.sim.serving.step_cost`): decode attention on the preset's PE array and memory,
  the linear layers and prefill by a roofline of the preset's ``linear_flops_per_s`` and
  bandwidth with measured efficiencies. The default without ``--device``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec, ParamError
from hikv.sim.cost.attention_model import Overrides, attention_cost
from hikv.sim.cost.clocks import Clocks, accelerator_clocks
from hikv.sim.cost.closed_form import closed_form
from hikv.sim.serving.device import (
    DeviceCost,
    DeviceStepCost,
    GpuDevice,
    get_device,
)
from hikv.sim.serving.step_cost import (
    DEFAULT_STEP_COST,
    IterationBatch,
    StepCostBase,
    StepCostModel,
    keyed_decode_run_times_s,
    make_step_cost,
)

__all__ = ["SYSTEMS", "default_system", "check_system", "HostLink", "HOST_LINKS",
           "DEFAULT_HOST_LINK", "get_host_link", "OffloadAccelerator", "OffloadCheck",
           "size_offload", "offload_check", "OffloadStepCost", "OffloadCost", "SystemCost",
           "system_cost", "CHECK_CONTEXTS", "offload_area_m2"]

#: The named systems (module docstring).
SYSTEMS = ("gpu", "gpu+hikv", "hikv")


def default_system(device: str | None) -> str:
    """``gpu`` when a GPU is named, ``hikv`` otherwise."""
    return "gpu" if device else "hikv"


def check_system(name: str) -> str:
    """``name`` if it is a system; ParamError listing them otherwise."""
    if name not in SYSTEMS:
        raise ParamError(f"--system = {name!r} is not one of: {', '.join(SYSTEMS)}")
    return name


# =========================================================================== the link
@dataclass(frozen=True)
class HostLink:
    """The link between a GPU and the HiKV accelerator beside it: ``bandwidth_bytes_per_s``
    per direction, ``latency_s`` per transfer (an assumption stated in ``source``)."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = ""

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise ParamError(f"HostLink.bandwidth_bytes_per_s = {self.bandwidth_bytes_per_s!r} "
                             "must be a finite number > 0")
        if not 0 <= self.latency_s <= 1e-3:
            raise ParamError(f"HostLink.latency_s = {self.latency_s!r} is out of range: "
                             "allowed [0, 1e-3]")


#: Named links (nominal per-direction rates; latencies are assumptions, not measurements).
HOST_LINKS: dict[str, HostLink] = {k.name: k for k in (
    HostLink("nvlink-c2c", 450e9, 1e-6, "NVLink-C2C (Grace Hopper): 900 GB/s both ways, 450 "
                                        "GB/s per direction; 1 us per transfer assumed"),
    HostLink("nvlink3", 300e9, 1e-6, "NVLink 3 (A100, 12 links): 600 GB/s both ways, 300 GB/s "
                                     "per direction; 1 us per transfer assumed"),
    HostLink("pcie5", 64e9, 2e-6, "PCIe 5.0 x16: 64 GB/s per direction; 2 us per transfer "
                                  "assumed"),
)}
#: The link ``gpu+hikv`` uses unless told otherwise.
DEFAULT_HOST_LINK = "nvlink-c2c"


def get_host_link(name: str) -> HostLink:
    try:
        return HOST_LINKS[name]
    except KeyError:
        raise ParamError(f"--host-link = {name!r} is not one of: "
                         f"{', '.join(HOST_LINKS)}") from None


# =========================================================================== the accelerator
#: Contexts (tokens) :func:`offload_check` compares at, with every batch of powers of two up to
#: the preset's ``serving.max_running``.
CHECK_CONTEXTS = (16, 128, 512, 2048, 8192, 32768)


@dataclass(frozen=True)
class OffloadCheck:
    """The offload's decode time over the GPU's (full KV) at every (batch, context) of the
    grid: ``worst`` ratio and where, and the batches and contexts compared."""

    worst: float
    worst_batch: int
    worst_context: int
    best: float
    batches: tuple[int, ...]
    contexts: tuple[int, ...]

    @property
    def never_slower(self) -> bool:
        return self.worst <= 1.0

    def describe(self) -> str:
        where = f"batch {self.worst_batch} at {self.worst_context:,} tokens"
        span = (f"batches {self.batches[0]}-{self.batches[-1]} x contexts "
                f"{self.contexts[0]:,}-{self.contexts[-1]:,} tokens, full KV")
        if self.never_slower:
            return (f"never slower than the GPU's own decode attention over {span}: "
                    f"{self.best:.2f}-{self.worst:.2f}x its time (closest: {where})")
        return (f"SLOWER than the GPU's own decode attention at {where} ({self.worst:.2f}x "
                f"its time; {span}, fastest {self.best:.2f}x)")


@dataclass(frozen=True)
class OffloadAccelerator:
    """The HiKV accelerator beside each GPU (:func:`size_offload`): ``cfg`` is the preset's
    configuration with the accelerator sized, ``clocks`` its blocks' clocks, ``link`` the GPU
    link; ``check`` the comparison with the GPU (filled by :func:`offload_check`)."""

    cfg: Config
    base: Config
    device: str
    link: HostLink
    clocks: Clocks
    check: OffloadCheck | None = field(default=None, compare=False)

    @property
    def pe_lanes(self) -> int:
        return self.cfg.accel.pe_lanes

    @property
    def loaders(self) -> int:
        from hikv.hw.blocks import loader_instances

        return int(loader_instances(self.cfg, clock_hz=self.clocks.hz("loader")))

    def describe(self) -> str:
        a, c = self.cfg.accel, self.clocks
        lk = self.link
        clocks = ", ".join(f"{b} {c.hz(b) / 1e6:,.0f} MHz ({c.blocks[b].origin})"
                           for b in c.blocks if c.blocks[b].used)
        text = (f"HiKV accelerator beside the GPU for decode attention: {a.pe_lanes:,} PE lanes "
                f"and {a.softmax_lanes:,} softmax lanes (sized so full-KV decode attention is "
                f"memory-bound), the preset's sorter ({self.cfg.sorter.lanes} lanes) and "
                f"scoring unit, {self.loaders} loaders, its own {a.memory.value.upper()} memory "
                f"at {a.mem_bandwidth_bytes_per_s / 1e12:.3g} TB/s (the GPU's peak) holding the "
                f"KV cache ({a.device_memory_bytes / 2**30:g} GiB of device memory as the GPU "
                f"alone), clocks {clocks}; link {lk.name} "
                f"{lk.bandwidth_bytes_per_s / 1e9:g} GB/s per direction, "
                f"{lk.latency_s * 1e6:g} us per transfer ({lk.source}): per layer the queries "
                f"and new K/V out and the outputs back, a prefill's K/V streamed")
        if self.check is not None:
            text += f"; offload {self.check.describe()}"
        return text


def size_offload(cfg: Config, device: GpuDevice, link: HostLink, *,
                 clocks: Clocks | None = None, estimated_clocks: bool = True
                 ) -> OffloadAccelerator:
    """The accelerator of ``gpu+hikv`` for ``cfg`` (a preset on ``device``: its memory is the
    GPU's, :func:`~hikv.sim.serving.device.device_config`): memory bandwidth = the GPU's
    datasheet peak; PE lanes = the power of two that makes full-KV decode attention
    memory-bound at the PE clock (``G / elem_bytes`` MACs per KV byte); softmax lanes scaled
    with them as in the preset; sorter, scoring unit, SRAMs as the preset. ``clocks``: every
    block's clock (default: the timing flow's estimate, :func:`accelerator_clocks` of the
    preset, or the assumed clocks with ``estimated_clocks=False``)."""
    if clocks is None:
        clocks = accelerator_clocks(cfg, check=estimated_clocks)
    a = cfg.accel
    bw = float(device.peak_bytes_per_s)
    macs_per_byte = cfg.model.group / cfg.layout.elem_bytes
    need = macs_per_byte * bw / clocks.reference_hz
    lanes = 1 << max(0, math.ceil(math.log2(need)))
    scale = lanes / a.pe_lanes
    acc = dataclasses.replace(a, pe_lanes=lanes,
                              softmax_lanes=max(1, math.ceil(a.softmax_lanes * scale)),
                              mem_bandwidth_bytes_per_s=bw)
    return OffloadAccelerator(cfg=cfg.replace(accel=acc), base=cfg, device=device.name,
                              link=link, clocks=clocks)


def offload_area_m2(acc: OffloadAccelerator) -> tuple[float, str]:
    """Area of the sized accelerator (m^2 at the preset's node) and how it was obtained: the
    preset's synthesised area with its Stage I engine (:func:`hikv.sim.cost.engines.engine_area`
    over :func:`hikv.sim.eda.area.accelerator_area`, the kit's cached
    or shipped results, else Yosys) with the MAC lanes, softmax lanes and loaders counted as
    sized (their units are the preset's, so only the counts change)."""
    from hikv.hw.blocks import BLOCKS
    from hikv.sim.cost.engines import engine_area

    loader_hz = acc.clocks.hz("loader")
    area = engine_area(acc.base, loader_clock_hz=loader_hz)     # the preset's sorter.kind
    a0, a1 = acc.base.accel, acc.cfg.accel
    loaders = BLOCKS["loader"].instances(acc.cfg, clock_hz=loader_hz) if "loader" in BLOCKS \
        else 0
    total = 0.0
    for item in (*area.baseline, *area.hikv):
        count = item.count
        if item.name.startswith("MAC lane"):
            count = a1.pe_lanes
        elif item.name.startswith("softmax lane"):
            count = a1.softmax_lanes
        elif item.name.split(".")[0] == "loader":
            count = loaders
        total += count * item.unit_area_m2
    how = (f"synthesised units of preset {acc.base.name} ({a0.tech_nm} nm) counted as sized: "
           f"{a1.pe_lanes} MAC lanes, {a1.softmax_lanes} softmax lanes, {loaders} loaders"
           + ("" if area.complete else f"; missing blocks {', '.join(area.missing)}"))
    return total, how


# =========================================================================== step cost
_UNITS = ("memory", "loaders", "scorer", "pe_lanes", "softmax", "sorter")


class _BatchTables:
    """Per decode key, one sequence on the accelerator: per layer, each unit's busy cycles
    (all KV heads), each unit's fill and drain, one head's chain and the sequence's own
    pipelined layer (reference cycles); its energy per step (J)."""

    def __init__(self, acc: OffloadAccelerator, spec: MethodSpec, kv: Any, size: int) -> None:
        x = np.maximum(np.arange(size, dtype=np.int64), 2)        # keys 0, 1 as key 2
        prompt, step = kv.by_key(x)
        c = attention_cost(spec, acc.cfg, Overrides(context=prompt, step=step),
                           clocks=acc.clocks)
        H = acc.cfg.model.kv_heads
        shape = np.broadcast(prompt, step).shape
        f = lambda v: np.broadcast_to(np.asarray(v, dtype=float), shape).copy()  # noqa: E731
        self.busy = {u: f(H * np.asarray(c.busy_cycles[u], dtype=float)) for u in _UNITS}
        self.over = {u: np.where(self.busy[u] > 0,
                                 f(c.bound_cycles[u]) - self.busy[u], 0.0) for u in _UNITS}
        self.chain = f(c.bound_cycles["chain"])
        self.layer = f(c.layer_cycles)
        self.energy_j = f(c.energy_j)
        self.size = size


class OffloadStepCost(StepCostBase):
    """``gpu+hikv`` (module docstring): the GPU's step cost without its decode attention,
    plus the offload (link and accelerator) for the decoding sequences."""

    def __init__(self, cfg: Config, spec: MethodSpec, gpu: DeviceStepCost,
                 acc: OffloadAccelerator) -> None:
        self.cfg, self.spec, self.gpu, self.acc = cfg, spec, gpu, acc
        self.kv = closed_form(spec, cfg.layout)
        m = cfg.model
        eb = cfg.layout.elem_bytes
        self.layers = m.layers
        # per layer and decoding sequence: queries and new K/V out, outputs back
        self.out_bytes = (m.q_heads + 2 * m.kv_heads) * m.head_dim * eb
        self.back_bytes = m.q_heads * m.head_dim * eb
        self.kv_token_bytes = m.layers * 2 * m.kv_heads * m.head_dim * eb
        self.link = acc.link
        self.ref_hz = acc.clocks.reference_hz
        self._t: _BatchTables | None = None

    def tables(self, xmax: int) -> _BatchTables:
        if self._t is None or xmax >= self._t.size:
            size = max(xmax + 1, 2 * (0 if self._t is None else self._t.size), 1024)
            self._t = _BatchTables(self.acc, self.spec, self.kv, size)
        return self._t

    def link_s(self, seqs: Any) -> Any:
        """The decode's link time: per layer one transfer each way."""
        lk = self.link
        return self.layers * (2 * lk.latency_s + np.asarray(seqs) * (
            self.out_bytes + self.back_bytes) / lk.bandwidth_bytes_per_s)

    def accelerator_s(self, x: np.ndarray, axis: int | None) -> Any:
        """The accelerator's decode attention of the sequences with decode keys ``x`` (summed
        over ``axis``): per layer the batch as one pipeline, never longer than the sequences
        one after another."""
        t = self.tables(int(x.max()))
        piped = np.maximum.reduce([t.busy[u][x].sum(axis) + t.over[u][x].max(axis)
                                   for u in _UNITS] + [t.chain[x].max(axis)])
        layer = np.minimum(piped, t.layer[x].sum(axis))
        return self.layers * layer / self.ref_hz

    def decode_s(self, x: np.ndarray, axis: int | None) -> Any:
        seqs = x.shape[0] if axis == 0 else x.size
        return self.link_s(seqs) + self.accelerator_s(x, axis)

    def prefill_ship_s(self, chunk: np.ndarray) -> float:
        """Streaming the prefill chunks' K and V to the accelerator (one transfer per layer)."""
        if chunk.size == 0:
            return 0.0
        lk = self.link
        return (self.layers * lk.latency_s
                + float(chunk.sum()) * self.kv_token_bytes / lk.bandwidth_bytes_per_s)

    def breakdown(self, batch: IterationBatch) -> dict[str, float]:
        """The GPU's :meth:`~hikv.sim.serving.device.DeviceStepCost.breakdown` with its decode
        attention and selection replaced by the link and the accelerator."""
        out = self.gpu.breakdown(batch)
        out["attn_select"] = out["attn_decode"] = 0.0
        out["link"] = self.prefill_ship_s(batch.prefill_chunk)
        out["accelerator"] = 0.0
        if batch.decode_step.size:
            x = self.kv.decode_key(batch.decode_prompt, batch.decode_step)
            out["link"] += float(self.link_s(x.size))
            out["accelerator"] = float(self.accelerator_s(x, None))
        return out

    def iteration_time_s(self, batch: IterationBatch) -> float:
        g = self.gpu
        t = (g.linear_time_s(batch.tokens, batch.logits)
             + g.prefill_attention_time_s(batch.prefill_done, batch.prefill_chunk,
                                          batch.prefill_total)
             + self.prefill_ship_s(batch.prefill_chunk))
        if batch.decode_step.size:
            t += float(self.decode_s(self.kv.decode_key(batch.decode_prompt,
                                                        batch.decode_step), None))
        return t

    def decode_run_times_s(self, prompt: np.ndarray, step: np.ndarray, k: int) -> np.ndarray:
        return keyed_decode_run_times_s(
            self.kv, prompt, step, k,
            lambda d, x: self.gpu.linear_time_s(d, d) + self.decode_s(x, 0))

    def energy_per_step_j(self, x: np.ndarray) -> np.ndarray:
        """The accelerator's energy of one decode step at decode keys ``x`` (all layers)."""
        return self.tables(int(np.max(x))).energy_j[x]


@dataclass(frozen=True)
class OffloadCost:
    """A step-cost factory for ``gpu+hikv``: the measured GPU of ``device`` and the sized
    accelerator beside it."""

    device: DeviceCost
    accelerator: OffloadAccelerator

    @property
    def name(self) -> str:
        return f"gpu+hikv:{self.device.device}"

    def describe(self) -> str:
        return (f"{self.device.describe()}; decode attention OFFLOADED to the "
                f"{self.accelerator.describe()}")

    def __call__(self, cfg: Config, spec: MethodSpec) -> StepCostModel:
        gpu = self.device(cfg, spec)
        assert isinstance(gpu, DeviceStepCost)
        return OffloadStepCost(cfg, spec, gpu, self.accelerator)


def offload_check(cfg: Config, cost: OffloadCost, *,
                  contexts: tuple[int, ...] = CHECK_CONTEXTS) -> OffloadCheck:
    """The offload's decode time (link and accelerator) over the GPU's own decode attention,
    full KV, at batches 1, 2, 4, ... up to ``serving.max_running`` and ``contexts``."""
    from hikv.presets import resolve_methods

    spec = resolve_methods(cfg, "full")["full"]
    off = cost(cfg, spec)
    assert isinstance(off, OffloadStepCost)
    batches = tuple(1 << i for i in range(int(math.log2(cfg.serving.max_running)) + 1))
    ratios = {}
    for b in batches:
        for n in contexts:
            x = off.kv.decode_key(np.full(b, n - 1), np.ones(b, dtype=np.int64))
            ratios[(b, n)] = float(off.decode_s(x, None)) / float(
                off.gpu.decode_attention_time_s(x, None))
    (wb, wn), worst = max(ratios.items(), key=lambda kv: kv[1])
    return OffloadCheck(worst, wb, wn, min(ratios.values()), batches, contexts)


# =========================================================================== the factory
@dataclass(frozen=True)
class SystemCost:
    """What :func:`system_cost` gives: the system's name, the configuration it serves on,
    the step-cost model (a name or a factory) and one paragraph saying what is measured,
    modelled and assumed."""

    system: str
    cfg: Config
    cost_model: Any
    description: str
    device: DeviceCost | None = None
    accelerator: OffloadAccelerator | None = None

    @property
    def cost_name(self) -> str:
        return str(getattr(self.cost_model, "name", self.cost_model))


def system_cost(cfg: Config, system: str, *, device: str | None = None,
                profile: str | None = None, tensor_parallel: int = 1,
                memory_gib: float | None = None, link: str | None = None,
                cost_model: str | None = None, estimated_clocks: bool = True) -> SystemCost:
    """The step cost of ``system`` for ``cfg`` (module docstring). ``gpu`` and ``gpu+hikv``
    serve on ``device`` (default ``a100``) with its operator ``profile``; ``gpu+hikv`` takes
    the ``link`` (default :data:`DEFAULT_HOST_LINK`) and sizes its accelerator
    (:func:`size_offload`, checked by :func:`offload_check`); ``hikv`` takes ``cost_model``
    (default :data:`~hikv.sim.serving.step_cost.DEFAULT_STEP_COST`) and no GPU flags."""
    from hikv.sim.serving.device import device_cost_for

    check_system(system)
    if system == "hikv":
        if device or profile or tensor_parallel != 1 or memory_gib is not None or link:
            raise ParamError("--system hikv is the accelerator alone: --device, --profile, "
                             "--tp, --device-memory and --host-link need --system gpu or "
                             "gpu+hikv")
        name = cost_model or DEFAULT_STEP_COST
        make_step_cost(name, cfg, _probe_spec(cfg))           # reject a bad name early
        a = cfg.accel
        return SystemCost("hikv", cfg, name, (
            f"system hikv: the HiKV accelerator alone (step cost {name}): decode attention on "
            f"{a.pe_lanes:,} PE lanes at {a.clock_hz / 1e9:g} GHz and its "
            f"{a.mem_bandwidth_bytes_per_s / 1e9:g} GB/s memory by the attention cost model, "
            f"linear layers and prefill by a roofline of {a.linear_flops_per_s / 1e12:g} "
            f"TFLOP/s and that memory with measured efficiencies"))
    if cost_model is not None and system != "gpu":
        raise ParamError(f"--cost-model is for --system hikv or gpu; --system {system} prices "
                         "iterations on the measured GPU and the accelerator")
    dev_name = device or "a100"
    dcfg, dcost = device_cost_for(cfg, dev_name, profile=profile,
                                  tensor_parallel=tensor_parallel, memory_gib=memory_gib)
    if system == "gpu":
        if link:
            raise ParamError("--host-link is for --system gpu+hikv")
        if cost_model is not None:                      # a named step cost at the GPU's peaks
            make_step_cost(cost_model, dcfg, _probe_spec(dcfg))
            dev = get_device(dev_name)
            return SystemCost("gpu", dcfg, cost_model, (
                f"system gpu: {dev.label} ({dev.peak_flops_per_s / 1e12:g} TFLOP/s, "
                f"{dev.peak_bytes_per_s / 1e12:g} TB/s) priced by step cost {cost_model} at its "
                f"peaks"), device=dcost)
        return SystemCost("gpu", dcfg, dcost, f"system gpu: {dcost.describe()}", device=dcost)
    if tensor_parallel != 1:
        raise ParamError("--system gpu+hikv: --tp must be 1 (one accelerator per GPU holding "
                         "every KV head)")
    acc = size_offload(dcfg, get_device(dev_name), get_host_link(link or DEFAULT_HOST_LINK),
                       estimated_clocks=estimated_clocks)
    off = OffloadCost(dcost, acc)
    acc = dataclasses.replace(acc, check=offload_check(dcfg, off))
    off = OffloadCost(dcost, acc)
    return SystemCost("gpu+hikv", dcfg, off, f"system gpu+hikv: {off.describe()}",
                      device=dcost, accelerator=acc)


def _probe_spec(cfg: Config) -> MethodSpec:
    from hikv.presets import resolve_methods

    return resolve_methods(cfg, "full")["full"]
