"""``pld``: prompt lookup decoding (Saxena, 2023) inside the engine: no training, no extra weights.

The drafts are what followed the most recent earlier occurrence of the sequence's last n-gram
(n from ``max_ngram`` down to ``min_ngram``, the longest that matches), up to ``k`` tokens; each
round's source is its match's n ("3-gram"), so ``budget=auto`` sizes long and short matches apart. An
index of every n-gram's positions is built at ``begin`` and extended at ``commit``, so a round's
lookup costs a dictionary access, not a scan. ``branches > 1`` drafts a tree instead: the
continuations of the ``branches`` most recent matches (distinct first tokens) as sibling chains.
Drafts are deterministic; sampling verifies them as point masses (lossless).
"""

from __future__ import annotations

from collections import defaultdict

from specharness.api import DecodeState, Proposal, Verified
from specharness.errors import UsageError
from specharness.hookspecs import DrafterSpec, hookimpl
from specharness.options import OptionSpec
from specharness.tree import Trie

OPTIONS = [
    OptionSpec("max_ngram", "int", 3, "longest n-gram looked up", min=1),
    OptionSpec("min_ngram", "int", 1, "shortest n-gram looked up", min=1),
    OptionSpec("k", "int", 7, "most tokens drafted per continuation (7: the current token + 7 = 8 positions, "
               "the width the engine verifies at the cost of one)", min=1),
    OptionSpec("branches", "int", 1, "continuations drafted as a tree (1 = one chain)", min=1),
]


class PromptLookup:
    exit_layer = 0

    def __init__(self, max_ngram: int, min_ngram: int, k: int, branches: int) -> None:
        if min_ngram > max_ngram:
            raise UsageError(f"option pld.min_ngram={min_ngram} exceeds pld.max_ngram={max_ngram}")
        self.max_n, self.min_n, self.k, self.branches = max_ngram, min_ngram, k, branches
        self.max_width = branches * k + 1
        self.index: dict[tuple, list[int]] = {}
        self.seen = 0

    def _extend(self, ids: list[int]) -> None:
        """Index every n-gram ending before the last token (its continuation must exist)."""
        for end in range(max(self.seen, 1), len(ids)):  # n-grams ids[end-n:end], continued by ids[end]
            for n in range(self.min_n, self.max_n + 1):
                if end - n >= 0:
                    self.index[tuple(ids[end - n:end])].append(end)
        self.seen = len(ids)

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        self.index, self.seen = defaultdict(list), 0
        self._extend(state.ids)

    def propose(self, state: DecodeState) -> Proposal:
        ids, budget = state.ids, min(self.k, state.max_draft)
        if budget <= 0:
            return Proposal()
        for n in range(self.max_n, self.min_n - 1, -1):
            starts = self.index.get(tuple(ids[-n:])) if len(ids) >= n else None
            if not starts:
                continue
            chains, firsts = [], set()
            for start in reversed(starts):  # most recent first
                chain = ids[start:start + budget]
                if chain and chain[0] not in firsts:
                    firsts.add(chain[0])
                    chains.append(chain)
                    if len(chains) == self.branches:
                        break
            source = f"{n}-gram"  # how long a match drafted: a 1-gram's drafts are kept far less often
            if len(chains) == 1:
                return Proposal(chains[0], source=source)
            trie = Trie()
            for chain in chains:
                trie.insert(chain)
            return Proposal(trie.tokens, parents=trie.parents, source=source)
        return Proposal()

    def commit(self, state: DecodeState, verified: Verified) -> None:
        self._extend(state.ids)


def build(target, options: dict) -> PromptLookup:
    return PromptLookup(options["max_ngram"], options["min_ngram"], options["k"], options["branches"])


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("pld", build, OPTIONS, sizable=True, params=lambda target, options: 0,
                        help="prompt lookup: draft what followed the last n-gram's latest earlier occurrence "
                             "(a tree of several occurrences with -o branches=N); no training")]
