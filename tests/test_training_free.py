"""The training-free drafters (pld, recycling): greedy identity with vanilla on every subtask,
lossless sampling (chi-square against the exact distribution), bad options as one-line errors."""

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
from specharness.target import TargetModel
from specharness.verify import greedy, speculative_sampling

METHODS = {"pld": ["branches=1", "branches=3"], "recycling": ["nodes=15", "nodes=7:top_k=4"]}


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _drafter(registry, target, name, opts):
    method = build_method(registry, name, [o for o in opts.split(":") if o], target, 0.0)
    return registry.drafters[name].build(target, method.options)


@pytest.mark.parametrize("name, opts", [(n, o) for n, os in METHODS.items() for o in os])
def test_greedy_identical_to_vanilla_on_every_subtask(smol, first_questions, registry, name, opts):
    accepted = 0
    for q in first_questions:
        prompt = smol.chat_ids([{"role": "user", "content": q.turns[0]}])
        ref = generate(smol, NoDraft(), greedy, prompt, 40).token_ids
        g = generate(smol, _drafter(registry, smol, name, opts), greedy, prompt, 40)
        assert g.token_ids == ref, f"{name} {opts} differs from vanilla on {q.subtask}"
        accepted += sum(r.accepted for r in g.rounds)
    assert accepted > 0  # drafts were accepted somewhere: the speculative path ran


@pytest.mark.parametrize("name, opts", [("pld", "branches=2:k=3"), ("recycling", "nodes=7:top_k=3")])
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
        filled = int((d.matrix[:, 0] >= 0).sum())
        assert filled > 0
        generate(tiny, d, greedy, [4, 5], 1)  # begin of a new question, no round after it
    assert int((cold.matrix[:, 0] >= 0).sum()) == 0 and int((warm.matrix[:, 0] >= 0).sum()) >= filled
