"""Accuracy of HiKV and the baselines on a real LM, with real decoding.

Every evaluation drives a model loaded by :func:`hikv.model.lm.runner.load_lm`; each method's caches
make their decisions step by step as decoding proceeds (nothing is masked after the fact).
Several methods share one prompt pass and are then decoded side by side, batched through the
model's dense layers (:func:`hikv.model.lm.runner.step`); each keeps its own caches.

* :func:`perplexity`: teacher-forced perplexity on long text. Each window of ``window`` tokens
  is split into a prompt of ``prefix`` tokens (prefilled with full attention, as every method
  does) and the rest, fed token by token through ``decode``; the loss counts the predictions
  made by decode steps only (``window - prefix - 1`` per window).
* :func:`passkey`: the passkey (needle) test: a 5-digit key hidden at a depth of a haystack
  (the classic repeated filler, or Paul Graham essays), then the question; teacher-forced: a
  trial passes when every answer token is the model's top-1 prediction (the same as greedy
  decoding producing the key). ``question="decode"`` feeds the question through decode after
  a prefill of the haystack (the cache policy decides before it knows the question);
  ``question="prefill"`` prefills the haystack and the question but its last token.
* :func:`fidelity`: per layer, the relative L2 error and cosine of each method's attention output
  against full attention over every token on the same inputs, at each decode step.
* :func:`capture`: real q, k, v (RoPE applied) and attention probabilities of chosen layers, for
  the RTL tests and the cost model.
* The tables of these rows (the iso-accuracy table, protocols, Wilson intervals) are in
  :mod:`hikv.model.accuracy.iso`; this module re-exports their names.

Bytes are the methods' own :class:`~hikv.model.refs.layout.ByteAccount`\\ s: per decode step, per
(layer, KV head) of the layers the method manages, ideal and at burst granularity, metadata
included, averaged over every decode step of the perplexity windows.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any

import torch

from hikv.model.accuracy import tasks as T
from hikv.model.accuracy.iso import (
    ALL_TOKENS,
    NLL_BLOCK,
    PPL_PROTOCOL,
    PROTOCOLS,
    QUESTION_ALIASES,
    family,
    is_think,
    iso_accuracy_file,
    iso_table,
    iso_table_tasks,
    keeps_every_token,
    nll_block_sums,
    protocol_name,
    reductions,
    select_rows,
    split_prompt,
    task_rows_as_cells,
    wilson,
)
from hikv.model.lm.runner import LM, Sequence, adopt_prefill, greedy, prefill, step
from hikv.model.refs.layout import ByteAccount
from hikv.params import (
    Config,
    HiKVPolicy,
    MethodSpec,
    ParamError,
    Stage1Variant,
    Stage2Rule,
    parse_method,
    to_dict,
)
from hikv.presets import baselines_at

__all__ = [
    "parse_method",
    "family",
    "baseline_specs",
    "hikv_spec",
    "text_windows",
    "perplexity",
    "PasskeyCase",
    "passkey_case",
    "passkey",
    "PROTOCOLS",
    "protocol_name",
    "wilson",
    "task_accuracy",
    "fidelity",
    "capture",
    "iso_table",
    "CLASSIC_FILLER",
    # re-exported from hikv.model.accuracy.iso for callers of ``A.<name>``
    "QUESTION_ALIASES", "PPL_PROTOCOL", "split_prompt", "reductions", "iso_accuracy_file",
    "task_rows_as_cells", "select_rows", "iso_table_tasks", "is_think", "keeps_every_token",
    "ALL_TOKENS",
]

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# =========================================================================== method labels
# parse_method lives beside MethodSpec.label in hikv.params (imported above for callers here)


_RULE_B = re.compile(r"^(?:B=)?N/(?P<den>\d+)$")


def resolve_budget(rule: str | int, length: int) -> int:
    """A budget from a fixed one (``256``) or a fraction of the context length ``length``
    (``N/16`` or ``B=N/16``: ``length // 16``)."""
    if isinstance(rule, int) or str(rule).isdigit():
        b = int(rule)
    else:
        m = _RULE_B.match(str(rule).replace(" ", ""))
        if m is None or int(m["den"]) < 1:
            raise ParamError(f"budget = {rule!r} is not a budget: use a number (256) or a "
                             "fraction of the length (N/16 or B=N/16)")
        b = length // int(m["den"])
    if b < 1:
        raise ParamError(f"budget = {rule!r} at length {length} is {b}: allowed >= 1")
    return b


def budget_rule_name(rule: str | int) -> str:
    """``B=N/16`` for ``N/16`` (or ``B=N/16``), ``B=256`` for ``256``."""
    r = str(rule).replace(" ", "")
    return r if r.startswith("B=") else f"B={r}"


def baseline_specs(budgets: Iterable[int], policy: HiKVPolicy, head_dim: int
                   ) -> list[MethodSpec]:
    """H2O, SnapKV, Quest, SparQ and Double Sparsity at each budget
    (:func:`hikv.presets.baselines_at`, the operating point's settings)."""
    return [s for b in budgets for s in baselines_at(b, policy, head_dim).values()]


def hikv_spec(policy: HiKVPolicy, *, budget: int | None = None,
              stage1: Stage1Variant | None = None, k_rule: Stage2Rule | None = None,
              v_rule: Stage2Rule | None = None) -> MethodSpec:
    """HiKV with ``policy``'s fields, some replaced."""
    b = policy.budget if budget is None else budget
    pol = dataclasses.replace(
        policy, budget=b, recent=min(policy.recent, max(0, b - policy.sinks)),
        stage1=policy.stage1 if stage1 is None else stage1,
        k_rule=policy.k_rule if k_rule is None else k_rule,
        v_rule=policy.v_rule if v_rule is None else v_rule)
    return MethodSpec.for_hikv(pol)


def _spec_row(spec: MethodSpec) -> dict[str, Any]:
    d = to_dict(spec)
    hk = d.pop("hikv")
    row = {"label": spec.label, "family": family(spec), **d}
    if hk:
        row.update({f"hikv_{k}": (v if not isinstance(v, dict) else
                                  f"{v['kind']}:{v['keep']}:{v['group']}")
                    for k, v in hk.items()})
    return row


# =========================================================================== text
def text_windows(lm: LM, text: str, window: int, count: int, *,
                 scored: int | None = None) -> list[list[int]]:
    """``count`` windows of ``window`` tokens, evenly spread over ``text``; each starts with
    the tokenizer's default prefix (e.g. ``<bos>``). Windows do not overlap unless ``scored``
    is given: then only the last ``scored`` tokens of each window must be disjoint from the
    others' (a perplexity window scores only its decoded tail; its prefilled context may
    overlap the previous window's), so more windows fit a text of a given length."""
    ids = lm.encode(text)
    pre = lm.prefix_ids
    body = window - len(pre)
    if body < 2:
        raise ParamError(f"window = {window} is out of range: allowed >= {len(pre) + 2}")
    if count < 1:
        raise ParamError(f"count = {count} is out of range: allowed >= 1")
    if scored is not None and not 1 <= scored <= body:
        raise ParamError(f"scored = {scored} is out of range: allowed 1 to {body}")
    disjoint = body if scored is None else scored
    if body > len(ids) or (count > 1 and (len(ids) - body) // (count - 1) < disjoint):
        need = body + (count - 1) * disjoint
        what = "windows of" if scored is None else f"windows (last {scored} tokens disjoint) of"
        raise ParamError(f"{count} {what} {window} tokens need {need} tokens; the text has "
                         f"{len(ids)}")
    step_ = (len(ids) - body) // max(1, count - 1) if count > 1 else 0
    return [pre + ids[i * step_: i * step_ + body] for i in range(count)]


def _batches(items: list, size: int) -> list[list]:
    return [items[i: i + size] for i in range(0, len(items), size)]


#: memory the K/V copies of the methods decoded side by side may take (bytes, float32)
KV_MEMORY_BYTES = 6 * 2**30


def _cap_batch(lm: LM, batch: int, tokens: int) -> int:
    """``batch`` limited so that that many full-length caches fit :data:`KV_MEMORY_BYTES`."""
    s = lm.shape
    per_seq = tokens * s.layers * s.kv_heads * s.head_dim * 4 * 2
    return max(1, min(batch, KV_MEMORY_BYTES // max(1, per_seq)))


def _shared_prefill(lm: LM, specs: Seq[MethodSpec], cfg: Config, ctx: Seq[int], cap: int,
                    share: bool = True
                    ) -> Iterator[tuple[list[int], list[Sequence], torch.Tensor]]:
    """``(spec indices, fresh sequences after the prompt, prompt logits)`` per batch of at
    most ``cap`` specs. The prompt runs through the model once: the first batch's pass also
    records what the later batches' caches need (:func:`hikv.model.lm.runner.adopt_prefill`), so
    every method of a trial starts from the same single prefill (``share=False``: one pass
    per batch, the same states)."""
    chunks = _batches(list(range(len(specs))), cap)
    pending: list[Sequence | None] = [Sequence(lm, sp, cfg) for sp in specs]
    record = None
    for chunk in chunks:
        seqs = [pending[i] for i in chunk]
        assert all(x is not None for x in seqs)
        ready: list[Sequence] = seqs  # type: ignore[assignment]
        if record is None or not share:
            # the later batches, for what the record must hold; not kept in a local name,
            # which would keep every batch's caches alive until the last batch ends
            logits = prefill(lm, ready, ctx, record_for=[x for x in pending if x is not None]
                             if share and len(chunks) > 1 else None)
            record = lm.last_prefill
        else:
            logits = adopt_prefill(lm, ready, record)
        yield chunk, ready, logits
        for i in chunk:
            pending[i] = None
    lm.last_prefill = None


def _eta(t0: float, done: float, total: float) -> str:
    el = time.perf_counter() - t0
    if done <= 0:
        return f"{el:.0f} s"
    return f"{el:.0f} s, ETA {el / done * (total - done):.0f} s"


def _bytes_row(total: ByteAccount, steps: int, units: int) -> dict[str, float]:
    if steps == 0 or units == 0:
        return {}
    d = total.as_dict()
    return {f"bytes_{k}": v / (steps * units) for k, v in d.items()}


def _account_delta(now: ByteAccount, before: ByteAccount) -> dict[str, Any]:
    """The fields of ``now - before`` (what one window added to a method's account)."""
    return {f.name: getattr(now, f.name) - getattr(before, f.name)
            for f in dataclasses.fields(now)}


# =========================================================================== perplexity
def perplexity(lm: LM, specs: Seq[MethodSpec], cfg: Config, windows: Seq[Seq[int]],
               prefix: int, *, batch: int = 64, log: Log = _quiet,
               share_prefill: bool = True, resume: Seq[dict[str, Any]] = (),
               on_window: Callable[[int, dict[str, Any]], None] | None = None,
               stop: Callable[[int, list[dict[str, Any]]], Iterable[str]] | None = None,
               until: int | None = None) -> list[dict[str, Any]]:
    """Teacher-forced perplexity of each spec over ``windows`` (see the module docstring).

    Returns one row per spec: ``ppl``, ``nll`` (mean, nats), ``tokens``, ``ppl_w<i>`` per
    window, ``nll_blocks`` (per window, the NLL sums of consecutive blocks of
    ``nll_block_tokens`` = :data:`~hikv.model.accuracy.iso.NLL_BLOCK` predictions: the paired
    non-inferiority test's data, :func:`~hikv.model.accuracy.iso.ppl_increase_bound`), and
    ``bytes_*`` per decode step per (layer, KV head) (ideal, burst, k/v/meta,
    resident, tokens), plus ``units`` (layer, KV head pairs counted), ``length`` (the window),
    ``windows`` (the windows the spec ran), ``windows_planned`` (``len(windows)``) and
    ``protocol`` = :data:`PPL_PROTOCOL` (no question: the rows serve both protocols).

    ``stop(n, rows)`` (a sequential cell), called once ``n`` windows are done with the rows of
    the specs still running (over those ``n`` windows), returns the labels that run no further:
    their rows keep their first ``n`` windows. (The methods still running decode in batches of
    their own from then on; a batch's matrix products round in the last bits differently with
    its size, so a row equals an unstopped run's exactly at ``batch = 1`` only.)

    ``on_window(i, record)`` is called after window ``i`` with what the rows need of it (per
    label of the specs that ran it: the NLL sum and count, per-token NLLs, byte account and
    steps; ``units``); ``resume`` holds such records of windows ``0 .. len(resume) - 1`` from an
    earlier run, which are not decoded again (the rows are the same as an uninterrupted run's;
    a spec missing from a record had stopped before that window). ``until``: decode no window
    from index ``until`` on (the rows are those of the windows before it; with ``resume``
    covering them, a replay that decodes nothing: where ``stop`` leaves a cell after them).
    """
    specs = list(specs)
    if not specs:
        return []
    for w in windows:
        if not 0 < prefix < len(w) - 1:
            raise ParamError(f"prefix = {prefix} is out of range: allowed [1, {len(w) - 2}] "
                             f"for windows of {len(w)} tokens")
    nll = [[0.0] * len(windows) for _ in specs]
    cnt = [[0] * len(windows) for _ in specs]
    tok: list[list[list[float]]] = [[[] for _ in windows] for _ in specs]
    acc = [ByteAccount() for _ in specs]
    steps = [0] * len(specs)
    ran = [0] * len(specs)                      # windows each spec ran (a prefix of them)
    units = 0
    t0 = time.perf_counter()
    batch = _cap_batch(lm, batch, max(len(w) for w in windows))
    labels = [s.label for s in specs]
    active = list(range(len(specs)))

    def rows_of(idx: Seq[int]) -> list[dict[str, Any]]:
        out = []
        for i in idx:
            n_w, s = ran[i], specs[i]
            n = sum(cnt[i][:n_w])
            out.append({
                **_spec_row(s), "ppl": math.exp(sum(nll[i][:n_w]) / n),
                "nll": sum(nll[i][:n_w]) / n, "tokens": n, "windows": n_w,
                "windows_planned": len(windows), "prefix": prefix,
                "window": len(windows[0]), "length": len(windows[0]),
                "protocol": PPL_PROTOCOL, "units": units,
                **{f"ppl_w{w}": math.exp(nll[i][w] / cnt[i][w]) for w in range(n_w)},
                # the paired test's data (hikv.model.accuracy.iso.ppl_increase_bound)
                "nll_block_tokens": NLL_BLOCK,
                "nll_blocks": [[round(x, 6) for x in nll_block_sums(t)] for t in tok[i][:n_w]],
                **_bytes_row(acc[i], steps[i], units)})
        return out

    def stops(n: int) -> None:
        nonlocal active
        if stop is None or not active:
            return
        gone = set(stop(n, rows_of(active)))
        if gone:
            active = [i for i in active if labels[i] not in gone]
            log(f"  perplexity: {len(gone)} method(s) decided after {n} window(s), "
                f"{len(active)} running")

    for wi, rec in enumerate(resume[:len(windows)]):
        units = int(rec["units"])
        active = [i for i in active if labels[i] in rec["methods"]]
        for i in active:
            m = rec["methods"][labels[i]]
            nll[i][wi], cnt[i][wi], tok[i][wi] = float(m["nll"]), int(m["cnt"]), list(m["tok"])
            acc[i] = acc[i] + ByteAccount(**m["acc"])
            steps[i] += int(m["steps"])
            ran[i] += 1
    if resume:
        log(f"  perplexity: {min(len(resume), len(windows))} window(s) resumed")
        stops(min(len(resume), len(windows)))
    done = 0
    for wi, ids in enumerate(windows):
        if wi < len(resume):
            continue
        if not active or (until is not None and wi >= until):
            break
        acc0, steps0 = list(acc), list(steps)
        run = [specs[i] for i in active]
        left = sum(len(w) - 1 - prefix for w in windows[wi:]) * len(active)
        for chunk_, seqs, _ in _shared_prefill(lm, run, cfg, ids[:prefix], batch,
                                               share_prefill):
            chunk = [active[j] for j in chunk_]
            units = seqs[0].units
            n_dec = len(ids) - 1 - prefix
            for t in range(prefix, len(ids) - 1):
                lg = step(lm, seqs, [ids[t]] * len(seqs))
                lp = torch.log_softmax(lg, -1)[:, ids[t + 1]]
                for b, i in enumerate(chunk):
                    nll[i][wi] -= float(lp[b])
                    tok[i][wi].append(-float(lp[b]))
                    cnt[i][wi] += 1
                done += len(chunk)
                k = t - prefix + 1
                if k % 128 == 0 or k == n_dec:
                    log(f"  perplexity window {wi + 1}/{len(windows)} step {k}/{n_dec} "
                        f"({len(chunk)} methods) {_eta(t0, done, done + left)}")
            left -= n_dec * len(chunk)
            for b, i in enumerate(chunk):
                for a in seqs[b].accounts:
                    acc[i] = acc[i] + a
                steps[i] += len(seqs[b].accounts)
            # this batch's caches go before the next batch's are made (the loop variable
            # would hold them until then: two batches' caches at once)
            del seqs
        for i in active:
            ran[i] += 1
        if on_window is not None:
            on_window(wi, {"units": units, "methods": {
                labels[i]: {"nll": nll[i][wi], "cnt": cnt[i][wi], "tok": tok[i][wi],
                            "acc": _account_delta(acc[i], acc0[i]),
                            "steps": steps[i] - steps0[i]}
                for i in active}})
        stops(wi + 1)
    return rows_of(range(len(specs)))


# =========================================================================== passkey
CLASSIC_INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it "
                 "and memorize it. I will quiz you about the important information there.")
CLASSIC_FILLER = (" The grass is green. The sky is blue. The sun is yellow. Here we go. There "
                  "and back again.")
NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = " What is the pass key? The pass key is"


@dataclass(frozen=True)
class PasskeyCase:
    """One passkey prompt: ``haystack`` (prefix, intro, filler with the needle inside), then
    ``question`` and ``answer`` token ids; ``needle_at`` is the needle's first token index."""

    haystack: list[int]
    question: list[int]
    answer: list[int]
    key: str
    needle_at: int
    depth: float

    @property
    def length(self) -> int:
        return len(self.haystack) + len(self.question)


def passkey_case(lm: LM, length: int, depth: float, key: str, filler: str = "classic", *,
                 essay_ids: Seq[int] | None = None, rng: random.Random | None = None
                 ) -> PasskeyCase:
    """A prompt of about ``length`` tokens (haystack + question) with the needle at ``depth``
    (0 = start of the filler, 1 = end). ``filler`` is ``classic`` (the repeated sentences of
    the passkey-retrieval literature) or ``essays`` (needs ``essay_ids``; a random offset from
    ``rng``)."""
    if not 0.0 <= depth <= 1.0:
        raise ParamError(f"depth = {depth} is out of range: allowed [0, 1]")
    intro = lm.prefix_ids + lm.encode(CLASSIC_INTRO)
    needle = lm.encode(NEEDLE.format(key=key))
    question = lm.encode(QUESTION)
    answer = lm.encode(" " + key)
    n_fill = length - len(intro) - len(needle) - len(question)
    if n_fill < 16:
        raise ParamError(f"length = {length} is out of range: allowed >= "
                         f"{len(intro) + len(needle) + len(question) + 16}")
    if filler == "classic":
        unit = lm.encode(CLASSIC_FILLER)
        units = max(1, n_fill // len(unit))
        before = round(depth * units)
        hay = unit * before + needle + unit * (units - before)
        at = len(intro) + len(unit) * before
    elif filler == "essays":
        if essay_ids is None or len(essay_ids) < n_fill + 1:
            raise ParamError("filler 'essays' needs essay_ids longer than the filler")
        rng = rng or random.Random(0)
        off = rng.randrange(0, len(essay_ids) - n_fill)
        text = list(essay_ids[off: off + n_fill])
        cut = round(depth * n_fill)
        # move the needle to a sentence end (a token ending in '.') within 64 tokens after
        for j in range(cut, min(n_fill, cut + 64)):
            if j == 0 or lm.decode([text[j - 1]]).rstrip().endswith("."):
                cut = j
                break
        hay = text[:cut] + needle + text[cut:]
        at = len(intro) + cut
    else:
        raise ParamError(f"filler = {filler!r} is not one of 'classic', 'essays'")
    return PasskeyCase(haystack=intro + hay, question=question, answer=answer, key=key,
                       needle_at=at, depth=depth)


def passkey(lm: LM, specs: Seq[MethodSpec], cfg: Config, *, lengths: Seq[int],
            depths: Seq[float], trials: int, filler: str = "classic",
            question: str = "decode", essay_text: str | None = None, seed: int = 0,
            batch: int = 64, log: Log = _quiet, protocol: str | None = None
            ) -> list[dict[str, Any]]:
    """Passkey retrieval of each spec per (length, depth) cell; one row per spec and cell with
    ``correct``, ``trials``, ``accuracy`` and ``answer_logprob`` (mean, nats), ``protocol``
    and its alias ``question``. ``protocol`` (``prompt`` or ``follow-up``, see
    :func:`split_prompt`) replaces ``question`` (``prefill`` or ``decode``) when given."""
    if question not in ("decode", "prefill"):
        raise ParamError(f"question = {question!r} is not one of 'decode', 'prefill'")
    proto = protocol_name(protocol if protocol is not None else question)
    question = {v: k for k, v in QUESTION_ALIASES.items()}[proto]
    if trials < 1:
        raise ParamError(f"trials = {trials} is out of range: allowed >= 1")
    specs = list(specs)
    essay_ids = lm.encode(essay_text) if filler == "essays" and essay_text else None
    rng = random.Random(seed)
    cells = [(L, d) for L in lengths for d in depths]
    results: dict[tuple[int, float], list[list[tuple[bool, float]]]] = {
        c: [[] for _ in specs] for c in cells}
    t0 = time.perf_counter()
    total = len(cells) * trials
    n = 0
    for (L, d) in cells:
        for _ in range(trials):
            key = str(rng.randrange(10000, 100000))
            case = passkey_case(lm, L, d, key, filler, essay_ids=essay_ids, rng=rng)
            ctx, feed = split_prompt(case.haystack, case.question, proto)
            feed = feed + case.answer[:-1]
            first_ans = len(feed) - len(case.answer)
            cap = _cap_batch(lm, batch, case.length)
            for chunk, seqs, _ in _shared_prefill(lm, specs, cfg, ctx, cap):
                ok = [True] * len(chunk)
                lp = [0.0] * len(chunk)
                for j, tok in enumerate(feed):
                    lg = step(lm, seqs, [tok] * len(seqs))
                    if j >= first_ans:
                        target = case.answer[j - first_ans]
                        logp = torch.log_softmax(lg, -1)[:, target]
                        top = lg.argmax(-1)
                        for b in range(len(chunk)):
                            ok[b] &= int(top[b]) == target
                            lp[b] += float(logp[b])
                for b, i in enumerate(chunk):
                    results[(L, d)][i].append((ok[b], lp[b]))
            n += 1
            log(f"  passkey {filler}/{proto} length {L} depth {d:.2f} trial "
                f"{n}/{total} {_eta(t0, n, total)}")
    rows = []
    for (L, d), per in results.items():
        for i, s in enumerate(specs):
            r = per[i]
            c = sum(1 for ok, _ in r if ok)
            rows.append({**_spec_row(s), "filler": filler, "protocol": proto,
                         "question": question, "length": L, "depth": d, "trials": len(r),
                         "correct": c,
                         "accuracy": c / len(r), "answer_logprob": sum(x for _, x in r) / len(r),
                         "seed": seed})
    return rows


# =========================================================================== tasks
Progress = Callable[[int], None]


def _generate(lm: LM, specs: Seq[MethodSpec], cfg: Config, ctx: Seq[int], feed: Seq[int],
              references: Seq[str], max_new: int, batch: int, share: bool = True
              ) -> list[list[int]]:
    """Greedy answers of every spec: one prefill of ``ctx`` shared by each batch of specs,
    ``feed`` through decode, then up to ``max_new`` generated tokens per spec (stopping at end
    of sequence or once every reference appears, after which the score cannot change)."""
    outs: list[list[int]] = [[] for _ in specs]
    cap = _cap_batch(lm, batch, len(ctx) + len(feed) + max_new)
    for chunk, seqs, first in _shared_prefill(lm, specs, cfg, ctx, cap, share):
        for b, o in enumerate(_answer(lm, seqs, first, feed, references, max_new)):
            outs[chunk[b]] = o
        del seqs                # one batch's caches at a time (see perplexity)
    return outs


def _answer(lm: LM, seqs: Seq[Sequence], first: torch.Tensor, feed: Seq[int],
            references: Seq[str], max_new: int) -> list[list[int]]:
    """:func:`_generate`'s answers of prefilled ``seqs`` (``first``: the prompt's logits)."""
    eos = getattr(lm.tokenizer, "eos_token_id", None)
    return greedy(lm, seqs, first, feed, max_new, lambda o: o[-1] == eos or T.score(
        lm.decode(o), references) >= 1.0)


def task_accuracy(lm: LM, specs: Seq[MethodSpec], cfg: Config, *, task: str, length: int,
                  trials: int, protocol: str, seed: int = 0, words: Seq[str] = (),
                  batch: int = 64, log: Log = _quiet, progress: Progress | None = None,
                  share_prefill: bool = True) -> list[dict[str, Any]]:
    """Accuracy of each spec on ``trials`` cases of ``task`` (:mod:`hikv.model.accuracy.tasks`) at
    ``length`` tokens under ``protocol`` (:func:`split_prompt`).

    Case ``i`` is drawn from ``random.Random(f"{seed}/{task}/{length}/{i}")``, so both
    protocols (and every run, in any order or process) see the same prompts. Answers are
    generated greedily through each method's cache and scored with RULER's
    ``string_match_all`` (:func:`hikv.model.accuracy.tasks.score`). One row per spec: ``task``,
    ``protocol``, ``length``, ``trials``, ``score_sum``, ``correct`` (trials scoring 1),
    ``accuracy`` (mean score), ``ci_low`` / ``ci_high`` (95 % Wilson interval),
    ``prompt_tokens`` (mean), ``scores`` (per trial) and ``sample`` (trial 0's answer of the
    spec). ``progress(1)`` is called after every trial. Each trial's prompt runs through the
    model once for all specs, however many batches they take (``share_prefill``; see
    :func:`hikv.model.lm.runner.adopt_prefill`).
    """
    proto = protocol_name(protocol)
    if trials < 1:
        raise ParamError(f"trials = {trials} is out of range: allowed >= 1")
    specs = list(specs)
    scores: list[list[float]] = [[] for _ in specs]
    samples = [""] * len(specs)
    n_prompt = 0
    t0 = time.perf_counter()
    for i in range(trials):
        case = T.make_case(lm, task, length, random.Random(f"{seed}/{task}/{length}/{i}"),
                           words=words)
        n_prompt += case.length
        ctx, feed = split_prompt(case.context, case.question, proto)
        outs = _generate(lm, specs, cfg, ctx, feed, case.references, case.max_new, batch,
                         share_prefill)
        for b, o in enumerate(outs):
            text = lm.decode(o)
            scores[b].append(T.score(text, case.references))
            if i == 0:
                samples[b] = text
        if progress is not None:
            progress(1)
        log(f"  {task}/{proto} length {length} trial {i + 1}/{trials} "
            f"{_eta(t0, i + 1, trials)}")
    rows = []
    for b, s in enumerate(specs):
        tot = sum(scores[b])
        lo, hi = wilson(tot, trials)
        rows.append({**_spec_row(s), "task": task, "protocol": proto, "length": length,
                     "trials": trials, "score_sum": tot,
                     "correct": sum(1 for x in scores[b] if x >= 1.0),
                     "accuracy": tot / trials, "ci_low": lo, "ci_high": hi,
                     "prompt_tokens": n_prompt / trials, "scores": scores[b],
                     "sample": samples[b], "seed": seed})
    return rows


# =========================================================================== fidelity
def fidelity(lm: LM, specs: Seq[MethodSpec], cfg: Config, ids: Seq[int], prefix: int, *,
             batch: int = 64, log: Log = _quiet) -> list[dict[str, Any]]:
    """Attention-output fidelity per method layer: prefill ``ids[:prefix]``, decode the rest
    teacher-forced; rows per spec and layer with the mean and 90th percentile relative error
    and the mean and 10th percentile cosine over decode steps (all query heads together)."""
    specs = list(specs)
    rows = []
    t0 = time.perf_counter()
    for chunk in _batches(specs, _cap_batch(lm, batch, 2 * len(ids))):
        seqs = [Sequence(lm, s, cfg, fidelity=True) for s in chunk]
        prefill(lm, seqs, ids[:prefix])
        n_dec = len(ids) - prefix
        for t in range(prefix, len(ids)):
            step(lm, seqs, [ids[t]] * len(seqs))
            k = t - prefix + 1
            if k % 64 == 0 or k == n_dec:
                log(f"  fidelity step {k}/{n_dec} ({len(chunk)} methods) "
                    f"{_eta(t0, k, n_dec)}")
        layers = lm.shape.method_layers
        for s, sq in zip(chunk, seqs, strict=True):
            assert sq.fidelity is not None
            rel = torch.tensor(sq.fidelity.rel_err)     # [steps, layers]
            cos = torch.tensor(sq.fidelity.cosine)
            for j, layer in enumerate(layers):
                rows.append({**_spec_row(s), "layer": layer, "steps": rel.shape[0],
                             "rel_err_mean": float(rel[:, j].mean()),
                             "rel_err_p90": float(torch.quantile(rel[:, j], 0.9)),
                             "cosine_mean": float(cos[:, j].mean()),
                             "cosine_p10": float(torch.quantile(cos[:, j], 0.1))})
    return rows


# =========================================================================== capture
def capture(lm: LM, cfg: Config, ids: Seq[int], layers: Seq[int], prefix: int, *,
            prob_rows: int = 32) -> dict[str, Any]:
    """Real attention inputs of ``layers`` under full KV: prefill ``ids[:prefix]`` then decode
    the rest. Returns a dict (save with ``torch.save``) with, per layer: ``q`` [Hq, T, d],
    ``k``/``v`` [Hkv, T, d] (T = len(ids), RoPE applied, float32), ``probs_decode``
    [Hq, T - prefix, T] (each decode query's probabilities over keys up to it, zeros after),
    ``probs_prefill_last`` [Hq, prob_rows, prefix] (the last prompt queries), ``scale``,
    ``window`` (sliding window or None); and ``meta`` (model, ids, prefix)."""
    bad = [i for i in layers if not 0 <= i < lm.shape.layers]
    if bad:
        raise ParamError(f"layers {bad} are out of range: allowed [0, {lm.shape.layers - 1}]")
    seq = Sequence(lm, MethodSpec(), cfg, capture=layers)
    prefill(lm, [seq], ids[:prefix])
    for t in range(prefix, len(ids)):
        step(lm, [seq], [ids[t]])
    out: dict[str, Any] = {"meta": {"model": lm.shape.name, "source": lm.source,
                                    "prefix": prefix, "ids": list(ids),
                                    "shape": dataclasses.asdict(lm.shape)}, "layers": {}}
    sc = lm.shape.scale
    for layer in layers:
        t = seq.captured_tensors(layer)
        q, k, v = t["q"], t["k"], t["v"]
        g = lm.shape.q_heads // lm.shape.kv_heads
        kx = k.repeat_interleave(g, 0)
        n = k.shape[1]
        win = lm.shape.windows[layer]
        pos = torch.arange(n)
        logits = torch.matmul(q[:, prefix:], kx.transpose(-1, -2)) * sc   # [Hq, S, n]
        qp = pos[prefix:, None]
        ok = pos[None, :] <= qp
        if win is not None:
            ok &= pos[None, :] > qp - win
        pd = torch.softmax(logits.masked_fill(~ok, float("-inf")), -1)
        r0 = max(0, prefix - prob_rows)
        lp = torch.matmul(q[:, r0:prefix], kx[:, :prefix].transpose(-1, -2)) * sc
        qp2 = pos[r0:prefix, None]
        ok2 = pos[None, :prefix] <= qp2
        if win is not None:
            ok2 &= pos[None, :prefix] > qp2 - win
        pp = torch.softmax(lp.masked_fill(~ok2, float("-inf")), -1)
        out["layers"][layer] = {"q": q, "k": k, "v": v, "probs_decode": pd,
                                "probs_prefill_last": pp, "scale": sc, "window": win}
    return out

