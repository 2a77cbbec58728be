"""cocotb testbench of the two-level KV loader (hw/loader.py) on Verilator.

Reads the configuration from ``HIKV_TB_CONFIG`` (JSON: geometry and port field layouts) and the
jobs from the file named by ``HIKV_TB_JOBS`` (written by rtl_tests/loader_launch.py from the
golden model: memory contents, expected AXI requests, packed outputs, byte counts, injected
read errors, randomisation knobs). Results (cycles per job, timing checks) go to the file named
by ``HIKV_TB_RESULT``. No torch here: everything expected was computed before the simulator
started.

Tests:

* ``loader_axiram``: jobs served by cocotbext-axi's ``AxiRamRead`` (random AR / R pauses from
  its pause generators, random extra latency before the first beat of a burst, SLVERR injected
  by failing reads);
* ``loader_pipe``: jobs served by :class:`PipeMemory`, a pipelined AXI4 read slave with any
  number of requests in flight, per-request random latency, random ARREADY and R gaps, and
  SLVERR / DECERR injection; also out-of-order tokens and an unaligned base;
* ``loader_timing``: fixed latency, no backpressure: measured cycles against
  :func:`hikv.hw.loader_timing.job_cycles`.

The cfg, token (or score) and output streams are driven by the shared kit
(:mod:`hikv.rtl_tests.streams`), with each job's valid / ready probabilities.

Every job checks: the AR sequence (address, length, size, burst, id) against the golden
requests, no 4 KiB crossing, at most the configured reads outstanding, every packed output
(token, vector, mask, error flag, last), the byte and burst counters against the golden byte
account, the cycle counters against what the testbench observed, and the status flags.
"""

from __future__ import annotations

import json
import logging
import os
import random
import warnings
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hikv.rtl_tests.streams import Pattern, StreamSink, StreamSource, read_int

CONF: dict[str, Any] = json.loads(os.environ.get("HIKV_TB_CONFIG", "{}"))


# --------------------------------------------------------------------------- helpers
def pack(layout: dict[str, list[int]], **values: int) -> int:
    word = 0
    for name, (off, width) in layout.items():
        v = int(values.get(name, 0))
        if v >> width:
            raise ValueError(f"field {name} = {v} does not fit {width} bits")
        word |= v << off
    return word


def unpack(layout: dict[str, list[int]], word: int) -> dict[str, int]:
    return {name: (word >> off) & ((1 << width) - 1) for name, (off, width) in layout.items()}


class Mismatch(AssertionError):
    pass


def _load_jobs() -> dict[str, Any]:
    with open(os.environ["HIKV_TB_JOBS"]) as f:
        return json.load(f)


def _save_result(key: str, value: Any) -> None:
    path = os.environ.get("HIKV_TB_RESULT")
    if not path:
        return
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    data[key] = value
    with open(path, "w") as f:
        json.dump(data, f)


# --------------------------------------------------------------------------- memory models
class PipeMemory:
    """Pipelined AXI4 read slave: accepts requests while ARREADY (random), answers each after
    its own latency (cycles from the AR handshake to the earliest first R beat), beats in
    request order with random gaps, any number of requests in flight. Driven by the cycle loop
    of :class:`TB` (``drive`` after the clock edge, ``sample`` in the read-only phase)."""

    def __init__(self, tb: TB, rng: random.Random, knobs: dict[str, Any],
                 errors: dict[int, int]) -> None:
        self.tb, self.rng, self.k = tb, rng, knobs
        self.errors = errors
        self.queue: list[list[int]] = []   # [addr, beats, ready_cycle, next_beat]
        self.rvalid = False

    def drive(self, cycle: int) -> None:
        dut, bb = self.tb.dut, self.tb.bb
        dut.axi__arready.value = int(self.rng.random() < self.k["ar_ready"])
        if self.rvalid:        # holding an unaccepted beat
            return
        if self.queue and self.queue[0][2] <= cycle and self.rng.random() >= self.k["r_gap"]:
            addr, beats, _, i = self.queue[0]
            a = addr + i * bb
            dut.axi__rdata.value = int.from_bytes(self.tb.mem[a:a + bb], "little")
            dut.axi__rresp.value = self.errors.get(a, 0)
            dut.axi__rlast.value = int(i == beats - 1)
            dut.axi__rid.value = 0
            dut.axi__rvalid.value = 1
            self.rvalid = True
        else:
            dut.axi__rvalid.value = 0

    def on_ar(self, cycle: int, addr: int, beats: int) -> None:
        lo, hi = self.k["latency"]
        self.queue.append([addr, beats, cycle + self.rng.randint(lo, hi), 0])

    def on_r(self) -> None:
        self.rvalid = False
        head = self.queue[0]
        head[3] += 1
        if head[3] == head[1]:
            self.queue.pop(0)

    def idle(self) -> None:
        self.tb.dut.axi__rvalid.value = 0
        self.rvalid = False


def _make_axiram(tb: TB):
    """cocotbext-axi's AxiRamRead on the loader's AXI port, with a latency and error hook."""
    from cocotbext.axi import AxiBus, AxiRamRead  # noqa: F401 (AxiBus: check import)
    from cocotbext.axi.axi_channels import AxiReadBus

    class LatencyRam(AxiRamRead):
        """AxiRamRead with a random delay before the first beat of each burst and SLVERR on
        chosen beats (it answers SLVERR when a read raises)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.bursts: list[int] = []
            self.left = 0
            self.latency = (0, 0)
            self.rng = random.Random(0)
            self.errors: set[int] = set()

        async def _read(self, address: int, length: int) -> bytes:
            if self.left == 0:
                self.left = self.bursts.pop(0) if self.bursts else 1
                delay = self.rng.randint(*self.latency)
                if delay:
                    await ClockCycles(tb.dut.clk, delay)
            self.left -= 1
            if address in self.errors:
                raise OSError(f"injected read error at {address:#x}")
            return await super()._read(address, length)

    logging.getLogger(f"cocotb.{tb.dut._name}.axi_").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\..*")
    bus = AxiReadBus.from_prefix(tb.dut, "axi_")
    ram = LatencyRam(bus, tb.dut.clk, tb.dut.rst, mem=tb.mem)
    return ram


# --------------------------------------------------------------------------- testbench
class TB:
    def __init__(self, dut: Any, seed: int) -> None:
        self.dut = dut
        self.seed = seed
        self.bb = CONF["beat_bytes"]
        self.mem = bytearray(CONF["memory_bytes"])
        self.cycle = 0
        self.lay = CONF["layouts"]
        self.preset = CONF["preset"]
        self.images: dict[str, dict[str, str]] = {}

    async def reset(self) -> None:
        dut = self.dut
        Clock(dut.clk, 10, unit="ns").start()
        inputs = ["cfg__valid", "cfg__payload", "tokens__valid", "tokens__payload",
                  "scfg__valid", "scfg__payload", "scores__valid", "scores__payload", "o__ready",
                  "axi__arready", "axi__rvalid", "axi__rdata", "axi__rresp", "axi__rlast",
                  "axi__rid"]
        for name in inputs:
            if hasattr(dut, name):        # the chained top has scores instead of tokens
                getattr(dut, name).value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await RisingEdge(dut.clk)

    def _fail(self, case: dict[str, Any], what: str, expected: Any, actual: Any) -> Mismatch:
        job = {k: case[k] for k in ("mode", "base", "slots", "kept", "channels")}
        return Mismatch(f"preset {self.preset} seed {self.seed} job {case['name']}: {what}: "
                        f"expected {expected}, actual {actual}; job {job}; "
                        f"knobs {case['knobs']}")

    async def run_case(self, case: dict[str, Any], rng: random.Random, *,
                       memory: str) -> dict[str, Any]:
        """Run one job to completion and check everything; return its measurements."""
        dut = self.dut
        knobs = case["knobs"]
        for a, hx in self.images[case["memory"]].items():
            b = bytes.fromhex(hx)
            self.mem[int(a):int(a) + len(b)] = b
        errors = {int(a): r for a, r in case["error_beats"].items()}
        limit_cfg = knobs.get("outstanding", 0)
        limit = limit_cfg if 1 <= limit_cfg <= CONF["max_outstanding"] else \
            CONF["max_outstanding"]
        tokens = [(s, 0) for s in case["slots"]]
        if knobs.get("disorder"):
            i = rng.randrange(1, len(tokens) + 1)
            tokens.insert(i, (tokens[i - 1][0] - rng.randint(0, min(1, tokens[i - 1][0])), 0))
        tokens[-1] = (tokens[-1][0], 1)
        chain = "scores" in case
        # streams: cfg (and the sorter's scfg) once, then tokens (or the sorter's scores) and
        # the output, with the job's valid / ready probabilities
        base = case["base"] | (1 if knobs.get("misalign_base") else 0)
        cfg_src = StreamSource(dut, "cfg")
        # cfg_mode_code: a layout this loader is not built for, read as the case's dense rows
        cfg_src.queue.append(pack(self.lay["cfg"], mode=case.get("cfg_mode_code",
                                                                 case["mode_code"]), base=base,
                                  kept=case["kept"], outstanding=limit_cfg,
                                  cmask=sum(1 << c for c in case["channels"])))
        sources = [cfg_src]
        if chain:       # the sorter chooses the tokens: drive its configuration and scores
            src = _score_beats(case["scores"])
            c = CONF["chain"]
            scfg_src = StreamSource(dut, "scfg")
            scfg_src.queue.append(pack(c["scfg"], mode=c["stage1"], k=case["k"],
                                       count=len(case["scores"])))
            sources.append(scfg_src)
            tok_src = StreamSource(dut, "scores")
            tok_src.pattern = Pattern.with_duty(knobs["score_valid"], rng)
        else:
            src = [pack(self.lay["tokens"], index=s, last=last) for s, last in tokens]
            tok_src = StreamSource(dut, "tokens")
            tok_src.pattern = Pattern.with_duty(knobs["tok_valid"], rng)
        sources.append(tok_src)
        out = StreamSink(dut, "o")
        out.pattern = Pattern.with_duty(knobs["out_ready"], rng)

        pipe = PipeMemory(self, rng, knobs, errors) if memory == "pipe" else None
        ram = self.ram if memory == "axiram" else None
        if ram is not None:
            ram.latency = tuple(knobs["latency"])
            ram.rng = random.Random(rng.randrange(1 << 30))
            ram.errors = set(errors)
            ram.left = 0
            ram.bursts = []

        ars: list[tuple[int, int, int, int, int]] = []
        ar_cycles: list[int] = []
        r_cycles: list[int] = []
        tok_cycles: list[int] = []
        outs: list[dict[str, int]] = []
        inflight = max_inflight = 0
        obs = {"busy": 0, "ar_stall": 0, "out_stall": 0, "mem_wait": 0}
        start = end = None
        deadline = 200000 + 200 * len(tokens)
        beats_seen = 0
        n_cycles = 0
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            n_cycles += 1
            if n_cycles > deadline:
                raise self._fail(case, "job did not finish", f"< {deadline} cycles",
                                 f"{len(outs)} outputs, {len(ars)} requests")
            # ---- drive
            for s in sources:
                s.drive()
            out.drive()
            if pipe is not None:
                pipe.drive(self.cycle)
            await ReadOnly()
            # ---- sample
            busy = read_int(dut.status__busy)
            arvalid, arready = read_int(dut.axi__arvalid), read_int(dut.axi__arready)
            rvalid, rready = read_int(dut.axi__rvalid), read_int(dut.axi__rready)
            ovalid, oready = read_int(dut.o__valid), read_int(dut.o__ready)
            obs["busy"] += busy
            obs["ar_stall"] += arvalid & (1 - arready)
            obs["out_stall"] += ovalid & (1 - oready)
            obs["mem_wait"] += busy & int(inflight > 0) & (1 - rvalid)
            if cfg_src.sample():
                start = self.cycle
            if chain:
                scfg_src.sample()
            if tok_src.sample():
                tok_cycles.append(self.cycle - start)
            if start is not None and not (chain and scfg_src.queue) and src:
                tok_src.queue.extend(src)      # tokens once the job is configured
                src = []
            word = out.sample()
            if word is not None:
                outs.append(unpack(self.lay["o"], word))
            if arvalid and arready:
                ar = (read_int(dut.axi__araddr), read_int(dut.axi__arlen) + 1,
                      read_int(dut.axi__arsize), read_int(dut.axi__arburst),
                      read_int(dut.axi__arid))
                ars.append(ar)
                ar_cycles.append(self.cycle - start)
                inflight += 1
                max_inflight = max(max_inflight, inflight)
                if pipe is not None:
                    pipe.on_ar(self.cycle, ar[0], ar[1])
                if ram is not None:
                    ram.bursts.append(ar[1])
            if rvalid and rready:
                beats_seen += 1
                r_cycles.append(self.cycle - start)
                if read_int(dut.axi__rlast):
                    inflight -= 1
                if pipe is not None:
                    pipe.on_r()
            if start is not None and self.cycle > start + 1 and not busy \
                    and read_int(dut.status__done):
                end = self.cycle
                break
        if pipe is not None:
            await RisingEdge(dut.clk)
            pipe.idle()
        self._check(case, ars, outs, obs, limit, max_inflight, knobs,
                    _expected_outputs(case, tokens, CONF["page_tokens"]))
        if chain and read_int(dut.sorter_error):
            raise self._fail(case, "sorter error flag", 0, 1)
        return {"name": case["name"], "mode": case["mode"], "tokens": len(case["slots"]),
                "scores": len(case.get("scores", [])),
                "requests": len(ars), "beats": beats_seen, "cycles": end - start,
                "bytes": case["bytes_read"], "ar_cycles": ar_cycles, "r_cycles": r_cycles,
                "tok_cycles": tok_cycles}

    def _check(self, case: dict[str, Any], ars: list, outs: list, obs: dict[str, int],
               limit: int, max_inflight: int, knobs: dict[str, Any],
               want_out: list[dict[str, int]]) -> None:
        dut, bb = self.dut, self.bb
        want_req = [tuple(r) for r in case["requests"]]
        got_req = [(a, n) for a, n, _, _, _ in ars]
        for i, (g, w) in enumerate(zip(got_req, want_req, strict=False)):
            if g != w:
                raise self._fail(case, f"AR {i} (addr, beats)", w, g)
        if len(got_req) != len(want_req):
            raise self._fail(case, "number of AR requests", len(want_req), len(got_req))
        for i, (a, n, size, burst, arid) in enumerate(ars):
            if (size, burst, arid) != (CONF["axsize"], 1, 0):
                raise self._fail(case, f"AR {i} (size, burst, id)", (CONF["axsize"], 1, 0),
                                 (size, burst, arid))
            if a // 4096 != (a + n * bb - 1) // 4096:
                raise self._fail(case, f"AR {i} crosses 4 KiB", "no crossing", (a, n))
        if max_inflight > limit:
            raise self._fail(case, "reads outstanding", f"<= {limit}", max_inflight)
        for i, (g, exp) in enumerate(zip(outs, want_out, strict=False)):
            got = dict(g)
            if exp["err"]:          # data of a beat answered with an error is undefined
                got["data"] = exp["data"]
                if case["mode"] == "masked":     # and so is a mask read from it
                    got["mask"] = exp["mask"]
            if got != exp:
                diff = {k: (hex(exp[k]), hex(g[k])) for k in exp if exp[k] != g[k]}
                raise self._fail(case, f"output {i} (token {exp['token']}) fields (expected, "
                                 f"actual) {diff}", exp, g)
        if len(outs) != len(want_out):
            raise self._fail(case, "number of outputs", len(want_out), len(outs))
        stats = {k: read_int(getattr(dut, f"stats__{k}")) for k in CONF["stats"]}
        want_stats = {"bursts": len(want_req), "bytes": case["bytes_read"],
                      "busy_cycles": obs["busy"], "ar_stall_cycles": obs["ar_stall"],
                      "out_stall_cycles": obs["out_stall"], "mem_wait_cycles": obs["mem_wait"]}
        if stats != want_stats:
            raise self._fail(case, "stats counters", want_stats, stats)
        errs = set(case["error_beats"].values())
        want_status = {"slverr": int(2 in errs), "decerr": int(3 in errs),
                       "err_addr": int(next(iter(case["error_beats"]), 0)),
                       "rlast_error": 0, "order_error": int(bool(knobs.get("disorder"))),
                       "cfg_error": int(bool(knobs.get("misalign_base"))
                                        or "cfg_mode_code" in case)}
        status = {k: read_int(getattr(dut, f"status__{k}")) for k in want_status}
        if status != want_status:
            raise self._fail(case, "status", want_status, status)


def _score_beats(keys: list[int]) -> list[int]:
    """Sorter input beats for Stage I keys of tokens 0..n-1: ``P`` lanes of (key, index), the
    valid mask (all lanes but the tail of the last beat) and ``last`` on the final beat."""
    c = CONF["chain"]["scores"]
    p, lw = c["count"], c["lane_width"]
    beats = []
    for b in range(0, len(keys), p):
        word = 0
        lanes = range(b, min(b + p, len(keys)))
        for j, t in enumerate(lanes):
            base = c["lanes"] + j * lw
            word |= keys[t] << (base + c["key"][0])
            word |= t << (base + c["index"][0])
        word |= ((1 << len(lanes)) - 1) << c["valid"][0]
        word |= int(b + p >= len(keys)) << c["last"][0]
        beats.append(word)
    return beats


def _expected_outputs(case: dict[str, Any], tokens: list[tuple[int, int]],
                      page_tokens: int) -> list[dict[str, int]]:
    """The output stream for the token stream actually sent (which may hold a token out of
    order): golden outputs per slot; a token not above its predecessor gives a skip output
    (err, zero data and mask) in its place -- in page mode ahead of the page then being
    gathered, or after it when it is the last token (hw/loader.py, AddressGen)."""
    gold = {w[0]: {"token": w[0], "data": int(w[1], 16), "mask": int(w[2], 16), "err": w[3]}
            for w in case["outputs"]}
    pages = case["mode"] == "channel_pages"
    order: list[dict[str, int]] = []
    open_page: list[int] = []
    deferred: list[dict[str, int]] = []
    top = -1
    for s, last in tokens:
        if s <= top:
            skip = {"token": s, "data": 0, "mask": 0, "err": 1}
            if pages and last:
                deferred.append(skip)
            else:
                order.append(skip)
            continue
        top = s
        if pages:
            if open_page and open_page[0] // page_tokens != s // page_tokens:
                order += [gold[t] for t in open_page]
                open_page = []
            open_page.append(s)
        else:
            order.append(gold[s])
    order += [gold[t] for t in open_page] + deferred
    return [dict(o, last=int(i == len(order) - 1)) for i, o in enumerate(order)]


async def _run_cases(dut: Any, memory: str, offset: int) -> None:
    seed = CONF["seed"]
    tb = TB(dut, seed)
    await tb.reset()
    if memory == "axiram":
        tb.ram = _make_axiram(tb)
    rng = random.Random(seed * 1000 + offset)
    jobs = _load_jobs()
    tb.images = jobs["images"]
    results = []
    for case in jobs["cases"]:
        if case["knobs"]["memory"] != memory:
            continue
        results.append(await tb.run_case(case, rng, memory=memory))
    _save_result(f"regression_{memory}", results)
    dut._log.info("%s: %d jobs passed (preset %s, seed %d)", memory, len(results),
                  CONF["preset"], seed)


@cocotb.test()
async def loader_axiram(dut: Any) -> None:
    """Jobs against cocotbext-axi's AxiRamRead."""
    await _run_cases(dut, "axiram", 1)


@cocotb.test()
async def loader_pipe(dut: Any) -> None:
    """Jobs against the pipelined slave model (deep outstanding, DECERR, disorder)."""
    await _run_cases(dut, "pipe", 2)


def _geometry() -> Any:
    from hikv.hw.loader_timing import LoaderGeometry
    from hikv.params import KVLayout, LoaderParams

    c = CONF["config"]
    return LoaderGeometry(KVLayout(**c["layout"]), LoaderParams(**c["loader"]))


@cocotb.test()
async def loader_timing(dut: Any) -> None:
    """Fixed read latency, no backpressure: measured cycles against the timing contract
    (:func:`hikv.hw.loader_timing.job_timing`, cycle-exact) and the steady-state bandwidth
    formula (:func:`hikv.hw.loader_timing.steady_bytes_per_cycle`, long dense jobs)."""
    from hikv.hw.loader_timing import job_timing, steady_bytes_per_cycle

    seed = CONF["seed"]
    geo = _geometry()
    tb = TB(dut, seed)
    await tb.reset()
    rng = random.Random(seed * 1000 + 3)
    rows = []
    jobs = _load_jobs()
    tb.images = jobs["images"]
    for case in jobs["timing"]:
        r = await tb.run_case(case, rng, memory="pipe")
        lat, lim = case["knobs"]["latency"][0], case["knobs"]["outstanding"]
        model = job_timing(geo, mode=case["mode"], slots=case["slots"], base=case["base"],
                           kept=case["kept"], channels=case["channels"], latency=lat,
                           outstanding=lim)
        if [list(q) for q in model.requests] != [list(q) for q in case["requests"]]:
            raise tb._fail(case, "timing model requests", case["requests"], model.requests)
        if r["cycles"] != model.cycles:
            raise tb._fail(case, f"cycles at latency {lat}, {lim} outstanding "
                           "(job_timing, cycle-exact)", model.cycles, r["cycles"])
        row = {"name": case["name"], "mode": case["mode"], "latency": lat, "outstanding": lim,
               "tokens": r["tokens"], "beats": r["beats"], "requests": r["requests"],
               "cycles": r["cycles"], "model": model.cycles}
        beats = geo.loader.max_burst_beats
        if case["name"].startswith("timing-dense-all") and r["beats"] >= 10 * (lat + beats + 10):
            # steady state: full requests back to back, against the closed form (on jobs long
            # enough that the fixed cycles of a job are a few percent of it)
            want = steady_bytes_per_cycle(geo, latency=lat, outstanding=lim,
                                          request_beats=beats)
            got = r["beats"] * geo.beat_bytes / r["cycles"]
            row["steady_model"] = want
            row["steady_measured"] = got
            if abs(got - want) > 0.05 * want:
                raise tb._fail(case, f"bytes per cycle at latency {lat}, {lim} outstanding "
                               "(steady_bytes_per_cycle, within 5%)", want, got)
        rows.append(row)
    _save_result("timing", rows)
    dut._log.info("timing: %d jobs, cycles equal to the model in all", len(rows))
