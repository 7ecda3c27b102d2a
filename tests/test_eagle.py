"""EAGLE: greedy identity with vanilla (tree and chain), lossless sampling through the tree rule,
bad options as one-line errors, and the trainer end to end on a tiny model."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from specharness import selfdistill as sd
from specharness.api import Proposal
from specharness.distributions import chi_square, exact_sequence_distribution, marginal
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.methods.eagle import drafter as eg
from specharness.methods.eagle.checkpoint import load_head
from specharness.methods.vanilla import NoDraft
from specharness.options import resolve_options
from specharness.model import TargetModel
from specharness.verify import greedy, speculative_sampling
from test_medusa import write_selfdistill_data


def options(**kw):
    return resolve_options("eagle", eg.OPTIONS, {"head": "untrained", "draft_vocab": "0", **{k: str(v) for k, v in kw.items()}})


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=10, n_layers=3, hidden_size=32, seed=5)


@pytest.mark.parametrize("kw", [dict(), dict(mode="chain", depth=4), dict(depth=3, top_k=3, total_tokens=8)])
def test_greedy_identical_to_vanilla(smol, vanilla_greedy, first_questions, kw):
    prompt = smol.chat_ids([{"role": "user", "content": first_questions[3].turns[0]}])
    ref = vanilla_greedy(prompt, 24)
    d = eg.build(smol, options(**kw))
    g = generate(smol, d, greedy, prompt, 24)
    assert g.token_ids == ref
    assert max(r.drafted for r in g.rounds) == d.total and all(r.width == r.drafted + 1 for r in g.rounds[1:])


def test_the_shipped_head_on_its_defaults_is_greedy_identical_on_every_subtask(smol, vanilla_greedy,
                                                                               identity_questions):
    """The defaults a user runs (the shipped head, depth 3, 4096 of its rows) on one question per subtask
    (two subtasks by default: ``identity_questions``)."""
    d = eg.build(smol, resolve_options("eagle", eg.OPTIONS, {}))
    assert d.rows is not None and d.rows.numel() == 4096 and d.depth == 3
    for q in identity_questions:
        prompt = smol.chat_ids([{"role": "user", "content": q.turns[0]}])
        g = generate(smol, d, greedy, prompt, 24)
        assert g.token_ids == vanilla_greedy(prompt, 24), q.subtask
        assert sum(r.accepted for r in g.rounds) > 0, q.subtask  # a trained head's drafts are kept


def test_the_heads_pass_over_verified_tokens_is_drafting(tiny):
    """``commit`` runs no forward: the head's rerun over the accepted tokens (with the target's
    features) is the next ``propose``'s first pass, so the engine times it as drafting, not as the
    round's bookkeeping; the output is the same as running it at once."""
    torch.set_num_threads(1)
    d = eg.build(tiny, options(depth=3, top_k=2, total_tokens=4))
    calls: list[str] = []
    forward = tiny.forward

    def counted(*args, **kw):
        calls.append(kw.get("stack", ""))
        return forward(*args, **kw)

    commit, propose = d.commit, d.propose
    d.commit = lambda *a: (calls.append("commit"), commit(*a))[1]
    d.propose = lambda *a: (calls.append("propose"), propose(*a))[1]
    tiny.forward = counted
    try:
        g = generate(tiny, d, greedy, [1, 2, 3], 8)
    finally:
        del tiny.forward
    after = [calls[i + 1] for i, c in enumerate(calls[:-1]) if c == "commit"]
    assert after and all(c == "propose" for c in after), calls  # a commit runs no head pass
    assert g.token_ids == generate(tiny, NoDraft(), greedy, [1, 2, 3], 8).token_ids

    class AtOnce(eg.EagleDrafter):  # the old order: the head's pass in commit
        def commit(self, state, verified):
            super().commit(state, verified)
            self._catch_up()

    def run(drafter) -> tuple[list, list]:
        """Every round's drafts, and every round's (drafted, accepted)."""
        drafts, propose = [], drafter.propose
        drafter.propose = lambda s: drafts.append(propose(s)) or drafts[-1]
        rounds = generate(tiny, drafter, greedy, [1, 2, 3], 8).rounds
        return [(p.tokens, p.parents) for p in drafts], [(r.drafted, r.accepted) for r in rounds]

    at_once = eg.build(tiny, options(depth=3, top_k=2, total_tokens=4))
    at_once.__class__ = AtOnce
    later_drafts, later_rounds = run(eg.build(tiny, options(depth=3, top_k=2, total_tokens=4)))
    at_once_drafts, at_once_rounds = run(at_once)
    # the same drafts every round, so the pass runs on the same tokens and features either way
    assert later_drafts == at_once_drafts
    assert later_rounds == at_once_rounds


def test_sampling_keeps_the_target_distribution(tiny):
    assert_tree_sampling_lossless(tiny, eg.build(tiny, options(depth=2, top_k=3, total_tokens=5)))


def assert_tree_sampling_lossless(tiny, d) -> None:
    """The first two sampled tokens through ``d``'s trees, against the exact distribution (chi-square),
    with rounds that reject and rounds that keep drafts."""
    torch.set_num_threads(1)
    prompt = [1, 2, 3]
    exact = marginal(exact_sequence_distribution(tiny, prompt, 3, 1.0), (1, 2))
    seen, accepted = Counter(), Counter()
    for seed in range(2500):
        g = generate(tiny, d, speculative_sampling, prompt, 4, temperature=1.0, seed=seed)
        seen[tuple(g.token_ids[1:3])] += 1
        accepted[g.rounds[1].accepted] += 1
    assert accepted[0] > 100 and accepted[1] + accepted[2] > 100, accepted
    assert chi_square(seen, exact).p_value > 1e-3


@pytest.mark.parametrize("kw, needle", [
    (dict(depth=0), "outside [1, inf]"), (dict(top_k=0), "outside [1, inf]"), (dict(mode="wide"), "is not one of"),
])
def test_bad_options_are_one_line_errors(kw, needle):
    with pytest.raises(UsageError, match="eagle") as err:
        options(**kw)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_missing_head_says_how_to_train(tiny, tmp_path):
    with pytest.raises(UsageError, match="not a directory") as err:
        eg.build(tiny, options(head=str(tmp_path / "none")))
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="train eagle"):
        eg.build(tiny, resolve_options("eagle", eg.OPTIONS, {}))


def test_trainer_learns_saves_and_loads(tiny, tmp_path):
    from specharness.methods.eagle import train as et
    data = tmp_path / "data"
    opts = resolve_options("eagle", et.OPTIONS, {"conversations": "24", "max_answer_tokens": "16", "epochs": "3",
                                                 "seqs_per_step": "4", "topk": "4", "draft_vocab": "8",
                                                 "held_out": "0.25", "data": str(data), "lr": "0.01"})
    write_selfdistill_data(tiny, data, sd.recipe(opts), n_rows=24, answer=16)
    report = et.run(tiny, opts, tmp_path / "head", False)
    ho = report["held_out"]
    assert 0 <= ho["top1_depth1"] <= 1 and ho["positions"] > 0
    assert ho["feature_loss"] < report["untrained_held_out"]["feature_loss"]  # it learned the features
    assert len(report["history"]) == 3 and report["train_flops"] > 0 and report["head_params"] > 0
    saved = json.loads((tmp_path / "head" / "report.json").read_text())
    assert saved["epochs"] == 3
    head, rows = load_head(tmp_path / "head", tiny)
    assert rows is not None and rows.numel() == 8
    # result headers quote what the head was trained on
    trained = eg.head_info(tiny, resolve_options("eagle", eg.OPTIONS, {"head": str(tmp_path / "head")}))["training"]
    assert trained["train_conversations"] == 18 and trained["top1"] == ho["top1_depth1"]
    assert 0 <= trained["top1_own_prefix"] <= 1
    d = eg.build(tiny, resolve_options("eagle", eg.OPTIONS, {"head": str(tmp_path / "head")}))
    ref = generate(tiny, NoDraft(), greedy, [1, 2, 3], 16).token_ids
    assert generate(tiny, d, greedy, [1, 2, 3], 16).token_ids == ref
    with pytest.raises(UsageError, match="already holds"):
        et.run(tiny, opts, tmp_path / "head", False)


@pytest.mark.parametrize("narrowest", [1, 8])
def test_rounds_another_drafter_proposed_are_caught_up(tiny, monkeypatch, narrowest):
    """A composite drafter (sam with fallback=eagle) asks EAGLE for drafts only on some rounds, yet
    commits every round to it: the head then runs over every token it missed and drafts what a head
    that ran every round drafts. The backlog runs as a prefill (the dynamic-width graph) where that is
    wider than the narrowest static graph, else in calls no wider than the head's widest: never at a
    width no warm-up compiled."""
    torch.set_num_threads(1)
    monkeypatch.setattr(tiny.backend, "narrowest", narrowest)

    class AtOnce(eg.EagleDrafter):  # never a backlog: the head's pass after every commit
        def commit(self, state, verified):
            super().commit(state, verified)
            self._catch_up()

    class EveryFifth:  # proposes through EAGLE on rounds 0, 5, 10, ...; nothing in between
        exit_layer = 0

        def __init__(self, inner):
            self.inner, self.max_width, self.n, self.asked = inner, inner.max_width, 0, []

        def begin(self, state, h):
            self.inner.begin(state, h)

        def propose(self, state):
            self.n += 1
            if (self.n - 1) % 5:
                return Proposal()
            p = self.inner.propose(state)
            self.asked.append((p.tokens, p.parents))
            return p

        def commit(self, state, verified):
            self.inner.commit(state, verified)

    shape = dict(depth=2, top_k=2, total_tokens=3)
    backlog, at_once = EveryFifth(eg.build(tiny, options(**shape))), EveryFifth(eg.build(tiny, options(**shape)))
    at_once.inner.__class__ = AtOnce
    calls, forward = [], tiny.forward  # the head's calls: rows, and whether a prefill

    def counted(x, *args, **kw):
        if kw.get("stack") == backlog.inner.stack:
            calls.append((x.shape[0], kw.get("prefill", False)))
        return forward(x, *args, **kw)

    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]  # its prefill is wider than either narrowest
    tiny.forward = counted
    try:
        runs = [generate(tiny, d, greedy, prompt, 24) for d in (backlog, at_once)]
    finally:
        del tiny.forward
    assert runs[0].token_ids == runs[1].token_ids == generate(tiny, NoDraft(), greedy, prompt, 24).token_ids
    assert len(backlog.asked) >= 3 and backlog.asked == at_once.asked
    widest = max(shape["top_k"], shape["depth"] + 1)
    assert all(n > narrowest if prefill else n <= widest for n, prefill in calls), calls
