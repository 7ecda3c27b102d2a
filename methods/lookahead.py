"""``lookahead``: Lookahead decoding (Fu et al., arXiv:2402.02057): no training, no extra weights.

Two branches share every target forward:

- **The lookahead (Jacobi) branch** keeps ``ngram - 1`` levels of ``window`` guesses, level 0 the
  oldest. The token at level r, column c sits at position ``pos + c + r`` (c = 1..W) and sees the
  prefix, the level-0 guesses of columns 1..c and the column's own guesses of levels 1..r: that is a
  tree, a level-0 spine with a chain hanging below each of its nodes, so it is verified as one
  (``Proposal.parents``). The target's argmax at the top level's nodes is the next level; once all
  levels are filled, each column's diagonal (its ``ngram - 1`` guesses plus that new token) is an
  n-gram added to the pool, and the oldest level is dropped.
- **The verification branch** drafts up to ``guesses`` n-grams from the pool that start with the
  current token, merged into a trie (siblings distinct) beside the lookahead tree.

Every node of the merged tree is a draft, so the engine accepts the longest path the target
agrees with, whichever branch it came from; nodes off that path leave no trace in the cache (the
engine keeps only the accepted path's K/V). Guesses start as tokens of the prompt (a fixed choice
per prompt, so runs repeat). Drafts are deterministic; sampling verifies them as point masses
(lossless).
"""

from __future__ import annotations

import random

from specharness.api import DecodeState, Proposal, Verified
from specharness.hookspecs import DrafterSpec, hookimpl
from specharness.options import OptionSpec
from specharness.model import argmax
from specharness.tree import Trie

OPTIONS = [
    OptionSpec("window", "int", 4, "W: guesses per lookahead level (columns)", min=1),
    OptionSpec("ngram", "int", 3, "N: n-gram size; the lookahead branch keeps N - 1 levels", min=2),
    OptionSpec("guesses", "int", 2, "G: pool n-grams verified per round (defaults: 4 x 2 lookahead nodes + "
               "2 x 2 candidates + the current token <= 16 positions, one compiled width bucket)", min=0),
    OptionSpec("pool", "int", 8, "n-grams kept per first token (most recent first)", min=1),
]


class Lookahead:
    exit_layer = 0

    def __init__(self, window: int, ngram: int, guesses: int, pool: int) -> None:
        self.W, self.N, self.G, self.pool_size = window, ngram, guesses, pool
        self.max_width = 1 + window * (ngram - 1) + guesses * (ngram - 1)
        self.levels: list[list[int]] = []
        self.pool: dict[int, list[tuple[int, ...]]] = {}
        self.top: list[int] | None = None  # tree nodes of the top level's columns, this round

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        prompt = state.ids[:state.prompt_len]
        rng = random.Random(len(prompt))  # a fixed initial guess per prompt: repeats decode alike
        self.levels = [[rng.choice(prompt) for _ in range(self.W)]]
        self.pool = {}

    def propose(self, state: DecodeState) -> Proposal:
        budget = state.max_draft
        self.top = None
        if budget <= 0:
            return Proposal()
        trie = Trie()
        for gram in self.pool.get(state.ids[-1], [])[:self.G]:
            trie.insert(gram[:budget])
        R = len(self.levels)
        if self.W + R - 1 <= budget:  # the deepest lookahead node fits in the room left
            spine = self.levels[0]
            # column c's deepest path; its lower levels and the spine are prefixes of it
            self.top = [trie.insert(spine[:c + 1] + [self.levels[r][c] for r in range(1, R)]) for c in range(self.W)]
        return Proposal(trie.tokens, parents=trie.parents) if trie.tokens else Proposal()

    def commit(self, state: DecodeState, verified: Verified) -> None:
        if self.top is None:
            return
        new = argmax(verified.tree_logits[self.top]).tolist()
        if len(self.levels) < self.N - 1:
            self.levels.append(new)
            return
        for c in range(self.W):
            first, *rest = [level[c] for level in self.levels] + [new[c]]
            grams = self.pool.setdefault(first, [])
            gram = tuple(rest)
            if gram in grams:
                grams.remove(gram)
            grams.insert(0, gram)
            del grams[self.pool_size:]
        self.levels = self.levels[1:] + [new]


def build(target, options: dict) -> Lookahead:
    return Lookahead(options["window"], options["ngram"], options["guesses"], options["pool"])


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("lookahead", build, OPTIONS, params=lambda target, options: 0,
                        help="Lookahead decoding: a Jacobi branch collects n-grams, a verification branch "
                             "drafts them, both in one forward; no training")]
