"""Accuracy of HiKV and the baselines on a real LM, with real decoding.

Every evaluation drives a model loaded by :func:`hikv.model.lm.load_lm`; each method's caches
make their decisions step by step as decoding proceeds (nothing is masked after the fact).
Several methods share one prompt pass and are then decoded side by side, batched through the
model's dense layers (:func:`hikv.model.lm.step`); each keeps its own caches.

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
* :func:`iso_table`: per method family the smallest budget that keeps perplexity within a
  tolerance of full KV and passkey accuracy unchanged, with its bytes per decode step.

Bytes are the methods' own :class:`~hikv.model.layout.ByteAccount`\\ s: per decode step, per
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

from . import tasks as T
from .layout import ByteAccount
from .lm import LM, Sequence, adopt_prefill, prefill, step

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


def family(spec: MethodSpec) -> str:
    """The label without the budget: ``h2o``, ``sparq/r16``, ``hikv-evict/v:static48``."""
    return re.sub(r"@\d+", "", spec.label)


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
def text_windows(lm: LM, text: str, window: int, count: int) -> list[list[int]]:
    """``count`` non-overlapping windows of ``window`` tokens, evenly spread over ``text``;
    each starts with the tokenizer's default prefix (e.g. ``<bos>``)."""
    ids = lm.encode(text)
    pre = lm.prefix_ids
    body = window - len(pre)
    if body < 2:
        raise ParamError(f"window = {window} is out of range: allowed >= {len(pre) + 2}")
    if count < 1:
        raise ParamError(f"count = {count} is out of range: allowed >= 1")
    if count * body > len(ids):
        raise ParamError(f"{count} windows of {window} tokens need {count * body} tokens; the "
                         f"text has {len(ids)}")
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
    records what the later batches' caches need (:func:`hikv.model.lm.adopt_prefill`), so
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
            later = [x for x in pending if x is not None] if share and len(chunks) > 1 \
                else None
            logits = prefill(lm, ready, ctx, record_for=later)
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


# =========================================================================== perplexity
def perplexity(lm: LM, specs: Seq[MethodSpec], cfg: Config, windows: Seq[Seq[int]],
               prefix: int, *, batch: int = 64, log: Log = _quiet,
               share_prefill: bool = True) -> list[dict[str, Any]]:
    """Teacher-forced perplexity of each spec over ``windows`` (see the module docstring).

    Returns one row per spec: ``ppl``, ``nll`` (mean, nats), ``tokens``, ``ppl_w<i>`` per
    window, and ``bytes_*`` per decode step per (layer, KV head) (ideal, burst, k/v/meta,
    resident, tokens), plus ``units`` (layer, KV head pairs counted), ``length`` (the window)
    and ``protocol`` = :data:`PPL_PROTOCOL` (no question: the rows serve both protocols).
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
    acc = [ByteAccount() for _ in specs]
    steps = [0] * len(specs)
    units = 0
    total_steps = sum(len(w) - 1 - prefix for w in windows) * len(specs)
    done = 0
    t0 = time.perf_counter()
    batch = _cap_batch(lm, batch, max(len(w) for w in windows))
    for wi, ids in enumerate(windows):
        for chunk, seqs, _ in _shared_prefill(lm, specs, cfg, ids[:prefix], batch,
                                              share_prefill):
            units = seqs[0].units
            n_dec = len(ids) - 1 - prefix
            for t in range(prefix, len(ids) - 1):
                lg = step(lm, seqs, [ids[t]] * len(seqs))
                lp = torch.log_softmax(lg, -1)[:, ids[t + 1]]
                for b, i in enumerate(chunk):
                    nll[i][wi] -= float(lp[b])
                    cnt[i][wi] += 1
                done += len(chunk)
                k = t - prefix + 1
                if k % 128 == 0 or k == n_dec:
                    log(f"  perplexity window {wi + 1}/{len(windows)} step {k}/{n_dec} "
                        f"({len(chunk)} methods) {_eta(t0, done, total_steps)}")
            for b, i in enumerate(chunk):
                for a in seqs[b].accounts:
                    acc[i] = acc[i] + a
                steps[i] += len(seqs[b].accounts)
    rows = []
    for i, s in enumerate(specs):
        n = sum(cnt[i])
        row = {**_spec_row(s), "ppl": math.exp(sum(nll[i]) / n), "nll": sum(nll[i]) / n,
               "tokens": n, "windows": len(windows), "prefix": prefix,
               "window": len(windows[0]), "length": len(windows[0]),
               "protocol": PPL_PROTOCOL, "units": units,
               **{f"ppl_w{w}": math.exp(nll[i][w] / cnt[i][w]) for w in range(len(windows))},
               **_bytes_row(acc[i], steps[i], units)}
        rows.append(row)
    return rows


# =========================================================================== protocols
#: the two evaluation protocols, reported side by side and never mixed: ``prompt`` (context and
#: question prefilled but the question's last token, which is decoded through the method's
#: cache, so compression is decided at the end of prefill with the question inside SnapKV's /
#: HiKV's observation window; the primary protocol) and ``follow-up`` (the context prefilled,
#: the question fed through decode after the cache decided what to keep)
PROTOCOLS = ("prompt", "follow-up")
#: the protocols' older names (``passkey(question=...)``, ``--question``)
QUESTION_ALIASES = {"prefill": "prompt", "decode": "follow-up"}
#: the ``protocol`` of perplexity rows: a continuation decoded after a prefilled text has no
#: question, so it is the same under both protocols and serves both iso tables
PPL_PROTOCOL = "both"


def protocol_name(value: str) -> str:
    """``prompt`` or ``follow-up`` for a protocol name or its older ``question`` alias
    (``prefill`` = ``prompt``, ``decode`` = ``follow-up``)."""
    p = QUESTION_ALIASES.get(value, value)
    if p not in PROTOCOLS:
        raise ParamError(f"protocol = {value!r} is not one of {list(PROTOCOLS)} (or the older "
                         f"names {sorted(QUESTION_ALIASES)})")
    return p


def split_prompt(context: Seq[int], question: Seq[int], protocol: str
                 ) -> tuple[list[int], list[int]]:
    """``(prefilled ids, ids fed through decode)`` of a prompt under ``protocol``: ``prompt``
    prefills the context and the question but its last token; ``follow-up`` prefills the
    context only. The last fed token's logits predict the first answer token, so the answer is
    always produced through the method's cache."""
    p = protocol_name(protocol)
    if not question:
        raise ParamError("the question needs at least one token")
    if p == "prompt":
        return list(context) + list(question[:-1]), list(question[-1:])
    return list(context), list(question)


def wilson(successes: float, trials: int, z: float = 1.959963984540054
           ) -> tuple[float, float]:
    """Wilson score interval (95 % by default) of a success rate ``successes / trials``
    (``successes`` may be fractional: a sum of per-trial scores in [0, 1])."""
    if trials < 1:
        raise ParamError(f"trials = {trials} is out of range: allowed >= 1")
    if not 0 <= successes <= trials:
        raise ParamError(f"successes = {successes} is out of range: allowed [0, {trials}]")
    p = successes / trials
    den = 1 + z * z / trials
    mid = (p + z * z / (2 * trials)) / den
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


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
    and the older name ``question``. ``protocol`` (``prompt`` or ``follow-up``, see
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
    eos = getattr(lm.tokenizer, "eos_token_id", None)
    outs: list[list[int]] = [[] for _ in specs]
    cap = _cap_batch(lm, batch, len(ctx) + len(feed) + max_new)
    for chunk, seqs, first in _shared_prefill(lm, specs, cfg, ctx, cap, share):
        logits = first[None].expand(len(seqs), -1)
        for tok in feed:
            logits = step(lm, seqs, [tok] * len(seqs))
        active = list(range(len(chunk)))
        for t in range(max_new):
            nxt = logits.argmax(-1).tolist()
            for j, b in enumerate(active):
                outs[chunk[b]].append(int(nxt[j]))
            active = [b for b in active if outs[chunk[b]][-1] != eos and
                      T.score(lm.decode(outs[chunk[b]]), references) < 1.0]
            if not active or t == max_new - 1:
                break
            logits = step(lm, [seqs[b] for b in active], [outs[chunk[b]][-1] for b in active])
    return outs


def task_accuracy(lm: LM, specs: Seq[MethodSpec], cfg: Config, *, task: str, length: int,
                  trials: int, protocol: str, seed: int = 0, words: Seq[str] = (),
                  batch: int = 64, log: Log = _quiet, progress: Progress | None = None,
                  share_prefill: bool = True) -> list[dict[str, Any]]:
    """Accuracy of each spec on ``trials`` cases of ``task`` (:mod:`hikv.model.tasks`) at
    ``length`` tokens under ``protocol`` (:func:`split_prompt`).

    Case ``i`` is drawn from ``random.Random(f"{seed}/{task}/{length}/{i}")``, so both
    protocols (and every run, in any order or process) see the same prompts. Answers are
    generated greedily through each method's cache and scored with RULER's
    ``string_match_all`` (:func:`hikv.model.tasks.score`). One row per spec: ``task``,
    ``protocol``, ``length``, ``trials``, ``score_sum``, ``correct`` (trials scoring 1),
    ``accuracy`` (mean score), ``ci_low`` / ``ci_high`` (95 % Wilson interval),
    ``prompt_tokens`` (mean), ``scores`` (per trial) and ``sample`` (trial 0's answer of the
    spec). ``progress(1)`` is called after every trial. Each trial's prompt runs through the
    model once for all specs, however many batches they take (``share_prefill``; see
    :func:`hikv.model.lm.adopt_prefill`).
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


# =========================================================================== iso table
def _passkey_by_label(pk_rows: Seq[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    agg: dict[str, list[int]] = {}
    for r in pk_rows:
        a = agg.setdefault(r["label"], [0, 0])
        a[0] += r["correct"]
        a[1] += r["trials"]
    return {k: (v[0], v[1]) for k, v in agg.items()}


def _cell(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("filler"), r.get("question"), r.get("length"), r.get("depth"))


def iso_table(ppl_rows: Seq[dict[str, Any]], pk_rows: Seq[dict[str, Any]] = (), *,
              ppl_tol: float = 0.01, passkey_tol: float = 0.0
              ) -> list[dict[str, Any]]:
    """Per method family, the smallest tested budget at which perplexity is within
    ``ppl_tol`` (relative) of full KV and passkey accuracy over the method's ``pk_rows``
    cells is at least full KV's over the same cells minus ``passkey_tol``, with every larger
    tested budget passing too. Rows carry that budget's bytes per decode step per
    (layer, KV head) and in total (``* units``), or ``iso_budget = None`` when no tested
    budget passes (then the numbers are those of the largest budget, ``reached = False``).
    A method without passkey rows fails the passkey criterion when full KV has some.
    """
    full = [r for r in ppl_rows if r["label"] == "full"]
    if not full:
        raise ParamError("the perplexity rows need a 'full' (full KV) row as reference")
    ref_ppl = full[0]["ppl"]
    cells: dict[str, dict[tuple[Any, ...], tuple[int, int]]] = {}
    for r in pk_rows:
        c = cells.setdefault(r["label"], {})
        old = c.get(_cell(r), (0, 0))
        c[_cell(r)] = (old[0] + r["correct"], old[1] + r["trials"])
    ref_cells = cells.get("full")

    def passkey_of(label: str) -> tuple[int, int, float] | None:
        """(correct, trials, full KV's accuracy on the same cells) or None."""
        mine = cells.get(label)
        if mine is None or ref_cells is None:
            return None
        common = [c for c in mine if c in ref_cells]
        got = sum(mine[c][0] for c in common), sum(mine[c][1] for c in common)
        ref = sum(ref_cells[c][0] for c in common), sum(ref_cells[c][1] for c in common)
        if not got[1]:
            return None
        return got[0], got[1], ref[0] / ref[1]

    fams: dict[str, list[dict[str, Any]]] = {}
    for r in ppl_rows:
        fams.setdefault(r["family"], []).append(r)
    out = []
    for fam, rows in fams.items():
        rows = sorted(rows, key=lambda r: r["budget"])

        def ok(r: dict[str, Any]) -> bool:
            if r["ppl"] > ref_ppl * (1 + ppl_tol):
                return False
            if ref_cells is None:
                return True
            got = passkey_of(r["label"])
            if got is None:
                return False
            return got[0] / got[1] >= got[2] - passkey_tol - 1e-12

        passing = [ok(r) for r in rows]
        best = None
        for i in range(len(rows)):
            if all(passing[i:]):
                best = i
                break
        chosen = rows[best] if best is not None else rows[-1]
        got = passkey_of(chosen["label"])
        out.append({
            "family": fam, "label": chosen["label"], "method": chosen["method"],
            "iso_budget": chosen["budget"] if best is not None else None,
            "reached": best is not None, "budgets_tested": [r["budget"] for r in rows],
            "ppl": chosen["ppl"], "ppl_rel": chosen["ppl"] / ref_ppl - 1,
            "passkey_correct": None if got is None else got[0],
            "passkey_trials": None if got is None else got[1],
            "passkey_full_acc": None if got is None else got[2],
            "bytes_ideal": chosen.get("bytes_ideal"), "bytes_burst": chosen.get("bytes_burst"),
            "bytes_meta_ideal": chosen.get("bytes_meta_ideal"),
            "bytes_meta_burst": chosen.get("bytes_meta_burst"),
            "bytes_resident": chosen.get("bytes_resident"),
            "units": chosen.get("units"),
            "step_bytes_ideal": (chosen.get("bytes_ideal") or 0) * (chosen.get("units") or 0),
            "step_bytes_burst": (chosen.get("bytes_burst") or 0) * (chosen.get("units") or 0),
        })
    return out


def reductions(table: Seq[dict[str, Any]], hikv_family: str) -> list[dict[str, Any]]:
    """Bytes of each family at its iso budget divided by ``hikv_family``'s (ideal and burst):
    how many times fewer bytes HiKV reads at equal accuracy."""
    h = [r for r in table if r["family"] == hikv_family]
    if not h:
        raise ParamError(f"no iso-table row of family {hikv_family!r}")
    h0 = h[0]
    out = []
    for r in table:
        if r["family"] == hikv_family:
            continue
        out.append({"baseline": r["family"], "baseline_reached": r["reached"],
                    "hikv": hikv_family, "hikv_reached": h0["reached"],
                    "x_ideal": (r["bytes_ideal"] / h0["bytes_ideal"]
                                if h0["bytes_ideal"] else None),
                    "x_burst": (r["bytes_burst"] / h0["bytes_burst"]
                                if h0["bytes_burst"] else None)})
    return out


def iso_accuracy_file(table: Seq[dict[str, Any]], cfg: Config, *, hikv_family: str | None,
                      ppl_tol: float, passkey_tol: float, model: str, preset: str,
                      context: int | None, source: str, protocol: str | None = None,
                      length: int | None = None) -> dict[str, Any]:
    """The iso-table as an operating-point file for ``hikv report --iso`` (schema
    ``hikv.iso_accuracy/1`` of :func:`hikv.sim.report.load_iso_accuracy`): one point per
    baseline family and one for ``hikv_family`` (HiKV's best), each the spec at its iso budget
    (``within_tolerance``) or at its largest tested budget when it never reached iso-accuracy
    (``within_tolerance`` false, so the report leaves it out and says so). ``context`` is the
    longest context the perplexity steps ran at; ``protocol`` and ``length`` (recorded when
    given) say which protocol's and length's task rows the accuracy criterion used."""
    points = []
    for r in table:
        fam = r["family"]
        if fam == "full" or fam.startswith("hikv-none"):
            continue
        if fam.startswith("hikv-") and fam != hikv_family:
            continue
        spec = parse_method(r["label"], cfg.policy, cfg.layout.head_dim)
        points.append({"family": fam, "label": r["label"], "spec": to_dict(spec),
                       "metric_value": 100 * r["ppl_rel"],
                       "passkey": (None if r.get("passkey_trials") is None else
                                   f"{r['passkey_correct']:g}/{r['passkey_trials']}"),
                       "within_tolerance": bool(r["reached"])})
    return {"schema": "hikv.iso_accuracy/1", "preset": preset, "model": model,
            "head_dim": cfg.layout.head_dim, "context": context,
            **({"protocol": protocol} if protocol is not None else {}),
            **({"length": length} if length is not None else {}),
            "metric": "perplexity increase % vs full KV (and passkey accuracy at least full "
            f"KV's - {passkey_tol:g})", "tolerance": 100 * ppl_tol,
            "source": source, "points": points}



def task_rows_as_cells(task_rows: Seq[dict[str, Any]]) -> list[dict[str, Any]]:
    """Task rows (:func:`task_accuracy`) as the cell rows :func:`iso_table` compares with full
    KV's: one cell per (task, protocol, length), ``correct`` = the sum of the trial scores."""
    return [{"label": r["label"], "correct": r["score_sum"], "trials": r["trials"],
             "filler": r["task"], "question": r["protocol"], "length": r["length"],
             "depth": None} for r in task_rows]


def select_rows(rows: Seq[dict[str, Any]], *, protocol: str | None = None,
                length: int | None = None) -> list[dict[str, Any]]:
    """Rows of ``protocol`` (perplexity rows, protocol ``both``, always match; rows of older
    files without ``protocol`` are named by their ``question``) and of ``length`` (a row's
    ``length``, else its perplexity ``window``)."""
    out = []
    p = protocol_name(protocol) if protocol is not None else None
    for r in rows:
        rp = r.get("protocol") or (QUESTION_ALIASES.get(r["question"]) if r.get("question")
                                   else PPL_PROTOCOL)
        if p is not None and rp not in (p, PPL_PROTOCOL):
            continue
        rl = r.get("length", r.get("window"))
        if length is not None and rl is not None and int(rl) != int(length):
            continue
        out.append(r)
    return out


def iso_table_tasks(ppl_rows: Seq[dict[str, Any]], task_rows: Seq[dict[str, Any]], *,
                    protocol: str, length: int, ppl_tol: float = 0.01,
                    acc_tol: float = 0.01) -> list[dict[str, Any]]:
    """:func:`iso_table` of one protocol and length: perplexity within ``ppl_tol`` of full
    KV's at ``length`` and task accuracy (the mean score over the task rows of ``protocol`` and
    ``length``, on the cells full KV has too) at least full KV's minus ``acc_tol`` (one point
    by default). Rows gain ``protocol``, ``length``, ``task_acc``, ``task_trials``,
    ``full_acc`` and the 95 % Wilson interval ``ci_low`` / ``ci_high`` of the chosen
    budget's task accuracy."""
    p = protocol_name(protocol)
    ppl = select_rows(ppl_rows, length=length)
    tasks = select_rows([r for r in task_rows if r.get("protocol") == p], length=length)
    table = iso_table(ppl, task_rows_as_cells(tasks), ppl_tol=ppl_tol, passkey_tol=acc_tol)
    for r in table:
        n, c = r.get("passkey_trials"), r.get("passkey_correct")
        lo, hi = wilson(c, n) if n else (None, None)
        r.update({"protocol": p, "length": length, "task_trials": n,
                  "task_acc": None if not n else c / n, "full_acc": r.get("passkey_full_acc"),
                  "ci_low": lo, "ci_high": hi})
    return table
