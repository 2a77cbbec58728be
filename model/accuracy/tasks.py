"""Long-context retrieval tasks for the accuracy harness, after RULER's synthetic tasks.

The task definitions follow RULER (Hsieh et al., "RULER: What's the Real Context Size of Your
Long-Context Language Models?", 2024; NVIDIA/RULER ``scripts/data/synthetic``): the same needle
sentence, templates, answer prefixes, numbers of keys and values, and scoring; the code and the
word lists are ours. Every case is generated from a seeded ``random.Random`` and fitted to a
token length with the evaluated model's own tokenizer.

========================  ==================================================================
task                      definition (RULER's name)
========================  ==================================================================
``passkey``               a 5-digit pass key in the classic repeated filler ("The grass is
                          green. ..."); the question asks for it (RULER's passkey /
                          niah_single_1 with our needle sentence)
``niah_single``           one needle "One of the special magic numbers for <adj-noun> is:
                          <7 digits>." at a random depth of Paul Graham essay text
                          (niah_single_2)
``niah_multikey``         four such needles with different keys (three distractors); the
                          question asks for one key's number (niah_multikey_1)
``niah_multivalue``       four needles with one key and four numbers; all four are asked for
                          (niah_multivalue)
``vt``                    variable tracking: one chain of 4 hops ``VAR ABCDE = 12345``,
                          ``VAR FGHIJ = VAR ABCDE``, ... in the repeated filler, after one
                          solved in-context example; all 5 variables are asked for (vt)
========================  ==================================================================

Scoring is RULER's ``string_match_all``: the fraction of the expected values that occur
(case-insensitive) in the generated text. Generation is greedy; it stops after ``max_new``
tokens, at end of sequence, or as soon as every expected value has appeared (the score can no
longer change). As in RULER, the prompt plus ``max_new`` fits the length: a case of length
``N`` has at most ``N - max_new`` prompt tokens.

Each case is split into a ``context`` (instruction and haystack) and a ``question`` (the
question and RULER's answer prefix), so that the harness can place the question in the prompt
or after it (the two protocols of :mod:`hikv.model.accuracy.experiments`).
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any, Protocol

from hikv.params import ParamError

__all__ = ["TASKS", "TaskCase", "make_case", "score", "essay_words", "MAX_NEW"]

#: tasks in the order they are reported
TASKS = ("passkey", "niah_single", "niah_multikey", "niah_multivalue", "vt")

#: tokens generated at most per task (RULER: 128 for NIAH, 30 for vt; ours are enough for the
#: answers of these tasks, and generation stops as soon as every value has appeared)
MAX_NEW = {"passkey": 12, "niah_single": 24, "niah_multikey": 24, "niah_multivalue": 64,
           "vt": 30}

CLASSIC_FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There "
                  "and back again.")
_NIAH_NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
_NIAH_TEMPLATE = ("Some special magic {type_v} are hidden within the following text. Make sure "
                  "to memorize it. I will quiz you about the {type_v} afterwards.\n")
_NIAH_QUESTION = ("What are all the special magic {type_v} for {query} mentioned in the "
                  "provided text? The special magic {type_v} for {query} mentioned in the "
                  "provided text are")
_VT_TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the "
                "following text.\n\n")
_VT_QUESTION = ("Question: Find all variables that are assigned the value {query} in the text "
                "above. Answer: According to the chain(s) of variable assignment in the text "
                "above, {n} variables are assgined the value {query}, they are:")
_PK_INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
             "memorize it. I will quiz you about the important information there.\n")
_PK_NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
_PK_QUESTION = "What is the pass key? The pass key is"

# our own word lists for the needles' keys (RULER draws adjective-noun pairs from wonderwords)
_ADJ = ("amber", "ancient", "bitter", "brave", "calm", "clever", "cold", "crisp", "curious",
        "damp", "eager", "faint", "fancy", "fierce", "gentle", "gloomy", "golden", "hollow",
        "humble", "icy", "jolly", "keen", "lively", "loud", "lucky", "mighty", "narrow",
        "noisy", "odd", "pale", "proud", "quiet", "rapid", "rough", "rusty", "shiny", "silent",
        "sleepy", "steady", "tender", "tiny", "vast", "wild", "wise", "young", "zealous")
_NOUN = ("anchor", "badger", "banjo", "barrel", "beacon", "canyon", "castle", "cobbler",
         "comet", "desert", "dragon", "falcon", "fountain", "garden", "glacier", "harbor",
         "helmet", "island", "jacket", "kettle", "ladder", "lantern", "meadow", "mirror",
         "monkey", "needle", "orchard", "otter", "parrot", "pebble", "pillow", "quarry",
         "rabbit", "ribbon", "saddle", "shovel", "spider", "teapot", "thunder", "tractor",
         "tunnel", "violin", "wagon", "walrus", "window", "yogurt")
#: RULER's 40 insertion depths (percent), 0 to 100
_DEPTHS = tuple(round(100 * i / 39) for i in range(40))


class Tokenizing(Protocol):
    """What a case generator needs of the model: its tokenizer
    (:class:`hikv.model.lm.runner.LM`)."""

    def encode(self, text: str) -> list[int]: ...

    @property
    def prefix_ids(self) -> list[int]: ...


@dataclass(frozen=True)
class TaskCase:
    """One generated prompt.

    ``context``: token ids of the tokenizer's prefix, the instruction and the haystack;
    ``question``: the question and the answer prefix (never empty); ``references``: the values
    the answer must contain; ``max_new``: tokens generated at most; ``depths``: where the
    needles are (0 = start of the haystack, 1 = end); ``meta``: what else identifies the case.
    """

    task: str
    context: tuple[int, ...]
    question: tuple[int, ...]
    references: tuple[str, ...]
    max_new: int
    depths: tuple[float, ...]
    meta: dict[str, Any]

    @property
    def length(self) -> int:
        """Prompt tokens (context and question)."""
        return len(self.context) + len(self.question)


def score(text: str, references: Seq[str]) -> float:
    """RULER's ``string_match_all``: the fraction of ``references`` found in ``text``
    (case-insensitive)."""
    if not references:
        raise ParamError("score needs at least one reference")
    t = text.lower()
    return sum(1.0 for r in references if r.lower() in t) / len(references)


def essay_words(text: str) -> list[str]:
    """The essays as whitespace-separated words (RULER's essay haystack)."""
    return re.sub(r"\s+", " ", text).strip().split(" ")


def _sentences(words: Seq[str]) -> list[str]:
    """Words joined and split after ``.``, ``!`` or ``?`` followed by a space."""
    return [s for s in re.split(r"(?<=[.!?]) ", " ".join(words)) if s]


def _key(rng: random.Random, taken: set[str]) -> str:
    while True:
        k = f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"
        if k not in taken:
            taken.add(k)
            return k


def _number(rng: random.Random, digits: int, taken: set[str]) -> str:
    while True:
        v = str(rng.randrange(10 ** (digits - 1), 10 ** digits))
        if v not in taken:
            taken.add(v)
            return v


def _fit(lm: Tokenizing, build: Any, limit: int, start: int, what: str) -> tuple[Any, int]:
    """The largest haystack size ``n`` (words, sentences or filler units) whose ``build(n)``
    (returning ``(context ids, question ids, extra)``) has at most ``limit`` prompt tokens.
    Proportional steps, then single steps down; returns ``(built, n)``."""
    n = max(1, start)
    best = None
    for _ in range(8):
        built = build(n)
        t = len(built[0]) + len(built[1])
        if t <= limit:
            best = (built, n)
            if t >= limit - max(8, limit // 200):
                return best
        nxt = max(1, int(n * limit / max(t, 1) * (0.995 if t > limit else 1.0)))
        if nxt == n:
            nxt = n - 1 if t > limit else n + 1
        n = nxt
    if best is not None:
        return best
    while n > 1:
        n = max(1, int(n * 0.9))
        built = build(n)
        if len(built[0]) + len(built[1]) <= limit:
            return built, n
    raise ParamError(f"length = {limit} tokens is too short for task {what!r}")


def _niah(lm: Tokenizing, limit: int, rng: random.Random, words: Seq[str], n_keys: int,
          n_values: int, task: str) -> TaskCase:
    if len(words) < 200:
        raise ParamError(f"task {task!r} needs the essay text (got {len(words)} words)")
    keys_taken: set[str] = set()
    vals_taken: set[str] = set()
    keys = [_key(rng, keys_taken) for _ in range(n_keys)]
    values = [[_number(rng, 7, vals_taken) for _ in range(n_values)] for _ in keys]
    needles = [(k, v) for k, vs in zip(keys, values, strict=True) for v in vs]
    rng.shuffle(needles)
    depths = sorted(rng.sample(_DEPTHS, len(needles)))
    query = keys[rng.randrange(n_keys)]
    answers = values[keys.index(query)]
    one = len(answers) == 1
    type_v = "number" if one else "numbers"
    head, question = _NIAH_TEMPLATE, _NIAH_QUESTION
    if one:  # RULER's singular form of the template (before the key is put in)
        head = head.replace("Some", "A").replace("are all", "is").replace("are", "is")
        question = question.replace("are all", "is").replace("are", "is")
    head = head.format(type_v=type_v)
    question = question.format(type_v=type_v, query=query)
    offset = rng.randrange(0, len(words))

    def build(n: int) -> tuple[list[int], list[int], Any]:
        n = min(n, len(words))
        ws = [words[(offset + i) % len(words)] for i in range(n)]
        sents = _sentences(ws)
        cuts = [int(len(sents) * d / 100) for d in depths]
        parts: list[str] = []
        last = 0
        for (k, v), c in zip(needles, cuts, strict=True):
            parts += sents[last:c]
            parts.append(_NIAH_NEEDLE.format(type_v="numbers", key=k, value=v))
            last = c
        parts += sents[last:]
        ctx = lm.prefix_ids + lm.encode(head + " ".join(parts) + "\n")
        return ctx, lm.encode(question), None

    (ctx, q, _), n = _fit(lm, build, limit, int(limit * 0.7), task)
    return TaskCase(task=task, context=tuple(ctx), question=tuple(q),
                    references=tuple(answers), max_new=MAX_NEW[task],
                    depths=tuple(d / 100 for d in depths),
                    meta={"query": query, "keys": keys, "words": n, "offset": offset})


def _vt_text(rng: random.Random, noises: int, hops: int, letters: int
             ) -> tuple[str, str, list[str]]:
    """RULER's variable-tracking context (one chain of ``hops`` hops in ``noises`` filler
    lines), the queried value and the chain's variables."""
    names: list[str] = []
    while len(names) < hops + 1:
        v = "".join(rng.choices(string.ascii_uppercase, k=letters))
        if v not in names:
            names.append(v)
    value = str(rng.randrange(10000, 100000))
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} "
                                              for j in range(hops)]
    sents = [CLASSIC_FILLER + "\n"] * noises
    if len(sents) <= len(chain):
        raise ParamError("too little filler for the variable chain")
    pos = sorted(rng.sample(range(len(sents)), len(chain)))
    for j, (p, c) in enumerate(zip(pos, chain, strict=True)):
        sents.insert(p + j, c)
    return " ".join(sents).replace(". \n", ".\n"), value, names


def _vt(lm: Tokenizing, limit: int, rng: random.Random, hops: int = 4) -> TaskCase:
    # one solved in-context example (RULER adds one by default): 3-letter names, short filler
    ex_ctx, ex_val, ex_names = _vt_text(rng, 12, hops, 3)
    example = (_VT_TEMPLATE + ex_ctx + "\n" + _VT_QUESTION.format(query=ex_val, n=hops + 1)
               + " " + " ".join(ex_names) + "\n\n")
    seed = rng.randrange(2**32)
    state: dict[str, Any] = {}

    def build(n: int) -> tuple[list[int], list[int], Any]:
        r = random.Random(seed)
        ctx, value, names = _vt_text(r, max(n, hops + 2), hops, 5)
        state.update(value=value, names=names)
        ids = lm.prefix_ids + lm.encode(example + _VT_TEMPLATE + ctx + "\n")
        return ids, lm.encode(_VT_QUESTION.format(query=value, n=hops + 1)), None

    unit = max(1, len(lm.encode(CLASSIC_FILLER + "\n")))
    (ctx, q, _), n = _fit(lm, build, limit, max(hops + 2, limit // unit - 10), "vt")
    build(n)
    return TaskCase(task="vt", context=tuple(ctx), question=tuple(q),
                    references=tuple(state["names"]), max_new=MAX_NEW["vt"], depths=(),
                    meta={"value": state["value"], "noises": n})


def _passkey(lm: Tokenizing, limit: int, rng: random.Random) -> TaskCase:
    key = str(rng.randrange(10000, 100000))
    depth = rng.choice(_DEPTHS) / 100
    head = lm.prefix_ids + lm.encode(_PK_INTRO)
    needle = _PK_NEEDLE.format(key=key)

    def build(n: int) -> tuple[list[int], list[int], Any]:
        before = round(depth * n)
        text = " ".join([CLASSIC_FILLER] * before + [needle] + [CLASSIC_FILLER] * (n - before))
        return head + lm.encode(text + "\n"), lm.encode(_PK_QUESTION), None

    unit = max(1, len(lm.encode(CLASSIC_FILLER + " ")))
    (ctx, q, _), n = _fit(lm, build, limit, max(1, limit // unit), "passkey")
    return TaskCase(task="passkey", context=tuple(ctx), question=tuple(q), references=(key,),
                    max_new=MAX_NEW["passkey"], depths=(depth,), meta={"units": n})


def make_case(lm: Tokenizing, task: str, length: int, rng: random.Random, *,
              words: Seq[str] = ()) -> TaskCase:
    """A case of ``task`` (one of :data:`TASKS`) whose prompt plus ``max_new`` generated
    tokens fit ``length`` tokens. ``words`` (:func:`essay_words`) is needed by the NIAH tasks.

    Raises
    ------
    ParamError
        ``task`` unknown, or ``length`` too short for it.
    """
    if task not in TASKS:
        raise ParamError(f"task = {task!r} is not one of {list(TASKS)}")
    limit = length - MAX_NEW[task]
    if limit < 64:
        raise ParamError(f"length = {length} is out of range for task {task!r}: allowed >= "
                         f"{64 + MAX_NEW[task]}")
    if task == "passkey":
        return _passkey(lm, limit, rng)
    if task == "vt":
        return _vt(lm, limit, rng)
    n_keys, n_values = {"niah_single": (1, 1), "niah_multikey": (4, 1),
                        "niah_multivalue": (1, 4)}[task]
    return _niah(lm, limit, rng, words, n_keys, n_values, task)
