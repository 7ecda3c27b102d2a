"""Adapter ablation variants (paper Table 2) and the oracle draft stop: both lossless, both loadable."""

from __future__ import annotations

import pytest
import torch

from specharness import selfdistill as sd
from specharness.methods.kangaroo import adapter as ka, checkpoint as kc, drafter as kg
from specharness.methods.oracle import drafter as oracle
from specharness.methods.vanilla import NoDraft
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.model import TargetModel
from specharness.verify import greedy

PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return TargetModel.tiny("llama", vocab_size=16, n_layers=4, hidden_size=32, n_heads=4, n_kv_heads=2, seed=3)


@pytest.fixture(scope="module")
def reference(tiny):
    return generate(tiny, NoDraft(), greedy, PROMPT, 40).token_ids


def _perturbed(tiny, ffn, own_rows, seed=0):
    a = ka.Adapter.from_target_layer(tiny, 2, ffn=ffn, head_rows=own_rows)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in a.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return a


@pytest.mark.parametrize("ffn, own", [(True, None), (False, 6), (True, 6), (False, 0)])
def test_variant_checkpoint_round_trip_and_lossless(tiny, reference, tmp_path, ffn, own):
    order = torch.randperm(tiny.vocab_size, generator=torch.Generator().manual_seed(1))
    own_rows = None if own is None else order[:own]  # 0 = an own head over the whole vocabulary
    a = _perturbed(tiny, ffn, own_rows)
    kc.save_adapter(a, tmp_path, kc.adapter_config(tiny, 2, own or 0, {"ffn": ffn}), order)
    d = kg.build(tiny, {"adapter": str(tmp_path), "exit_layer": 2, "eta": 0.0, "gamma": 4})
    assert d.adapter.ffn == ffn
    assert d.adapter.own_head_rows == (0 if own is None else (own or tiny.vocab_size))
    for k, v in a.state_dict().items():
        assert torch.equal(d.adapter.state_dict()[k], v), k
    H, inner = tiny.hidden_size, tiny.config.intermediate_size
    base = ka.Adapter.for_target(tiny).n_parameters
    assert d.adapter.n_parameters == base + (3 * H * inner + H if ffn else 0) + H * d.adapter.own_head_rows
    info = kg.adapter_info(tiny, {"adapter": str(tmp_path), "exit_layer": 2})
    assert info["ffn"] == ffn and info["lm_head"].startswith("own" if own is not None else "shared")
    gen = generate(tiny, d, greedy, PROMPT, 40)
    assert gen.token_ids == reference
    assert sum(r.drafted for r in gen.rounds) > 0
    if own:  # drafts come from the own head's rows only
        drafted = [t for t in gen.token_ids]  # accepted drafts are target tokens; check the proposals instead
        props = []
        d2 = kg.build(tiny, {"adapter": str(tmp_path), "exit_layer": 2, "eta": 0.0, "gamma": 4})
        orig = d2.propose
        d2.propose = lambda state: props.append(orig(state)) or props[-1]
        generate(tiny, d2, greedy, PROMPT, 20)
        allowed = set(order[:own].tolist())
        assert all(t in allowed for p in props for t in p.tokens) and drafted


def test_own_head_drives_the_drafts(tiny, tmp_path):
    """The own head, not the shared one, makes the draft logits: scrambling it changes the drafts."""
    a = ka.Adapter.from_target_layer(tiny, 2, head_rows=torch.empty(0, dtype=torch.long))
    x = torch.randn(3, tiny.hidden_size)
    with torch.no_grad():
        hn = a(tiny, x, tiny.new_cache(4, n_layers=1), 0)
        before = a.logits(tiny, hn, None)
        assert torch.equal(before, tiny.head(hn))  # it starts as a copy of the target's head
        a.lm_head.weight.mul_(-1)
        assert torch.allclose(a.logits(tiny, hn, None), -before)


def test_own_head_refuses_another_draft_vocab(tiny, tmp_path):
    order = torch.arange(tiny.vocab_size)
    kc.save_adapter(_perturbed(tiny, False, order[:6]), tmp_path, kc.adapter_config(tiny, 2, 6), order)
    with pytest.raises(UsageError, match="own LM head") as e:
        kg.build(tiny, {"adapter": str(tmp_path), "exit_layer": 2, "draft_vocab": 4})
    assert "\n" not in str(e.value)


def test_trainer_variants_train_save_and_load(tiny, tmp_path, monkeypatch):
    from specharness.methods.kangaroo import train as kt
    from specharness.options import resolve_options
    from test_medusa import write_selfdistill_data
    data = tmp_path / "data"
    opts = resolve_options("kangaroo", kt.OPTIONS, {
        "exit_layer": "2", "draft_vocab": "8", "conversations": "16", "max_answer_tokens": "12", "epochs": "2",
        "seqs_per_step": "4", "topk": "4", "held_out": "0.25", "data": str(data), "ffn": "true", "head": "own",
        "lr": "0.01", "train_conversations": "8"})
    write_selfdistill_data(tiny, data, sd.recipe(opts, (2,), 4), n_rows=16, answer=12)
    report = kt.run(tiny, opts, tmp_path / "ad", False)
    assert report["data"]["train_conversations"] == 8 and report["data"]["held_out_conversations"] == 4
    plain = ka.Adapter.for_target(tiny).n_parameters
    H = tiny.hidden_size
    assert report["adapter_params"] == plain + 3 * H * tiny.config.intermediate_size + H + 8 * H
    assert report["history"][-1]["train_loss"] < report["history"][0]["train_loss"] + 1e-6
    trained = kg.adapter_info(tiny, {"adapter": str(tmp_path / "ad"), "exit_layer": 2})["training"]
    assert trained["train_conversations"] == 8 and trained["top1"] == report["held_out_top1_agreement"]
    d = kg.build(tiny, {"adapter": str(tmp_path / "ad"), "exit_layer": 2, "eta": 0.0})
    assert d.adapter.ffn and d.adapter.own_head_rows == 8
    assert generate(tiny, d, greedy, PROMPT, 30).token_ids == generate(tiny, NoDraft(), greedy, PROMPT, 30).token_ids

    # fine-tuning starts from that adapter's weights: its untrained score is the first run's final one
    again = kt.run(tiny, {**opts, "init": str(tmp_path / "ad"), "epochs": 1}, tmp_path / "ad2", False)
    assert again["untrained_held_out_top1_agreement"] == report["held_out_top1_agreement"]
    def no_data(*a, **k):
        raise AssertionError("a wrong init must fail before the data is read or generated")

    monkeypatch.setattr(kt.sd, "load_or_generate", no_data)
    with pytest.raises(UsageError, match="held_out=0 holds no conversation out"):
        kt.run(tiny, {**opts, "held_out": 0.0}, tmp_path / "ad4", False)
    for init, match in ((str(tmp_path / "ad"), "ffn=True"), ("shipped", "no adapter ships"),
                        (str(tmp_path / "missing"), "does not exist")):
        with pytest.raises(UsageError, match=match) as e:
            kt.run(tiny, {**opts, "init": init, "ffn": False}, tmp_path / "ad3", False)
        assert "\n" not in str(e.value)


# ---- the oracle stop ------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_oracle_is_lossless_and_stops_exactly_at_the_first_disagreement(tiny, reference, gamma):
    d = oracle.build(tiny, {"adapter": "random:2", "exit_layer": 1, "gamma": gamma})
    gen = generate(tiny, d, greedy, PROMPT, 40)
    assert gen.token_ids == reference
    assert d.untimed_s > 0  # the look-ahead ran and was left out of the timings
    produced = 1
    for r in gen.rounds[1:]:
        room = 40 - produced - 1  # the engine's max_draft at that round
        assert r.drafted >= 1 or room == 0
        # every draft but the last agrees with the target; the last one either disagrees or hit the cap
        assert r.accepted in (r.drafted - 1, r.drafted)
        if r.accepted == r.drafted:
            assert r.drafted == min(gamma, room)
        produced += r.accepted + 1
    assert any(r.accepted < r.drafted for r in gen.rounds[1:])  # the rejection path ran
    assert gamma == 1 or any(r.accepted >= 2 for r in gen.rounds[1:])  # ... and long accepts


def test_oracle_accepts_at_least_what_a_confidence_stop_accepts(tiny, reference):
    """Per round the oracle drafts until the first disagreement, so its CR bounds any eta's."""
    cr = lambda gen: len(gen.token_ids) / len(gen.rounds)  # noqa: E731
    o = cr(generate(tiny, oracle.build(tiny, {"adapter": "random:2", "exit_layer": 1, "gamma": 6}), greedy, PROMPT, 40))
    for eta in (0.0, 0.3, 0.6, 0.9):
        k = kg.build(tiny, {"adapter": "random:2", "exit_layer": 1, "gamma": 6, "eta": eta})
        assert o >= cr(generate(tiny, k, greedy, PROMPT, 40)) - 1e-9, eta


def test_oracle_refuses_sampling(tiny):
    d = oracle.build(tiny, {"adapter": "random", "exit_layer": 1})
    with pytest.raises(UsageError, match="greedy only"):
        generate(tiny, d, greedy, PROMPT, 5, temperature=1.0)
    with pytest.raises(UsageError, match="no option 'eta'"):
        oracle.build(tiny, {"adapter": "random", "eta": 0.5})
