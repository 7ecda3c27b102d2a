"""transformers' self-speculation peers run through the harness and reproduce vanilla's greedy output."""

from __future__ import annotations

import pytest

from specharness.errors import UsageError
from specharness.plugins import build_registry
from specharness.runner import Settings, build_method

NEW_TOKENS = 24


@pytest.fixture(scope="module")
def two_prompts(smol, first_questions):
    chosen = [q for q in first_questions if q.subtask in ("qa", "math_reasoning")]
    return [(q.subtask, smol.chat_ids([{"role": "user", "content": q.turns[0]}])) for q in chosen]


@pytest.fixture(scope="module")
def vanilla(vanilla_greedy, two_prompts):
    return [vanilla_greedy(ids, NEW_TOKENS) for _, ids in two_prompts]


@pytest.mark.parametrize("method, options, n_prompts", [
    ("hf-prompt-lookup", [], 2),
    ("hf-assisted-early-exit", [], 2),
    ("hf-prompt-lookup", ["num_tokens=3"], 1),
])
def test_greedy_equals_vanilla(smol, two_prompts, vanilla, method, options, n_prompts):
    m = build_method(build_registry(), method, options, smol, 0.0)
    assert m.verifier == "own"
    for (subtask, ids), ref in list(zip(two_prompts, vanilla))[:n_prompts]:
        out = m.generate(ids, Settings(max_new_tokens=NEW_TOKENS), 0)
        assert out.token_ids == ref, f"{method} {options} differs from vanilla on {subtask}"
        # rounds are counted from the model's own full-depth forwards and must add up
        assert sum(r.accepted + 1 for r in out.rounds) == len(out.token_ids)
        assert all(r.accepted <= r.drafted for r in out.rounds)
        assert len(out.rounds) <= len(out.token_ids)


def test_hf_rounds_from_forward_calls():
    """Hand-made (start, width) calls: plain decoding, drafts in the prefill, a long accept."""
    from specharness.methods.hf_generate import rounds_from_forwards
    # vanilla: prefill of 5 prompt tokens, then one token per forward; 3 tokens generated
    assert rounds_from_forwards([(0, 5), (5, 1), (6, 1)], 5, 3) == [(0, 0), (0, 0), (0, 0)]
    # prefill carries 3 candidates (all rejected), then 4 drafted with 3 accepted, then the end
    calls = [(0, 8), (5, 5), (9, 1)]
    assert rounds_from_forwards(calls, 5, 6) == [(3, 0), (4, 3), (0, 0)]
    assert sum(a + 1 for _, a in rounds_from_forwards(calls, 5, 6)) == 6


@pytest.mark.parametrize("method, opts, needle", [
    ("hf-assisted-early-exit", ["exit_layer=0"], "exit_layer"),
    ("hf-assisted-early-exit", ["exit_layer=30"], "1..29"),
    ("hf-prompt-lookup", ["num_tokens=0"], "num_tokens"),
    ("hf-prompt-lookup", ["gamma=3"], "no option 'gamma'"),
])
def test_bad_options_are_one_line_usage_errors(smol, method, opts, needle):
    with pytest.raises(UsageError) as err:
        build_method(build_registry(), method, opts, smol, 0.0)
    assert needle in str(err.value) and "\n" not in str(err.value)
