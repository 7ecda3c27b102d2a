"""EAGLE-2's tensorised tree expansion against a plain reference of the rule it implements.

The head is replaced by a fake whose draft distribution at a node depends only on the node's
token path, with logits drawn from three values so that scores tie often. The drafter must pick
exactly the tree (tokens, parents, order) a straightforward list-of-candidates version of the
rule picks, map head rows to token ids through the draft vocabulary, and lay each frontier out
for the head as the rule says: at depth d, position pos + d - 1, seeing the prefix, its ancestors'
scratch slots and its own.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specharness.methods.eagle import drafter as eg
from specharness.model import TargetModel
from specharness.options import resolve_options

VOCAB = 50


def logits_of(path: tuple[int, ...], rows: int) -> torch.Tensor:
    """The fake head's logits after ``path``: a few levels (3, 12 or 40, flat to peaked, by the path's
    first token), so that scores tie often, across siblings and across depths."""
    seed = 1
    for tok in path:
        seed = (seed * 1_000_003 + tok + 1) % (2 ** 31)
    levels, spread = ((3, 2.0), (12, 6.0), (40, 12.0))[path[0] % 3]
    return torch.randint(0, levels, (rows,), generator=torch.Generator().manual_seed(seed)).float() * (spread / levels)


def log_probs(path: tuple[int, ...], rows: int) -> torch.Tensor:
    return torch.log_softmax(logits_of(path, rows).unsqueeze(0), dim=-1, dtype=torch.float32)[0]


def reference(root_logp: torch.Tensor, vocab: list[int], depth: int, k: int, total: int):
    """EAGLE-2's rule on Python lists: expand the ``k`` best of the last depth's children (ties: the
    earlier created) until none can enter the kept tree, keep the ``total`` best candidates (ties:
    the shallower, then the earlier created), list them best first. Returns the tree's tokens and
    parents, how many frontiers went through the head, and whether the order by depth differs from
    the order by score (a deeper node listed before a shallower one)."""
    cands = []  # (score, depth, path, parent candidate or -1)

    def add(parent: int, logp: torch.Tensor) -> list[int]:
        base = cands[parent][0] if parent >= 0 else 0.0
        path = cands[parent][2] if parent >= 0 else ()
        top, idx = logp.unsqueeze(0).topk(k, dim=-1)
        for s, j in zip(top[0].tolist(), idx[0].tolist()):
            cands.append((base + s, len(path) + 1, path + (vocab[j],), parent))
        return list(range(len(cands) - k, len(cands)))

    frontier, runs = add(-1, root_logp), 0
    for _ in range(2, depth + 1):
        frontier = sorted(frontier, key=lambda c: -cands[c][0])[:k]
        if len(cands) >= total and cands[frontier[0]][0] < sorted((c[0] for c in cands), reverse=True)[total - 1]:
            break
        frontier = [child for c in frontier for child in add(c, log_probs(cands[c][2], len(vocab)))]
        runs += 1
    kept = sorted(range(len(cands)), key=lambda c: (-cands[c][0], cands[c][1]))[:total]
    assert all(cands[c][3] == -1 or cands[c][3] in kept for c in kept)  # connected
    by_depth = sorted(kept, key=lambda c: (cands[c][1], -cands[c][0]))
    tokens = [cands[c][2][-1] for c in kept]
    parents = [0 if cands[c][3] < 0 else kept.index(cands[c][3]) + 1 for c in kept]
    return tokens, parents, runs, by_depth != kept


class FakeHead:
    """Stands in for the head's stack: a node's "feature" is an id for its path, its logits
    ``logits_of(path)``; checks each frontier's positions and mask."""

    def __init__(self, pos: int, vocab: list[int]) -> None:
        self.pos, self.vocab = pos, vocab
        self.paths = {0: ()}  # node id (the feature the head hands on) -> token path
        self.slots = {0: set()}  # node id -> scratch slots of it and its ancestors
        self.runs = 0

    def feature(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def run(self, tokens, feats, start, head=True, positions=None, mask=None):
        p, n = self.pos, len(tokens)
        assert start == p + self.runs * n and mask.shape == (n, start + n) and mask[:, :p].all()
        hidden = []
        for r, (tok, parent) in enumerate(zip(torch.as_tensor(tokens).tolist(), feats[:, 0].tolist())):
            path = self.paths[int(parent)] + (tok,)
            assert positions[r] == p + len(path) - 1
            node = len(self.paths)
            self.paths[node], self.slots[node] = path, self.slots[int(parent)] | {start + r}
            assert mask[r, p:].nonzero().flatten().add(p).tolist() == sorted(self.slots[node])
            hidden.append([float(node)])
        self.runs += 1
        logits = torch.stack([logits_of(self.paths[int(h[0])], len(self.vocab)) for h in hidden])
        return SimpleNamespace(hidden=torch.tensor(hidden, dtype=torch.float64), logits=logits)


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=VOCAB, n_layers=2, hidden_size=32, seed=3)


# stops / reorders: the trials must include a round that stops early / whose kept tree ranks a deeper
# candidate above a shallower one (so the order by depth differs from the order by score)
@pytest.mark.parametrize("depth, k, total, room, mode, stops, reorders", [
    (5, 4, 7, 9, "tree", True, True), (4, 3, 8, 9, "tree", True, True), (3, 2, 20, 9, "tree", False, True),
    (2, 4, 3, 9, "tree", False, False), (5, 4, 7, 2, "tree", False, True), (6, 3, 16, 9, "tree", True, True),
    (4, 1, 4, 9, "chain", False, False),
])
@pytest.mark.parametrize("mapped", [False, True])
def test_expansion_picks_the_reference_tree(tiny, depth, k, total, room, mode, stops, reorders, mapped):
    torch.set_num_threads(1)
    d = eg.build(tiny, resolve_options("eagle", eg.OPTIONS, {
        "head": "untrained", "draft_vocab": "0", "mode": mode, "depth": str(depth), "top_k": str(k),
        "total_tokens": str(total)}))
    g = torch.Generator().manual_seed(depth * 100 + k * 10 + total + mapped)
    vocab = torch.randperm(VOCAB, generator=g)[:20].tolist() if mapped else list(range(VOCAB))
    d.rows = torch.tensor(vocab) if mapped else None
    pos = 11
    stopped = reordered = 0
    for trial in range(40):
        head = FakeHead(pos, vocab)
        d.head, d._run = head, head.run
        d.root_logp = log_probs((trial,), len(vocab))
        d.root_feat = torch.zeros(1, dtype=torch.float64)
        prop = d.propose(SimpleNamespace(pos=pos, max_draft=room, budget=1 << 30))
        *want, runs, resorted = reference(d.root_logp, vocab, min(depth, room), d.top_k, d.total)
        assert [prop.tokens, prop.parents] == want, trial
        assert head.runs == runs, trial  # the early stop: no frontier runs once none can enter the tree
        # with room for n drafts (budget=auto's sizes), the first n of the unbounded tree
        n = 1 + trial % max(1, d.total)
        head = FakeHead(pos, vocab)
        d.head, d._run = head, head.run
        small = d.propose(SimpleNamespace(pos=pos, max_draft=room, budget=n))
        assert [small.tokens, small.parents] == [prop.tokens[:n], prop.parents[:n]], (trial, n)
        stopped += runs < min(depth, room) - 1
        reordered += resorted
        assert set(prop.tokens) <= set(vocab)
    assert (stopped or not stops) and (reordered or not reorders), (stopped, reordered)
