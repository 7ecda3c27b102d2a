"""The training-free drafters (pld, recycling, lookahead, self-spec): greedy identity with vanilla on every subtask,
lossless sampling (chi-square against the exact distribution; sam's too, its other tests in test_sam.py), bad
options as one-line errors."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from specharness.distributions import chi_square, exact_sequence_distribution, marginal
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.methods.vanilla import NoDraft
from specharness.plugins import build_registry
from specharness.runner import build_method
from specharness.model import TargetModel
from specharness.verify import greedy, speculative_sampling

METHODS = {"pld": ["occurrences=1", "", "occurrences=4:nodes=15"], "recycling": ["nodes=15", "nodes=7:top_k=4"],
           "lookahead": [""],
           # a hand-given mask: the search's calibration data would cost minutes per fresh cache;
           # long drafting chains (eta=0) are covered on the tiny model by the sampling test
           "self-spec": ["skip=a3,m5,a10,m20"]}


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _drafter(registry, target, name, opts):
    method = build_method(registry, name, [o for o in opts.split(":") if o], target, 0.0)
    return registry.drafters[name].build(target, method.options)


@pytest.mark.parametrize("name, opts", [(n, o) for n, os in METHODS.items() for o in os])
def test_greedy_identical_to_vanilla_on_every_subtask(smol, vanilla_greedy, identity_questions, registry, name, opts):
    accepted = 0
    for q in identity_questions:
        prompt = smol.chat_ids([{"role": "user", "content": q.turns[0]}])
        ref = vanilla_greedy(prompt, 40)
        g = generate(smol, _drafter(registry, smol, name, opts), greedy, prompt, 40)
        assert g.token_ids == ref, f"{name} {opts} differs from vanilla on {q.subtask}"
        accepted += sum(r.accepted for r in g.rounds)
    assert accepted > 0  # drafts were accepted somewhere: the speculative path ran


@pytest.mark.parametrize("name, opts", [("pld", "occurrences=4:k=3:nodes=6"), ("recycling", "nodes=7:top_k=3"),
                                        ("lookahead", "window=2:ngram=3:guesses=2"), ("self-spec", "skip=m1:eta=0"),
                                        ("sam", "fallback=none:min_match=1:k=3"),
                                        ("sam", "min_match=2:k=3:fallback_options=nodes=7+top_k=3")])
def test_sampling_keeps_the_target_distribution(registry, name, opts):
    """A repetitive prompt on a tiny model, so lookups and recycled successors exist and get
    accepted and rejected; tokens 3-4 of 5 must follow the target's exact joint."""
    torch.set_num_threads(1)
    tiny = TargetModel.tiny("llama", vocab_size=6, n_layers=2, hidden_size=32, seed=11)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    exact = marginal(exact_sequence_distribution(tiny, prompt, 4, 1.0), (2, 3))
    d = _drafter(registry, tiny, name, opts)
    seen, drafted, accepted = Counter(), 0, 0
    for seed in range(2500):
        g = generate(tiny, d, speculative_sampling, prompt, 5, temperature=1.0, seed=seed)
        seen[tuple(g.token_ids[2:4])] += 1
        drafted += sum(r.drafted for r in g.rounds)
        accepted += sum(r.accepted for r in g.rounds)
    assert drafted > 1000 and 0 < accepted < drafted
    assert chi_square(seen, exact).p_value > 1e-3


@pytest.mark.parametrize("name, opts, needle", [
    ("pld", "k=0", "outside [1, inf]"), ("pld", "min_ngram=4:max_ngram=2", "exceeds pld.max_ngram"),
    ("recycling", "nodes=0", "outside"), ("recycling", "warm=maybe", "must be true or false"),
    ("lookahead", "ngram=1", "outside"), ("lookahead", "window=0", "outside"),
    ("self-spec", "skip=x3", "is not aI or mI"), ("self-spec", "skip=a30", "is not aI or mI"),
    ("self-spec", "skip_ratio=2", "outside"),
])
def test_bad_options_are_one_line_errors(smol, registry, name, opts, needle):
    with pytest.raises(UsageError) as err:
        _drafter(registry, smol, name, opts)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_recycling_matrix_resets_per_question_unless_warm(registry):
    tiny = TargetModel.tiny("llama", vocab_size=16, n_layers=2, seed=2)
    cold, warm = _drafter(registry, tiny, "recycling", ""), _drafter(registry, tiny, "recycling", "warm=true")
    for d in (cold, warm):
        generate(tiny, d, greedy, [1, 2, 3], 12)
        filled = len(d.successors)
        assert filled > 0
        generate(tiny, d, greedy, [4, 5], 1)  # begin of a new question, no round after it
    assert len(cold.successors) == 0 and len(warm.successors) >= filled


def test_recycling_successors_come_from_its_draft_vocabulary_and_stay_lossless():
    """With a draft vocabulary, each verified token's successors are the top-k of its logits over those
    tokens alone, drafting draws only them, and the greedy output is vanilla's."""
    from specharness.methods.recycling import TokenRecycling
    tiny = TargetModel.tiny("llama", vocab_size=16, n_layers=2, seed=2)
    rows = torch.tensor([3, 5, 6, 9, 11, 12, 14])
    d = TokenRecycling(tiny, 3, 7, False, rows)
    prompt = [1, 2, 3]
    g = generate(tiny, d, greedy, prompt, 16)
    assert g.token_ids == generate(tiny, NoDraft(), greedy, prompt, 16).token_ids
    assert sum(r.drafted for r in g.rounds) > 0
    assert d.successors and {t for row in d.successors.values() for t in row} <= set(rows.tolist())
    from specharness.api import Verified
    logits = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    d.commit(None, Verified(0, 0, (), logits[:1], logits[:1], tree_tokens=[4, 7], tree_logits=logits))
    for i, token in enumerate([4, 7]):  # each verified node's row: the top 3 of its logits over the rows, in order
        assert d.successors[token] == rows[logits[i][rows].topk(3).indices].tolist()


def test_a_warm_matrix_never_learns_a_turn_from_its_own_earlier_runs(registry):
    """A benchmark runs each turn more than once (warm-up, repeats): warm, each run of a prompt starts
    from the matrix its first run started from, so a repeat drafts what the first run drafted, and
    the next question still starts from everything learnt before it."""
    tiny = TargetModel.tiny("llama", vocab_size=16, n_layers=2, seed=2)
    warm = _drafter(registry, tiny, "recycling", "warm=true")
    generate(tiny, warm, greedy, [7, 8, 9, 7], 16)  # an earlier question
    runs = [[(r.drafted, r.accepted) for r in generate(tiny, warm, greedy, [1, 2, 3], 16).rounds] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    learnt = dict(warm.successors)
    generate(tiny, warm, greedy, [4, 5], 1)  # the next question: nothing forgotten
    assert warm.successors == learnt


def test_lookahead_pool_fills_from_the_jacobi_branch(registry):
    """After the levels fill, every round adds n-grams of size N keyed by their first token."""
    tiny = TargetModel.tiny("llama", vocab_size=16, n_layers=2, seed=5)
    d = _drafter(registry, tiny, "lookahead", "window=3:ngram=4")
    generate(tiny, d, greedy, [1, 2, 3, 4], 24)
    assert len(d.levels) == 3 and all(len(level) == 3 for level in d.levels)
    grams = [g for gs in d.pool.values() for g in gs]
    assert grams and all(len(g) == 3 for g in grams)


def test_bayes_search_beats_its_random_start():
    """A planted optimum: the Gaussian process's proposals must climb above the random masks."""
    from specharness.methods.selfspec import N_RANDOM, bayes_search
    planted = tuple(int(i % 3 == 0) for i in range(24))
    history = bayes_search(lambda bits: -sum(a != b for a, b in zip(bits, planted)), 24, sum(planted), 40,
                           progress=False)
    assert len(history) == 40 and all(sum(h["bits"]) == sum(planted) for h in history)
    assert max(h["score"] for h in history[N_RANDOM:]) > max(h["score"] for h in history[:N_RANDOM])


def test_matchness_is_one_for_the_full_model_and_lower_when_skipping():
    from specharness.methods.selfspec import matchness
    tiny = TargetModel.tiny("llama", vocab_size=32, n_layers=3, seed=4)
    ref = generate(tiny, NoDraft(), greedy, [1, 2, 3], 30).token_ids
    ids = torch.tensor([1, 2, 3, *ref])
    mask = torch.zeros(len(ids), dtype=torch.bool)
    mask[2:-1] = True  # predictions of the answer tokens
    seqs = [(ids, mask)]
    assert matchness(tiny, seqs, ((), ())) == 1.0
    assert matchness(tiny, seqs, ((0, 1, 2), (0, 1, 2))) < 1.0


def test_pld_occurrences_vote_and_one_occurrence_is_the_latest_chain():
    """After ``1 2``: the latest occurrence goes on ``9 9``, two earlier ones ``3 4``. Voting drafts
    the shared ``3 4`` first and covers the latest one's first token beside it; ``occurrences=1``
    drafts the latest chain alone, as pld always did."""
    from types import SimpleNamespace
    from specharness.methods.pld import PromptLookup
    ids = [1, 2, 3, 4, 7, 1, 2, 3, 4, 8, 1, 2, 9, 9, 5, 1, 2]
    state = SimpleNamespace(ids=ids, max_new_tokens=1000, prompt_len=len(ids), max_draft=100)
    votes, latest = PromptLookup(2, 1, 3, 16, 4), PromptLookup(2, 1, 3, 1, 7)
    for d in (votes, latest):
        d.begin(state, None)
    p = votes.propose(state)
    assert (p.tokens, p.parents, p.source) == ([3, 4, 9, 9], [0, 1, 0, 3], "2-gram")
    assert votes.max_width == 5
    p = latest.propose(state)
    assert (p.tokens, p.parents) == ([9, 9, 5], None)
