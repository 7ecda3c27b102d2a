"""The profile cost model's arithmetic: a question's predicted time from profiled costs and its rounds."""

from __future__ import annotations

import pytest
import torch

from specharness.costmodel import Profile, ceilings, predict, question_ms
from specharness.records import QuestionRecord, TurnRounds

PROFILE = {
    "configs": [{"dtype": "bfloat16", "compile": "none",
                 "by_width": {"100": {"1": 10.0, "2": 12.0, "4": 16.0}, "300": {"1": 14.0, "2": 16.0, "4": 20.0}},
                 "prefill_ms": {"10": 5.0, "30": 15.0}},
                {"dtype": "bfloat16", "compile": "max-autotune",
                 "by_width": {"100": {"1": 10.0, "2": 12.0, "4": 16.0, "8": 18.0}},
                 "prefill_ms": {"10": 5.0, "30": 15.0}}],
    "width_buckets": [1, 8],
    "drafters": {"vanilla": {"draft_fixed_ms": 0.0, "draft_per_token_ms": 0.0, "bookkeeping_ms": 1.0},
                 "chain": {"draft_fixed_ms": 2.0, "draft_per_token_ms": 1.0, "bookkeeping_ms": 1.0}},
    "hf_generate": {"bfloat16": {"step_ms": 20.0, "step_context": 100, "by_width": {"100": {"1": 15.0, "3": 19.0}},
                                 "prefill_ms": {"20": 40.0}}},
    "decoders": {"hf-generate": {"draft_per_token_ms": 0.0}, "hf-peer": {"draft_per_token_ms": 3.0, "per_round_ms": 1.0}},
}


def _record(qid, drafted, accepted, width, time_s, tokens):
    turn = TurnRounds(drafted, accepted, width=width)
    return QuestionRecord(qid, "qa", rounds=[turn], new_tokens=[tokens], wall_time=[time_s])


def test_forward_cost_interpolates_context_and_pads_compiled_widths():
    p = Profile(PROFILE)
    eager = p.engine_costs("bfloat16", "none", "vanilla")
    assert eager.forward(1, 200) == pytest.approx(12.0)  # halfway between contexts 100 and 300
    assert eager.forward(3, 100) == pytest.approx(14.0)  # eager: linear between widths 2 and 4
    compiled = p.engine_costs("bfloat16", "max-autotune", "vanilla")
    assert compiled.forward(3, 100) == pytest.approx(16.0)  # padded to bucket 8: median of widths 2..8
    assert eager.prefill(20) == pytest.approx(10.0)


def test_engine_and_transformers_questions_cost_what_their_rounds_say():
    p = Profile(PROFILE)
    # engine: a 100-token prefill (50 ms: linear past the profiled 10..30), a round drafting nothing
    # (forward 10 + bookkeeping 1), then one drafting 2 at context 101 (2 + 2 x 1, forward 14.02, 1)
    chain = p.engine_costs("bfloat16", "none", "chain")
    turn = TurnRounds([0, 0, 2], [0, 0, 1], width=[100, 1, 3])
    assert question_ms([turn], chain) == pytest.approx(50.0 + 11.0 + 4.0 + 14.02 + 1.0)
    # transformers: its own forward, generate's overhead (step 20 - forward 15), the peer's 1 ms per
    # round and 3 ms per drafted token
    peer = p.costs({"dtype": "bfloat16", "compile": "max-autotune", "method": "hf-peer"})[0]
    turn = TurnRounds([0, 2, 0], [0, 2, 0], width=[20, 3, 1])
    assert question_ms([turn], peer) == pytest.approx(40.0 + (19.0 + 5.0 + 1.0 + 6.0) + (15.0 + 5.0 + 1.0))
    plain = p.costs({"dtype": "bfloat16", "compile": "none", "method": "hf-generate"})[0]
    assert question_ms([TurnRounds([0, 0], [0, 0], width=[20, 1])], plain) == pytest.approx(40.0 + 20.0)
    assert question_ms([TurnRounds([0, 0], [0, 0])], peer) is None  # no widths recorded: no prediction


def test_predict_compares_token_rates_and_refuses_what_the_profile_lacks():
    p = Profile(PROFILE)
    meta = {"dtype": "bfloat16", "compile": "none", "method": "chain"}
    vanilla = [_record(1, [0, 0, 0], [0, 0, 0], [10, 1, 1], 0.1, 3)]
    method = [_record(1, [0, 2], [0, 2], [10, 3], 0.05, 3)]
    got = predict(method, meta, vanilla, p, {**meta, "method": "vanilla"})
    pred_v = 5.0 + (8.2 + 1.0) + (8.22 + 1.0)  # contexts 10 and 11: extrapolated below the profiled 100
    pred_m = 5.0 + 4.0 + 12.2 + 1.0
    assert got["predicted_speedup"] == pytest.approx(pred_v / pred_m)
    assert got["measured_speedup"] == pytest.approx(2.0)
    assert got["gap"] == pytest.approx(2.0 / (pred_v / pred_m) - 1)
    assert got["predicted_vanilla_ms_per_token"] == pytest.approx(pred_v / 3)
    assert predict(method, {**meta, "method": "unprofiled"}, vanilla, p) is None
    assert predict(method, {**meta, "dtype": "float32"}, vanilla, p) is None
    no_widths = [QuestionRecord(1, "qa", rounds=[TurnRounds([0, 2], [0, 2])], new_tokens=[3], wall_time=[0.05])]
    assert predict(no_widths, meta, vanilla, p) is None


def test_ceilings_take_away_the_drafting_then_the_width_curve_and_leave_the_acceptance():
    p = Profile(PROFILE)
    meta = {"dtype": "bfloat16", "compile": "none", "method": "chain"}
    vanilla = [_record(1, [0, 0, 0], [0, 0, 0], [10, 1, 1], 0.1, 3)]
    method = [_record(1, [0, 2], [0, 2], [10, 3], 0.05, 3)]  # one round drafts 2, keeps both: 3 tokens
    got = ceilings(method, meta, vanilla, p, {**meta, "method": "vanilla"})
    pred_v = 5.0 + (8.2 + 1.0) + (8.22 + 1.0)
    assert got["predicted"] == pytest.approx(predict(method, meta, vanilla, p)["predicted_speedup"])
    assert got["free_drafting"] == pytest.approx(pred_v / (5.0 + 12.2 + 1.0))  # no 4 ms of drafting
    assert got["flat_verification"] == pytest.approx(pred_v / (5.0 + 8.2 + 1.0))  # width 3 at width 1's cost
    assert got["measured"] == pytest.approx(2.0)
    assert got["predicted"] < got["free_drafting"] < got["flat_verification"]
    assert ceilings(method, {**meta, "method": "hf-peer"}, vanilla, p) is None  # not the engine's: no ceiling


def test_compute_floor_counts_every_matmul_and_bounds_the_width_curve():
    """The floor counts each linear of a position once (the layers' fused projections and the LM
    head), never drops below the memory roofline, and grows with width at the measured peak."""
    from specharness.profile import compute_costs
    from specharness.model import TargetModel
    t = TargetModel.tiny("qwen2", vocab_size=48, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2)
    hf = t.hf
    linears = [m for m in hf.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the head
    c = compute_costs(t, (1, 8, 64), roofline_ms=0.5, peak_width=64)
    assert c["gflop_per_position"] * 1e9 == pytest.approx(2 * sum(m.weight.numel() for m in linears))
    floor = [c["floor_ms"][w] for w in ("1", "8", "64")]
    assert min(floor) >= 0.5 and floor == sorted(floor)
    assert all(c["floor_ms"][w] >= 1e3 * int(w) * c["gflop_per_position"] / c["peak_gflops"] - 1e-9 for w in ("1", "8", "64"))
    assert all(v > 0 for v in c["gemm_hot_ms"].values())
    # the peak is the best throughput the hot matmuls reached: none of them beats it
    assert all(int(w) * c["gflop_per_position"] / (ms / 1e3) <= c["peak_gflops"] * (1 + 1e-9)
               for w, ms in c["gemm_hot_ms"].items())


def test_a_file_is_explained_by_the_variant_profiled_on_its_own_options():
    """A tree drafts at another cost than a chain: the profile entry measured on the file's options
    explains it; a file on options nobody profiled falls back to the method's default entry."""
    data = {**PROFILE, "drafters": {
        **PROFILE["drafters"],
        "chain": {**PROFILE["drafters"]["chain"], "method": "chain", "options": {"tree": "chain"}},
        "chain:tree=sized": {"method": "chain", "options": {"tree": "sized"}, "draft_fixed_ms": 9.0,
                             "draft_per_token_ms": 0.5, "bookkeeping_ms": 3.0}}}
    p = Profile(data)
    meta = {"dtype": "bfloat16", "compile": "none", "method": "chain"}
    tree, _ = p.costs({**meta, "options": {"tree": "sized"}})
    chain, _ = p.costs({**meta, "options": {"tree": "chain"}})
    other, _ = p.costs({**meta, "options": {"tree": "other"}})
    assert (tree.draft_fixed_ms, tree.draft_per_token_ms, tree.per_round_ms) == (9.0, 0.5, 3.0)
    assert (chain.draft_fixed_ms, chain.draft_per_token_ms, chain.per_round_ms) == (2.0, 1.0, 1.0)
    assert other.draft_fixed_ms == 2.0  # unprofiled options: the default entry
    assert p.costs({**meta, "method": "unprofiled", "options": {"tree": "sized"}})[0] is None


def test_options_that_only_locate_weights_are_left_out_of_the_match():
    """A profile may time a drafter on random weights of the trained ones' shape (Medusa's
    heads_path=random): the entry names that option in ``weights_options`` and explains a file run on
    trained heads. An entry that names none is still the closest variant, and the report says where it differs."""
    sized = {"method": "chain", "options": {"tree": "sized", "heads_path": "random"}, "draft_fixed_ms": 9.0,
             "draft_per_token_ms": 0.5, "bookkeeping_ms": 3.0}
    meta = {"dtype": "bfloat16", "compile": "none", "method": "chain", "options": {"tree": "sized", "heads_path": ""}}
    for free, note in ((["heads_path"], ""), ([], " (drafter profiled at heads_path=random)")):
        p = Profile({**PROFILE, "drafters": {**PROFILE["drafters"], "chain:tree=sized": {**sized, "weights_options": free}}})
        costs, ran = p.costs(meta)
        assert costs.draft_fixed_ms == 9.0 and ran == "bfloat16/none" + note, free
    from specharness.methods.medusa.drafter import OPTIONS
    assert [o.name for o in OPTIONS if o.locates_weights] == ["heads_path"]


def test_a_drafter_profiled_on_other_options_gets_the_closest_variant_and_says_so():
    variants = {"tree": {"method": "tree", "options": {"mode": "tree", "vocab": 0, "heads": "a"},
                         "weights_options": ["heads"], "draft_fixed_ms": 1.0, "draft_per_token_ms": 1.0,
                         "bookkeeping_ms": 1.0},
                "tree:mode=chain": {"method": "tree", "options": {"mode": "chain", "vocab": 0, "heads": "a"},
                                    "weights_options": ["heads"], "draft_fixed_ms": 5.0, "draft_per_token_ms": 5.0,
                                    "bookkeeping_ms": 5.0}}
    p = Profile({**PROFILE, "drafters": {**PROFILE["drafters"], **variants}})
    meta = {"dtype": "bfloat16", "compile": "none", "method": "tree"}
    exact = p.costs({**meta, "options": {"mode": "chain", "vocab": 0, "heads": "elsewhere"}})
    assert exact[0].draft_fixed_ms == 5.0 and exact[1] == "bfloat16/none"  # weights' location is no difference
    near = p.costs({**meta, "options": {"mode": "chain", "vocab": 64, "heads": "a"}})
    assert near[0].draft_fixed_ms == 5.0  # the chain variant, one option apart, not the defaults, two apart
    assert near[1] == "bfloat16/none (drafter profiled at vocab=0)"
    tie = p.costs({**meta, "options": {"mode": "sized", "vocab": 0, "heads": "a"}})
    assert tie[0].draft_fixed_ms == 1.0 and tie[1] == "bfloat16/none (drafter profiled at mode=tree)"
    assert p.costs({**meta, "method": "nothing", "options": {}})[0] is None


def test_a_profile_leaves_out_only_methods_it_was_asked_for_and_did_not_measure():
    """``--methods vanilla,kangaroo`` never asked for pld: pld is not "left out" (the profile's page said
    "could not be built here" of every method it was not asked for)."""
    from specharness.profile import left_out
    methods = ["vanilla", "kangaroo", "pld", "medusa"]
    asked = {"vanilla": ("vanilla", []), "kangaroo": ("kangaroo", []), "medusa-tree": ("medusa", ["tree=1"])}
    assert left_out(methods, asked, {"vanilla", "kangaroo"}) == ["medusa"]
    assert left_out(methods, asked, {"vanilla", "kangaroo", "medusa"}) == []
    assert left_out(methods, None, {"vanilla", "kangaroo"}) == ["medusa", "pld"]  # none named: every method asked
