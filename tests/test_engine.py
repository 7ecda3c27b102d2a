"""The engine: vanilla equals transformers' generate; sampling is seeded and reproducible."""

from __future__ import annotations

import torch

from methods.hf_generate import hf_decoder
from methods.vanilla import NoDraft
from specharness.engine import generate
from specharness.plugins import build_registry
from specharness.runner import Settings, build_method, run_question
from specharness.verify import greedy, speculative_sampling


def test_vanilla_equals_hf_generate_on_every_subtask(smol, first_questions):
    """Both turns of the multi-turn question included: turn 2 sees each method's own answer."""
    reg = build_registry()
    s = Settings(max_new_tokens=32)
    vanilla = build_method(reg, "vanilla", [], smol, 0.0)
    hf = build_method(reg, "hf-generate", [], smol, 0.0)
    for q in first_questions:
        ours, theirs = run_question(smol, vanilla, q, s), run_question(smol, hf, q, s)
        assert len(ours.generations) == len(q.turns)
        for t, (a, b) in enumerate(zip(ours.generations, theirs.generations)):
            assert a.token_ids == b.token_ids, f"question {q.question_id} turn {t + 1} differs"
        assert all(len(g.rounds) == len(g.token_ids) for g in ours.generations)  # one forward per token


def test_sampling_is_seeded_and_reproducible():
    from specharness.target import TargetModel
    target = TargetModel.tiny("llama", vocab_size=50, n_layers=2, seed=4)
    run = lambda seed: generate(target, NoDraft(), speculative_sampling, [1, 2, 3], 20, 1.0, seed).token_ids
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_round_records_add_up():
    from specharness.target import TargetModel
    target = TargetModel.tiny("qwen2", vocab_size=50, n_layers=2, seed=5)
    seen = []
    g = generate(target, NoDraft(), greedy, [4, 5, 6], 12, on_round=seen.append)
    assert len(g.token_ids) == 12 and g.stop == "length"
    assert seen == g.rounds and sum(r.accepted + 1 for r in g.rounds) == 12
    assert all(r.verify_s > 0 for r in g.rounds)


def test_eos_stops_generation():
    from specharness.target import TargetModel
    target = TargetModel.tiny("llama", vocab_size=50, n_layers=2, seed=6)
    free = generate(target, NoDraft(), greedy, [4, 5, 6], 10).token_ids
    target.eos_ids = frozenset({free[3]})
    stopped = generate(target, NoDraft(), greedy, [4, 5, 6], 10)
    assert stopped.stop == "eos" and stopped.token_ids == free[:free.index(free[3]) + 1]
