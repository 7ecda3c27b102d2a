"""``sam``: SAM-Decoding (Hu et al., arXiv:2411.10666): retrieval by a suffix automaton, no training.

Each round drafts what followed the longest suffix of the text so far (prompt + answer) that
occurred before in it, or in a static corpus (``-o corpus=FILE``), whichever match is longer (the
text's own on a tie). The automaton over the text is extended with every committed token, and the
matcher follows it in amortised O(1) a token (``automaton.py``); a draft is a list slice. When the
longest match is shorter than ``min_match`` tokens, another drafter proposes instead
(``-o fallback=recycling|eagle``; ``none`` proposes nothing then). The fallback's ``commit`` runs
every round, so its state follows the text whichever drafter proposed.

A match whose occurrence runs into the present (the text repeats with a period shorter than the
draft) continues with its own drafts: ``abcabc`` + ``abc`` drafts ``abcabc...``, as the text would
if it kept repeating. Drafts are deterministic; sampling verifies them as point masses (lossless),
as the fallbacks' are.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from specharness.api import DecodeState, Proposal, Verified
from specharness.errors import UsageError
from specharness.options import OptionSpec, resolve_options

from .. import recycling
from ..eagle import drafter as eagle
from .automaton import Matcher, SuffixAutomaton

FALLBACKS = {"none": None, "recycling": recycling, "eagle": eagle}

OPTIONS = [
    OptionSpec("k", "int", 7, "most tokens retrieved per round (7: the current token + 7 = 8 positions, the width "
               "the engine verifies at the cost of one)", min=1),
    OptionSpec("min_match", "int", 2, "shortest suffix match (tokens) drafted from; below it the fallback drafts",
               min=1),
    OptionSpec("fallback", "str", "recycling", "who drafts when the match is short", choices=tuple(FALLBACKS)),
    OptionSpec("fallback_options", "str", "", "the fallback's options, KEY=VALUE[,KEY=VALUE...] "
               "(e.g. depth=2 for eagle); its defaults otherwise"),
    OptionSpec("corpus", "str", "", "a UTF-8 text file also searched (a static automaton built once per run); "
               "never the benchmark's own questions or answers"),
]


class SamDrafter:
    exit_layer = 0  # drafts are verified by a full target forward from the embeddings

    def __init__(self, k: int, min_match: int, fallback=None, corpus: SuffixAutomaton | None = None) -> None:
        self.k, self.min_match, self.fallback, self.corpus = k, min_match, fallback, corpus
        self.max_width = max(k + 1, int(getattr(fallback, "max_width", 1)))
        self.capture_layers = tuple(getattr(fallback, "capture_layers", ()))
        self.text: SuffixAutomaton | None = None
        self.own: Matcher | None = None  # the text against itself: earlier occurrences
        self.other: Matcher | None = None  # the text against the corpus
        self.stats: Counter = Counter()  # rounds drafted by retrieval (text, corpus), by the fallback, by nobody

    def _feed(self, ids: list[int]) -> None:
        """Extend the automaton and both matchers with the tokens not seen yet."""
        for i in range(len(self.text), len(ids)):
            tok = ids[i]
            if i:
                self.own.remember(i - 1)  # the last match also ends at i - 1: later visits draft from there
            self.own.step(tok)  # before the extension: the match is an earlier occurrence
            self.text.extend(tok)
            self.own.settle()
            if self.other is not None:
                self.other.step(tok)

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        self.text = SuffixAutomaton()
        self.own = Matcher(self.text)
        self.other = Matcher(self.corpus) if self.corpus is not None else None
        self._feed(state.ids)
        if self.fallback is not None:
            self.fallback.begin(state, prefill_hidden)

    def _retrieve(self, budget: int) -> tuple[str, list[int]]:
        """The longer match's continuation (the text's own on a tie), if it is long enough."""
        use_corpus = self.other is not None and self.other.length > self.own.length
        m = self.other if use_corpus else self.own
        if m.length < self.min_match:
            return "", []
        p, text = m.position, m.a.text
        drafts: list[int] = []
        for j in range(p + 1, p + 1 + budget):  # past the text's end, the repetition goes on with its own drafts
            if use_corpus and j >= len(text):
                break
            drafts.append(text[j] if j < len(text) else drafts[j - len(text)])
        return ("corpus" if use_corpus else "text"), drafts

    def propose(self, state: DecodeState) -> Proposal:
        budget = min(self.k, state.max_draft)
        source, drafts = self._retrieve(budget) if budget > 0 else ("", [])
        if drafts:
            self.stats[source] += 1
            return Proposal(drafts)
        if self.fallback is not None:
            self.stats["fallback"] += 1
            return self.fallback.propose(state)
        self.stats["none"] += 1
        return Proposal()

    def commit(self, state: DecodeState, verified: Verified) -> None:
        self._feed(state.ids)
        if self.fallback is not None:
            self.fallback.commit(state, verified)


# ---- building from options -----------------------------------------------------------------------
def _fallback_options(name: str, raw: str) -> dict:
    pairs = {}
    for item in (s.strip() for s in raw.split(",") if s.strip()):
        if "=" not in item:
            raise UsageError(f"option sam.fallback_options: '{item}' is not KEY=VALUE; write e.g. "
                             "fallback_options=depth=2,top_k=4")
        key, value = item.split("=", 1)
        pairs[key.strip()] = value.strip()
    if pairs and name == "none":
        raise UsageError("option sam.fallback_options is set but sam.fallback=none; drop one of them")
    return pairs


def _resolved(name: str, raw: str) -> dict:
    module = FALLBACKS[name]
    return resolve_options(f"sam.fallback={name}", module.OPTIONS, _fallback_options(name, raw))


def build_fallback(target, name: str, raw: str = ""):
    """The fallback drafter, with its own options checked as its method checks them."""
    if FALLBACKS[name] is None:
        _fallback_options(name, raw)
        return None
    return FALLBACKS[name].build(target, _resolved(name, raw))  # both verify from the embeddings, as sam does


def extra_params(target, options: dict) -> int:
    """The fallback's extra parameters (EAGLE's head); retrieval adds none."""
    name = options["fallback"]
    return eagle.extra_params(target, _resolved(name, options["fallback_options"])) if name == "eagle" else 0


def _benchmark_overlap(text: str) -> str | None:
    """The first benchmark question (of the question files on this machine) quoted in ``text``."""
    from specharness.tasks.specbench import known_question_files, load_questions
    for path in known_question_files():
        for q in load_questions(path):
            for turn in q.turns:
                probe = turn.strip()[:200]
                if len(probe) >= 40 and probe in text:
                    return f"question {q.question_id} ({q.subtask}, {path.name})"
    return None


def load_corpus(target, path: str) -> SuffixAutomaton:
    """The static automaton over ``path``'s tokens, built once per target and file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"option sam.corpus={path}: no such file; give a UTF-8 text file")
    if target.tokenizer is None:
        raise UsageError(f"option sam.corpus={path}: this model has no tokenizer to read a text corpus with")
    key = ("sam-corpus", str(file.resolve()), file.stat().st_mtime_ns)
    if key not in target.memo:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"option sam.corpus={path}: not UTF-8 text") from None
        quoted = _benchmark_overlap(text)
        if quoted:
            raise UsageError(f"option sam.corpus={path} quotes Spec-Bench's {quoted}; a corpus that holds the "
                             "benchmark's own text would measure retrieval of the answers, not drafting")
        target.memo[key] = SuffixAutomaton(target.tokenizer.encode(text, add_special_tokens=False))
    return target.memo[key]


def build(target, options: dict) -> SamDrafter:
    fallback = build_fallback(target, options["fallback"], options["fallback_options"])
    corpus = load_corpus(target, options["corpus"]) if options["corpus"] else None
    return SamDrafter(options["k"], options["min_match"], fallback, corpus)


def info(target, options: dict) -> dict:
    """For headers: the fallback with its options, and the corpus's size."""
    out = {"fallback": options["fallback"] + (f" ({options['fallback_options']})" if options["fallback_options"]
                                              else "")}
    if options["corpus"]:
        out["corpus"] = f"{options['corpus']} ({len(load_corpus(target, options['corpus']))} tokens)"
    return out
