"""Frequency-ranked draft vocabularies (``specharness.draft_vocab``) for the drafters that read the
model's ranking (early exit, self-spec, Medusa): which rows a draft head keeps, how a draft token is
drawn from them, greedy outputs that stay vanilla's, sampling that stays the target's distribution,
and ``train draft-vocab``, which builds a model's ranking."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from specharness import draft_vocab
from specharness.distributions import chi_square, exact_sequence_distribution, marginal
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.methods.vanilla import NoDraft
from specharness.model import TargetModel
from specharness.options import resolve_options
from specharness.plugins import build_registry
from specharness.verify import greedy, speculative_sampling

VOCAB, PROMPT = 16, [3, 1, 4]
ROWS = 6  # the draft head keeps 6 of the 16 tokens


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=VOCAB, n_layers=4, seed=11)


@pytest.fixture
def ranking(tiny):
    """A ranking for the tiny model in the (test) cache, as 'train draft-vocab' leaves one; removed after."""
    order = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(7))
    path = draft_vocab.built_path(tiny)
    draft_vocab.save(path, order, None, {"model": tiny.name, "vocab_size": VOCAB})
    yield order
    path.unlink()


def test_rank_orders_by_count_then_by_id():
    assert draft_vocab.rank(torch.tensor([3, 0, 5, 3, 0])).tolist() == [2, 0, 3, 1, 4]


def test_a_greedy_draw_is_the_subset_argmax_and_its_confidence():
    logits = torch.tensor([1.0, 3.0, 2.0, 3.0])  # a tie: the first largest wins, as argmax
    d = draft_vocab.draw(logits, torch.tensor([7, 2, 9, 4]), 12, 0.0, None)
    assert d.token == 2 and d.q is None
    assert d.confidence == pytest.approx(float(torch.softmax(logits, -1).max()))
    assert draft_vocab.draw(logits, None, 4, 0.0, None).token == 1


def test_a_sampled_draw_hands_over_q_zero_outside_the_subset():
    rows = torch.tensor([5, 1, 8])
    g = torch.Generator().manual_seed(0)
    seen = Counter(draft_vocab.draw(torch.tensor([0.5, 0.0, -0.5]), rows, 10, 0.7, g).token for _ in range(300))
    assert set(seen) == {5, 1, 8}
    d = draft_vocab.draw(torch.tensor([0.5, 0.0, -0.5]), rows, 10, 0.7, g)
    want = torch.softmax(torch.tensor([0.5, 0.0, -0.5]) / 0.7, -1)
    torch.testing.assert_close(d.q[rows], want)
    assert float(d.q.sum()) == pytest.approx(1.0) and d.q.shape == (10,) and int((d.q > 0).sum()) == 3
    assert d.confidence == pytest.approx(float(want.max()))


def test_rows_without_a_ranking(tiny):
    assert draft_vocab.rows(tiny, "early_exit", -1, 4) is None  # the default falls back to the full head
    assert draft_vocab.rows(tiny, "early_exit", 0, 4) is None
    with pytest.raises(UsageError, match="train draft-vocab"):
        draft_vocab.rows(tiny, "early_exit", 4, 4)


def test_rows_with_a_ranking(tiny, ranking):
    assert draft_vocab.rows(tiny, "m", -1, 4).tolist() == ranking[:4].tolist()
    assert draft_vocab.rows(tiny, "m", 5, 4).tolist() == ranking[:5].tolist()
    assert draft_vocab.rows(tiny, "m", VOCAB, 4) is None  # every token: the full head
    assert draft_vocab.describe(tiny, draft_vocab.rows(tiny, "m", 5, 4))["draft_vocab"] == 5


def test_select_serves_trained_drafters_rankings_too():
    """Kangaroo's adapter and EAGLE's head store their own ranking: the same rule, their own words."""
    ranking = torch.tensor([4, 2, 9, 0])
    assert draft_vocab.select(ranking, -1, 3, 10, "eagle", "-").tolist() == [4, 2, 9]  # the trained size
    assert draft_vocab.select(None, -1, 3, 10, "eagle", "-") is None  # nothing ranked: the full head
    with pytest.raises(UsageError, match="eagle.draft_vocab=2: this head stores no token frequencies") as err:
        draft_vocab.select(None, 2, 0, 10, "eagle", "this head stores no token frequencies; use 0")
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="exceeds the 4 tokens ranked"):
        draft_vocab.select(ranking, 6, 0, 10, "kangaroo", "-")


def test_a_ranking_for_another_vocabulary_is_refused(tiny):
    path = draft_vocab.built_path(tiny)
    draft_vocab.save(path, torch.arange(VOCAB * 2), None, {"model": tiny.name, "vocab_size": VOCAB * 2})
    try:
        with pytest.raises(UsageError, match="does not fit"):
            draft_vocab.rows(tiny, "early_exit", -1, 4)
    finally:
        path.unlink()


# each drafter that reads the model's ranking, on the tiny model, with 6 of its 16 tokens
DRAFTERS = {"early_exit": ["exit_layer=2", "gamma=3"], "self-spec": ["skip=a1,m2", "eta=0", "gamma=3"],
            "medusa-chain": ["heads_path=random", "heads=3"],
            "medusa-tree": ["heads_path=random", "heads=3", "tree=mc_sim_7b_63"]}


class Recording:
    """A drafter that keeps every token it proposed."""

    def __init__(self, drafter) -> None:
        self.drafter, self.drafts = drafter, []

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def propose(self, state):
        proposal = self.drafter.propose(state)
        self.drafts += list(proposal.tokens)
        return proposal


def _drafter(tiny, name: str) -> Recording:
    method = "medusa" if name.startswith("medusa") else name
    spec = build_registry().method(method)
    return Recording(spec.build(tiny, resolve_options(method, spec.options, DRAFTERS[name] + [f"draft_vocab={ROWS}"])))


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_greedy_output_is_vanilla_s_with_a_draft_vocabulary(tiny, ranking, name):
    drafter = _drafter(tiny, name)
    assert drafter.rows.tolist() == ranking[:ROWS].tolist()
    ref = generate(tiny, NoDraft(), greedy, PROMPT, 20).token_ids
    out = generate(tiny, drafter, greedy, PROMPT, 20)
    assert out.token_ids == ref
    assert sum(r.accepted for r in out.rounds) > 0  # drafts were made and some were kept
    assert drafter.drafts and set(drafter.drafts) <= set(ranking[:ROWS].tolist()), "a draft outside the draft vocabulary"


@pytest.mark.parametrize("name", ["early_exit", "self-spec", "medusa-chain"])
def test_sampling_with_a_draft_vocabulary_keeps_the_target_s_distribution(tiny, ranking, name):
    """Tokens 2 and 3 come from the first verified round: their marginals must be the target's exact
    ones, although q is zero on 10 of the 16 tokens (those the target may still emit)."""
    T, n = 1.0, 1200
    joint = exact_sequence_distribution(tiny, PROMPT, 3, T)
    drafter = _drafter(tiny, name)
    outs, drafted, accepted = [], 0, 0
    for seed in range(n):
        g = generate(tiny, drafter, speculative_sampling, PROMPT, 3, T, seed)
        outs.append(g.token_ids)
        drafted += sum(r.drafted for r in g.rounds)
        accepted += sum(r.accepted for r in g.rounds)
    assert min(accepted, drafted - accepted) > 30, (drafted, accepted)  # acceptance and rejection both seen
    assert any(o[1] not in set(ranking[:ROWS].tolist()) for o in outs)  # tokens outside the subset still occur
    for j in (1, 2):
        p = chi_square(Counter(o[j] for o in outs), marginal(joint, j)).p_value
        assert p > 1e-3, f"{name}: sampled token {j + 1} does not follow the target (chi-square p = {p:.2e})"


def test_train_draft_vocab_ranks_the_target_s_own_answer_tokens(tiny, tmp_path):
    from safetensors import safe_open

    from specharness import selfdistill as sd
    from test_medusa import write_selfdistill_data
    spec = build_registry().trainer("draft-vocab")
    options = resolve_options("draft-vocab", spec.options, [f"data={tmp_path / 'data'}", "conversations=12",
                                                            "max_answer_tokens=10", "held_out=0.25"])
    settings = sd.recipe({**options, "train_conversations": 0})
    write_selfdistill_data(tiny, tmp_path / "data", settings, n_rows=12, answer=10)
    report = spec.run(tiny, options, tmp_path, False)
    out = tmp_path / f"{tiny.name}.safetensors"
    assert report["out"] == str(out) and out.is_file()
    with safe_open(str(out), "pt") as f:
        order, counts = f.get_tensor(draft_vocab.KEY), f.get_tensor(draft_vocab.COUNTS_KEY)
    ds, _, _ = sd.load_or_generate(tiny, settings, tmp_path / "data")
    train_rows, held = sd.split_rows(len(ds), {**options, "train_conversations": 0})
    assert held and report["conversations"] == len(train_rows) == 9  # held-out answers are not counted
    assert counts.tolist() == sd.token_frequencies(ds.select(train_rows), VOCAB).tolist()
    assert sorted(order.tolist()) == list(range(VOCAB))
    assert all(counts[a] >= counts[b] for a, b in zip(order[:-1], order[1:]))
    assert int(counts.sum()) == report["answer_tokens"] == 9 * 10
    # the built ranking is the one drafters read (it comes before a shipped one)
    built = draft_vocab.built_path(tiny)
    built.parent.mkdir(parents=True, exist_ok=True)
    out.replace(built)
    try:
        assert draft_vocab.rows(tiny, "early_exit", 3, 0).tolist() == order[:3].tolist()
    finally:
        built.unlink()
