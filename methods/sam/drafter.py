"""``sam``: SAM-Decoding (Hu et al., arXiv:2411.10666): retrieval by a suffix automaton, no training.

Each round drafts what followed the longest suffix of the text so far (prompt + answer) that
occurred before in it, from its most recent earlier occurrence, as pld does; with a static corpus
(``-o corpus=FILE``), the corpus's longest match drafts instead when it is longer and has at least
``corpus_min_match`` tokens. The automaton over the text is extended with every committed token
(``automaton.py``: a few dictionary operations a token for prose); a draft is a list slice. When no
match is long enough (``min_match`` tokens for the text's), another drafter proposes instead
(``-o fallback=recycling|eagle|eagle3|none``); when that drafts nothing either, a shorter match does,
the text's own before the corpus's (``short_matches``: the paper leaves such a round empty, but here
verifying 8 positions costs little more than verifying 1). The fallback's ``commit`` runs every
round, so its state follows the text whichever drafter proposed.

A corpus needs a longer match than the text itself: over SmolLM2's 429k self-written answer tokens,
drafting from every position of its held-apart Spec-Bench answers kept 0.25 tokens a round after a
2-token corpus match, 0.50 after 3, 0.71 after 4 and 0.88 after 5, against 0.60 after a 1-token
match in the text itself and 1.65 after 2 (``results/smollm2-recycling-warm``); the recycling
fallback keeps about 0.78 a round.

A match whose occurrence runs into the present (the text repeats with a period shorter than the
draft) continues with its own drafts: ``abcabc`` + ``abc`` drafts ``abcabc...``, as the text would
if it kept repeating. Drafts are deterministic; sampling verifies them as point masses (lossless),
as the fallbacks' are.
"""

from __future__ import annotations

from pathlib import Path

from specharness.api import DecodeState, Proposal, Verified
from specharness.errors import UsageError
from specharness.options import OptionSpec, resolve_options

from .. import recycling
from ..eagle import drafter as eagle
from ..eagle3 import drafter as eagle3
from .automaton import Matcher, SuffixAutomaton

FALLBACKS = {"none": None, "recycling": recycling, "eagle": eagle, "eagle3": eagle3}
LEARNED = ("eagle", "eagle3")  # fallbacks with a head: extra parameters, and a head to describe

OPTIONS = [
    OptionSpec("k", "int", 7, "most tokens retrieved per round (7: the current token + 7 = 8 positions, the width "
               "the engine verifies at the cost of one)", min=1),
    OptionSpec("min_match", "int", 2, "shortest suffix match (tokens) drafted from; below it the fallback drafts",
               min=1),
    OptionSpec("fallback", "str", "recycling", "who drafts when the match is short", choices=tuple(FALLBACKS)),
    OptionSpec("short_matches", "bool", True, "when the fallback drafts nothing either, draft from a match shorter "
               "than min_match (false: the round drafts nothing, the paper's rule)"),
    OptionSpec("fallback_options", "str", "", "the fallback's options, KEY=VALUE[+KEY=VALUE...] "
               "(e.g. depth=2+top_k=4 for eagle); its defaults otherwise"),
    OptionSpec("corpus", "str", "", "a UTF-8 text file also searched (a static automaton built once per run); "
               "refused if it quotes a question of the sample, $SPECHARNESS_SPECBENCH or the cached Spec-Bench "
               "file; keep the benchmark's answers out of it too"),
    OptionSpec("corpus_min_match", "int", 5, "shortest corpus match (tokens) drafted from before the fallback; "
               "a shorter one drafts only when the fallback and the text have nothing (a 2-token match in a large "
               "corpus keeps far less than the fallback)", min=1),
]


def continuation(text: list[int], end: int, budget: int, own: bool) -> list[int]:
    """Up to ``budget`` tokens that followed the occurrence ending at ``end``. In the text's own
    automaton (``own``), an occurrence running into the present goes on with its own drafts (the
    text repeating); a corpus's simply ends."""
    drafts: list[int] = []
    for j in range(end + 1, end + 1 + budget):
        if j < len(text):
            drafts.append(text[j])
        elif own:
            drafts.append(drafts[j - len(text)])
    return drafts


class SamDrafter:
    exit_layer = 0  # drafts are verified by a full target forward from the embeddings

    def __init__(self, k: int, min_match: int, fallback=None, corpus: SuffixAutomaton | None = None,
                 short_matches: bool = True, corpus_min_match: int = 5) -> None:
        self.k, self.min_match, self.fallback, self.corpus = k, min_match, fallback, corpus
        self.short_matches, self.corpus_min_match = short_matches, corpus_min_match
        self.max_width = max(k + 1, int(getattr(fallback, "max_width", 1)))
        self.capture_layers = tuple(getattr(fallback, "capture_layers", ()))
        # no draft_bytes: retrieval reads no weights, and a fallback's bytes would be charged to every round
        self.text: SuffixAutomaton | None = None  # prompt + answer so far
        self.other: Matcher | None = None  # the text against the corpus

    def _feed(self, ids: list[int]) -> None:
        """Extend the automaton (and the corpus matcher) with the tokens not seen yet."""
        for tok in ids[len(self.text):]:
            self.text.extend(tok)
            if self.other is not None:
                self.other.step(tok)

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        self.text = SuffixAutomaton()
        self.other = Matcher(self.corpus) if self.corpus is not None else None
        self._feed(state.ids)
        if self.fallback is not None:
            self.fallback.begin(state, prefill_hidden)

    def _retrieve(self, budget: int, shortest: dict[str, int]) -> tuple[str, list[int]]:
        """The continuation of the longest match (the text's own on a tie) among the sources named in
        ``shortest`` whose match has at least that many tokens and something after it."""
        found = [("text", self.text.earlier(), self.text.text)]
        if self.other is not None:
            found.append(("corpus", self.other.match, self.corpus.text))
        found = [f for f in found if f[0] in shortest and f[1].length >= shortest[f[0]]]
        for source, (length, end), text in sorted(found, key=lambda f: -f[1].length):  # stable: text first on a tie
            drafts = continuation(text, end, budget, own=source == "text")
            if drafts:
                return source, drafts
        return "", []

    def propose(self, state: DecodeState) -> Proposal:
        budget = min(self.k, state.max_draft)
        if budget <= 0:
            return Proposal()
        source, drafts = self._retrieve(budget, {"text": self.min_match, "corpus": self.corpus_min_match})
        if drafts:
            return Proposal(drafts, source=source)  # kept per round in the results: retrieval's share, its acceptance
        if self.fallback is not None:
            prop = self.fallback.propose(state)
            if prop.tokens:
                prop.source = "fallback"
                return prop
        if self.short_matches:  # nobody drafted: a shorter match is still a better guess than nothing
            for shortest in ({"text": 1}, {"corpus": 1}):  # the text's own first: it keeps more (module docstring)
                source, drafts = self._retrieve(budget, shortest)
                if drafts:
                    return Proposal(drafts, source=f"{source}, short")
        return Proposal()

    def commit(self, state: DecodeState, verified: Verified) -> None:
        self._feed(state.ids)
        if self.fallback is not None:
            self.fallback.commit(state, verified)


# ---- building from options -----------------------------------------------------------------------
def _resolved(name: str, raw: str) -> dict:
    """The fallback's options, KEY=VALUE items joined by '+', checked as its method checks them."""
    items = [item.strip() for item in raw.split("+") if item.strip()]
    bad = next((item for item in items if "=" not in item), None)
    if bad is not None:  # named here: the shared parser's hint would be about -o
        raise UsageError(f"option sam.fallback_options: '{bad}' is not KEY=VALUE; join KEY=VALUE items with '+', "
                         "e.g. fallback_options=depth=2+top_k=4")
    if FALLBACKS[name] is None:
        if items:
            raise UsageError("option sam.fallback_options is set but sam.fallback=none; drop one of them")
        return {}
    return resolve_options(f"sam.fallback={name}", FALLBACKS[name].OPTIONS, items)


def build_fallback(target, name: str, raw: str = ""):
    """The fallback drafter (None for 'none'); both verify from the embeddings, as sam does."""
    options = _resolved(name, raw)
    return FALLBACKS[name].build(target, options) if FALLBACKS[name] is not None else None


def extra_params(target, options: dict) -> int:
    """The fallback's extra parameters (EAGLE's head); retrieval adds none."""
    name = options["fallback"]
    return FALLBACKS[name].extra_params(target, _resolved(name, options["fallback_options"])) if name in LEARNED else 0


def _benchmark_overlap(text: str) -> str | None:
    """The first benchmark question (of the question files on this machine) quoted in ``text``."""
    from specharness.tasks.specbench import known_question_files, load_questions
    text = " ".join(text.split())  # whitespace reflowed alike on both sides
    for path in known_question_files():
        for q in load_questions(path):
            for turn in q.turns:
                probe = " ".join(turn.split())[:200]
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
    key = ("sam-corpus", str(file.resolve()), file.stat().st_mtime_ns, file.stat().st_size)
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
    return SamDrafter(options["k"], options["min_match"], fallback, corpus, options["short_matches"],
                      options["corpus_min_match"])


def info(target, options: dict) -> dict:
    """For headers: the fallback with its options (EAGLE's head as eagle's own header says it), and the
    corpus's size."""
    name, raw = options["fallback"], options["fallback_options"]
    out: dict = {"fallback": name + (f" ({raw})" if raw else "")}
    if name in LEARNED:
        out[name] = FALLBACKS[name].head_info(target, _resolved(name, raw))
    if options["corpus"]:
        out["corpus"] = f"{options['corpus']} ({len(load_corpus(target, options['corpus']))} tokens)"
    return out
