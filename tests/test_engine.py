"""The engine: vanilla equals transformers' generate; sampling is seeded and reproducible."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from specharness.methods.vanilla import NoDraft
from specharness.engine import generate
from specharness.plugins import build_registry
from specharness.runner import Settings, build_method, pending, run_question
from specharness.tasks.specbench import Question
from specharness.verify import greedy, speculative_sampling


def test_vanilla_equals_hf_generate_on_every_subtask(smol, first_questions, identity_questions):
    """Both turns of the multi-turn question (MT-bench's, always) included: turn 2 sees each method's own
    answer."""
    reg = build_registry()
    s = Settings(max_new_tokens=32)
    vanilla = build_method(reg, "vanilla", [], smol, 0.0)
    hf = build_method(reg, "hf-generate", [], smol, 0.0)
    assert len(first_questions[0].turns) == 2
    for q in {q.question_id: q for q in (first_questions[0], *identity_questions)}.values():
        ours, theirs = run_question(smol, vanilla, q, s), run_question(smol, hf, q, s)
        assert len(ours.generations) == len(q.turns)
        for t, (a, b) in enumerate(zip(ours.generations, theirs.generations)):
            assert a.token_ids == b.token_ids, f"question {q.question_id} turn {t + 1} differs"
        assert all(len(g.rounds) == len(g.token_ids) for g in ours.generations)  # one forward per token


def test_sampling_is_seeded_and_reproducible():
    from specharness.model import TargetModel
    target = TargetModel.tiny("llama", vocab_size=50, n_layers=2, seed=4)
    run = lambda seed: generate(target, NoDraft(), speculative_sampling, [1, 2, 3], 20, 1.0, seed).token_ids
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_round_records_add_up():
    from specharness.model import TargetModel
    target = TargetModel.tiny("qwen2", vocab_size=50, n_layers=2, seed=5)
    seen = []
    g = generate(target, NoDraft(), greedy, [4, 5, 6], 12, on_round=seen.append)
    assert len(g.token_ids) == 12 and g.stop == "length"
    assert seen == g.rounds and sum(r.accepted + 1 for r in g.rounds) == 12
    assert all(r.verify_s > 0 for r in g.rounds)


def test_eos_stops_generation():
    from specharness.model import TargetModel
    target = TargetModel.tiny("llama", vocab_size=50, n_layers=2, seed=6)
    free = generate(target, NoDraft(), greedy, [4, 5, 6], 10).token_ids
    target.eos_ids = frozenset({free[3]})
    stopped = generate(target, NoDraft(), greedy, [4, 5, 6], 10)
    assert stopped.stop == "eos" and stopped.token_ids == free[:free.index(free[3]) + 1]


class _Replay:
    """Drafts the target's own greedy continuation, ``k`` tokens a round: every draft is accepted."""

    exit_layer = 0

    def __init__(self, continuation: list[int], k: int) -> None:
        self.continuation, self.k = continuation, k

    def begin(self, state, prefill_hidden):
        pass

    def propose(self, state):
        from specharness.api import Proposal
        at = len(state.ids) - state.prompt_len
        return Proposal(self.continuation[at:at + min(self.k, state.max_draft)])

    def commit(self, state, accepted):
        pass


def test_an_exit_layer_drafter_gets_the_states_entering_its_layer():
    """The prefill is one full forward; a drafter with exit layer l must get the prompt's states
    after layer l - 1 (those entering l), not after l: verification would stay lossless either way,
    so only this test sees an off-by-one."""
    from specharness.model import TargetModel
    target = TargetModel.tiny("llama", vocab_size=50, n_layers=4, seed=7)
    prompt = [4, 5, 6, 7, 8]
    seen = []

    class Recorder(NoDraft):
        exit_layer = 2

        def begin(self, state, prefill_hidden):
            seen.append(prefill_hidden)

    generate(target, Recorder(), greedy, prompt, 3)
    want = target.layers(target.embed(torch.tensor(prompt)), 0, 0, 2, target.new_cache(8))
    torch.testing.assert_close(seen[0], want, rtol=0, atol=0)


def test_a_round_cut_short_by_eos_records_only_the_drafts_it_kept():
    """An eos among accepted drafts ends the generation there: the round's ``accepted`` counts the
    drafts kept (up to and including the eos), not the ones after it that were thrown away, and
    the tokens per round add up to the tokens generated."""
    from specharness.records import QuestionResult
    from specharness.results import question_record
    from specharness.model import TargetModel
    target = TargetModel.tiny("llama", vocab_size=50, n_layers=2, seed=6)
    prompt = [4, 5, 6]
    free = generate(target, NoDraft(), greedy, prompt, 12).token_ids
    eos_at = next(i for i in range(2, 12) if free[i] not in free[:i])  # first occurrence, past the prefill token
    target.eos_ids = frozenset({free[eos_at]})
    g = generate(target, _Replay(free, k=eos_at + 2), greedy, prompt, 12)
    assert g.stop == "eos" and g.token_ids == free[:eos_at + 1]
    last = g.rounds[-1]
    assert last.drafted > eos_at  # the round drafted past the eos, and all its drafts matched
    assert last.accepted == eos_at  # drafts kept: up to and including the eos (the first came from the prefill)
    rec = question_record(QuestionResult(1, "qa", "qa", "replay", generations=[g]), {"method": "x", "model": "m"})
    assert sum(rec["choices"][0]["accept_lengths"]) == len(g.token_ids)


def test_pending_work_takes_the_subtasks_in_turn_and_skips_what_is_done():
    qs = [Question(f"{s}{i}", s, s, ("?",)) for s in ("qa", "math", "rag") for i in range(3)]
    a, b = SimpleNamespace(label="a"), SimpleNamespace(label="b")
    done = {"a": {"qa0", "math0", "rag0", "qa1"}, "b": {"qa0", "math0", "rag0"}}
    order = [(qi, q.question_id, [m.label for m in todo]) for qi, q, todo in pending([a, b], qs, done)]
    assert order == [(1, "qa1", ["b"]), (4, "math1", ["a", "b"]), (7, "rag1", ["a", "b"]),
                     (2, "qa2", ["a", "b"]), (5, "math2", ["a", "b"]), (8, "rag2", ["a", "b"])]
