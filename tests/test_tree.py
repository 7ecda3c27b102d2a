"""Tree verification: masks, positions and cache compaction against a full recompute; greedy
identity; sampled outputs against the exact distribution, and a wrong tree rule that is caught."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from specharness.distributions import chi_square, exact_sequence_distribution, marginal
from specharness.api import Proposal
from specharness.engine import generate
from specharness.methods.vanilla import NoDraft
from specharness.model import TargetModel
from specharness.tree import Tree
from specharness.verify import Acceptance, greedy, speculative_sampling, target_probs


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=12, n_layers=3, seed=7)


def test_tree_structure():
    t = Tree((-1, 0, 0, 1, 2, 2))
    assert t.depths == (0, 1, 1, 2, 2, 2) and t.children[0] == (1, 2) and t.children[2] == (4, 5)
    assert t.path_to(5) == [2, 5] and not t.is_chain and Tree.chain(3).is_chain
    m = t.ancestors_mask()
    assert m[5].tolist() == [True, False, True, False, False, True]
    with pytest.raises(ValueError):
        Tree((-1, 2, 0))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_tree_forward_and_compaction_match_a_full_recompute(family):
    """Every node's logits equal those of a plain forward over its root-to-node path, and after
    keeping one path (moved into place) the next forward equals a fresh one over prefix + path."""
    target = TargetModel.tiny(family, vocab_size=40, n_layers=3, seed=3)
    prefix = [5, 9, 1, 30, 7]
    tree = Tree((-1, 0, 0, 1, 1, 3, 2))
    tokens = [11, 12, 13, 14, 15, 16]  # drafts = nodes 1..6
    cache = target.new_cache(64)
    target.forward(torch.tensor(prefix[:-1]), cache, 0)
    start = len(prefix) - 1  # the current token's position
    out = target.forward(torch.tensor([prefix[-1], *tokens]), cache, start, tree=tree, head=True)
    nodes = [prefix[-1], *tokens]
    for node in range(len(tree)):
        path = [nodes[i] for i in [0, *tree.path_to(node)]]
        fresh = target.logits(prefix[:-1] + path)[-1]
        torch.testing.assert_close(out.logits[node], fresh, rtol=1e-5, atol=1e-5)
    keep = [0, *tree.path_to(5)]  # nodes 0, 1, 3, 5
    cache.compact(start, keep)
    cache.crop(start + len(keep))
    kept = [nodes[i] for i in keep]
    after = target.forward(torch.tensor([21, 22]), cache, start + len(keep), head=True).logits
    fresh = target.logits(prefix[:-1] + kept + [21, 22])[-2:]
    torch.testing.assert_close(after, fresh, rtol=1e-5, atol=1e-5)


class TreeDrafter:
    """Drafts a small tree: ``width`` children of the current token, each with one child. When
    sampling, siblings are drawn without replacement from a random q; greedy, the target's own
    continuation is one of the branches (the rest are wrong), so acceptance is exercised."""

    exit_layer = 0

    def __init__(self, width: int = 2, oracle: list[int] | None = None, sampled_q: bool = True) -> None:
        self.width, self.oracle, self.sampled_q = width, oracle, sampled_q

    def begin(self, state, prefill_hidden):
        pass

    def propose(self, state):
        if state.max_draft < 2:
            return Proposal()
        V, g = state.target.vocab_size, state.generator
        if state.temperature > 0:
            q_root = torch.softmax(2 * torch.randn(V, generator=g), -1)
            firsts = torch.multinomial(q_root, self.width, replacement=False, generator=g).tolist()
            q_kids = [torch.softmax(2 * torch.randn(V, generator=g), -1) for _ in firsts]
            seconds = [int(torch.multinomial(qk, 1, generator=g)) for qk in q_kids]
            q = torch.stack([q_root] * len(firsts) + q_kids) if self.sampled_q else None
            if not self.sampled_q:  # deterministic drafts: q stays None, a point mass each
                firsts = sorted(range(V), key=lambda v: -float(q_root[v]))[:self.width]
        else:
            at = len(state.ids) - state.prompt_len
            right = self.oracle[at:at + 2]
            firsts = [right[0]] + [(right[0] + 1 + j) % V for j in range(self.width - 1)]
            seconds = [right[1] if len(right) > 1 else 0] + [(right[-1] + 3) % V] * (self.width - 1)
            q = None
        tokens = firsts + seconds
        parents = [0] * len(firsts) + [1 + j for j in range(len(firsts))]
        return Proposal(tokens, q, parents=parents)

    def commit(self, state, verified):
        assert verified.hidden.shape[0] == verified.accepted + 1 == verified.logits.shape[0]


def test_tree_greedy_is_identical_to_vanilla(tiny):
    prompt = [1, 2, 3, 4]
    ref = generate(tiny, NoDraft(), greedy, prompt, 24).token_ids
    g = generate(tiny, TreeDrafter(3, ref), greedy, prompt, 24)
    assert g.token_ids == ref
    assert max(r.accepted for r in g.rounds) == 2 and all(r.drafted in (0, 6) for r in g.rounds)
    assert len(g.rounds) < len(ref)  # the tree saved forwards


def _tokens(seen: Counter, positions) -> Counter:
    out: Counter = Counter()
    for seq, c in seen.items():
        out[tuple(seq[i] for i in positions)] += c
    return out


def _sample(target, drafter, rule, prompt, n_new, n):
    seen, accepted_nodes = Counter(), Counter()
    for seed in range(n):
        g = generate(target, drafter, rule, prompt, n_new, temperature=1.0, seed=seed)
        seen[tuple(g.token_ids)] += 1
        for r in g.rounds[1:]:
            accepted_nodes[r.accepted] += 1
    return seen, accepted_nodes


@pytest.mark.parametrize("sampled_q", [True, False])
def test_tree_sampling_keeps_the_target_distribution(tiny, sampled_q):
    """Tokens 2 and 3 come from one tree round (token 1 from the prefill) whose first level has
    three siblings, drawn without replacement or deterministic: their joint must be the target's."""
    torch.set_num_threads(1)
    prompt = [3, 1]
    exact = marginal(exact_sequence_distribution(tiny, prompt, 3, 1.0), (1, 2))
    seen, acc = _sample(tiny, TreeDrafter(3, sampled_q=sampled_q), speculative_sampling, prompt, 4, 3000)
    assert acc[0] > 100 and acc[1] + acc[2] > 100, acc  # rejections and acceptances both happen
    assert chi_square(_tokens(seen, (1, 2)), exact).p_value > 1e-3


def first_sibling_only(logits, drafts, q, temperature, generator, parents=None):
    """Wrong on purpose: tries only the first child at each node but, when it is rejected, still
    samples the correction from the residual after *every* sibling, as if all had been tried."""
    tree = Tree.from_drafts(parents, len(drafts))
    p_all = target_probs(logits, temperature)
    kids = tree.children[0]
    if not kids:  # the prefill: nothing to get wrong
        return speculative_sampling(logits, drafts, q, temperature, generator, parents)
    x = drafts[kids[0] - 1]
    qr = q[kids[0] - 1].float() if q is not None else None
    if float(torch.rand(1, generator=generator)) * (float(qr[x]) if qr is not None else 1.0) <= float(p_all[0, x]):
        return speculative_sampling(logits, drafts, q, temperature, generator, parents)
    residual = p_all[0].clone()
    for c in kids:
        residual[drafts[c - 1]] = 0.0
    return Acceptance(0, int(torch.multinomial(residual / residual.sum(), 1, generator=generator)), ())


def test_a_wrong_tree_rule_is_caught(tiny):
    torch.set_num_threads(1)
    prompt = [3, 1]
    exact = marginal(exact_sequence_distribution(tiny, prompt, 3, 1.0), (1, 2))
    seen, _ = _sample(tiny, TreeDrafter(3), first_sibling_only, prompt, 4, 3000)
    assert chi_square(_tokens(seen, (1, 2)), exact).p_value < 1e-6


def test_trie_merges_shared_prefixes_into_a_valid_tree():
    from specharness.tree import Trie
    trie = Trie()
    assert trie.insert([5, 6, 7]) == 3
    assert trie.insert([5, 6, 8]) == 4  # shares 5, 6
    assert trie.insert([9]) == 5 and trie.insert([5, 6]) == 2 and trie.insert([]) == 0
    assert trie.tokens == [5, 6, 7, 8, 9] and trie.parents == [0, 1, 2, 2, 0]
    tree = Tree.from_drafts(trie.parents, len(trie.tokens))
    for node, kids in enumerate(tree.children):
        toks = [trie.tokens[k - 1] for k in kids]
        assert len(toks) == len(set(toks))  # siblings distinct


def test_trie_ranked_keeps_the_drafts_most_paths_share_as_a_tree():
    """Votes first, then the shallower node, then the one inserted first; what is kept is closed under
    parents (renumbered), and a kept chain comes back as one (parents None)."""
    from specharness.tree import Trie
    trie = Trie()
    for path in ([5, 6, 7], [5, 6, 8], [9, 1], [5, 2]):  # 5 x3, 6 x2, 9/7/8/2/1 x1
        trie.insert(path)
    assert trie.votes == [3, 2, 1, 1, 1, 1, 1] and trie.depth == [1, 2, 3, 3, 1, 2, 2]
    tokens, parents = trie.ranked(4)  # 5, 6, then the shallow 9 before any depth-2/3 single vote
    assert tokens == [5, 6, 9, 1] and parents == [0, 1, 0, 3]
    assert trie.ranked(2) == ([5, 6], None)  # a chain
    tokens, parents = trie.ranked(100)
    assert sorted(tokens) == sorted(trie.tokens)
    assert all(p < i + 1 for i, p in enumerate(parents))  # parents before children
    Tree.from_drafts(parents, len(tokens))  # a valid tree
