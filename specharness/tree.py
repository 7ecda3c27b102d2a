"""Draft trees: which verified position is whose parent, and what each position may attend to.

A round verifies T positions in one target forward: node 0 is the current token (chosen by the
target, not yet run through it), nodes 1..T-1 are drafts. ``parents[i]`` is the node a draft
continues (``parents[0] == -1``); a chain is ``[-1, 0, 1, 2, ...]``. Node i sits at position
``pos + depth(i)`` (so its rotary embedding is that of its depth) but in cache slot ``start + i``;
it attends to the committed prefix, its ancestors and itself. After acceptance the engine moves
the accepted path's keys and values into consecutive slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch


@dataclass(frozen=True)
class Tree:
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        p = self.parents
        if not p or p[0] != -1:
            raise ValueError("a draft tree's node 0 is the current token: parents[0] must be -1")
        for i, q in enumerate(p[1:], 1):
            if not 0 <= q < i:
                raise ValueError(f"draft tree node {i} has parent {q}: parents must come before their children")

    @classmethod
    def chain(cls, k: int) -> "Tree":
        """The current token followed by k drafts, each continuing the one before."""
        return _shared((-1, *range(k)))

    @classmethod
    def from_drafts(cls, parents: list[int] | tuple[int, ...] | None, k: int) -> "Tree":
        """A proposal's tree: ``parents`` over its k drafts (0 = the current token), None = chain.
        One shared instance per shape (see ``_shared``)."""
        return cls.chain(k) if parents is None else _shared((-1, *parents))

    def __len__(self) -> int:
        return len(self.parents)

    @cached_property
    def is_chain(self) -> bool:
        return all(q == i - 1 for i, q in enumerate(self.parents[1:], 1))

    @cached_property
    def depths(self) -> tuple[int, ...]:
        d = [0] * len(self.parents)
        for i, q in enumerate(self.parents[1:], 1):
            d[i] = d[q] + 1
        return tuple(d)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.parents]
        for i, q in enumerate(self.parents[1:], 1):
            out[q].append(i)
        return tuple(tuple(c) for c in out)

    @cached_property
    def _ancestor_rows(self) -> tuple[tuple[bool, ...], ...]:
        rows: list[list[bool]] = []
        for i, q in enumerate(self.parents):
            row = list(rows[q]) if q >= 0 else [False] * len(self.parents)
            row[i] = True
            rows.append(row)
        return tuple(tuple(r) for r in rows)

    def ancestors_mask(self, device=None) -> torch.Tensor:
        """[T, T] bool: node i may attend to node j (j is i or one of its ancestors). A new tensor
        each call, from rows worked out once per tree (one op, where a row copy per node cost ~3 us
        each)."""
        return torch.tensor(self._ancestor_rows, dtype=torch.bool, device=device)

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's first child down to ``node`` (empty for the root)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


@lru_cache(maxsize=4096)
def _shared(parents: tuple[int, ...]) -> Tree:
    """The one ``Tree`` of each shape: drafters propose few distinct shapes, and a shared instance
    checks its parents and works out its depths, children and mask rows once, not every round (the
    engine and the verifier each ask for the round's tree)."""
    return Tree(parents)


class Trie:
    """A proposal's drafts built from token paths below the current token (node 0), merged where
    they share a prefix, so siblings are distinct: ``tokens`` and ``parents`` are what a
    ``Proposal`` takes (node i + 1 is draft i). Each node counts the paths through it, so
    ``ranked`` can keep the drafts most paths agree on."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.child: dict[tuple[int, int], int] = {}
        self.votes: list[int] = []  # paths through draft i
        self.depth: list[int] = []  # draft i's depth below the current token (1 = its child)

    def insert(self, path: list[int] | tuple[int, ...]) -> int:
        """Add ``path`` below the root; returns the node of its last token (0 for an empty path)."""
        node = 0
        for tok in path:
            nxt = self.child.get((node, tok))
            if nxt is None:
                self.tokens.append(tok)
                self.parents.append(node)
                self.votes.append(0)
                self.depth.append(self.depth[node - 1] + 1 if node else 1)
                nxt = self.child[(node, tok)] = len(self.tokens)
            self.votes[nxt - 1] += 1
            node = nxt
        return node

    def ranked(self, n: int) -> tuple[list[int], list[int] | None]:
        """The ``n`` drafts the most inserted paths pass through, shallower first on a tie, then the
        one inserted first: ``(tokens, parents)`` best first (what a size cut keeps), parents None
        for a chain. A parent has at least its child's votes and is shallower, so it always ranks
        above it: the kept nodes form a tree."""
        order = sorted(range(len(self.tokens)), key=lambda i: (-self.votes[i], self.depth[i], i))[:n]
        node = {0: 0}
        for new, old in enumerate(order, 1):
            node[old + 1] = new
        parents = [node[self.parents[i]] for i in order]
        tokens = [self.tokens[i] for i in order]
        return tokens, None if parents == list(range(len(parents))) else parents
