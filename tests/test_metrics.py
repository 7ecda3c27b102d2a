"""CR, CTAR and the timing metrics on hand-made round records."""

from __future__ import annotations

import pytest

from dataclasses import replace

from specharness import metrics
from specharness.records import QuestionRecord

# One turn: prefill, then rounds drafting 3, 3, 2, 0 tokens and accepting 3, 1, 0, 0.
# Tokens: 1 (prefill) + 4 + 2 + 1 + 1 = 9; target forwards = 5 rounds.
DRAFTED = [0, 3, 3, 2, 0]
ACCEPTED = [0, 3, 1, 0, 0]
DRAFT_S = [0.0, 0.006, 0.006, 0.004, 0.0]
VERIFY_S = [0.05, 0.024, 0.024, 0.023, 0.020]
ACCEPT_S = [0.001] * 5


def record(qid=1, drafted=DRAFTED, accepted=ACCEPTED, draft_s=DRAFT_S, verify_s=VERIFY_S, accept_s=ACCEPT_S,
           turns=1, time=1.0):
    tokens = 1 + sum(a + 1 for a in accepted[1:])
    turn = {"drafted": drafted, "accepted": accepted, "draft_s": draft_s, "verify_s": verify_s, "accept_s": accept_s}
    return QuestionRecord.from_json({"question_id": qid, "subtask": "math_reasoning", "choices": [{
        "new_tokens": [tokens] * turns, "wall_time": [time] * turns, "wall_time_repeats": [[time]] * turns,
        "rounds": [turn] * turns}]})


def vanilla_record(n=10, step=0.02):
    return record(drafted=[0] * n, accepted=[0] * n, draft_s=[0.0] * n, verify_s=[0.05] + [step] * (n - 1),
                  accept_s=[0.0] * n)


def test_tokens_forwards_and_cr():
    r = record()
    assert r.tokens == 9
    assert r.forwards == 5
    assert metrics.compression_rate([r]) == pytest.approx(9 / 5)
    two = record(turns=2)
    assert metrics.compression_rate([r, two]) == pytest.approx(27 / 15)
    assert metrics.compression_rate([vanilla_record()]) == 1.0


def test_ctar_counts_rounds_with_at_least_w_accepted():
    r = [record()]
    # verification rounds accepted 3, 1, 0, 0
    assert metrics.ctar(r, 1) == pytest.approx(2 / 4)
    assert metrics.ctar(r, 2) == pytest.approx(1 / 4)
    assert metrics.ctar(r, 3) == pytest.approx(1 / 4)
    assert metrics.ctar(r, 4) == 0.0
    assert metrics.ctar_curve(r) == [metrics.ctar(r, w) for w in (1, 2, 3)]
    assert len(metrics.ctar_curve(r, 6)) == 6
    # the paper's form: s_k counts the bonus token, CTAR(w) = mean I(s_k - w > 0)
    s = [a + 1 for a in ACCEPTED[1:]]
    for w in range(1, 5):
        assert metrics.ctar(r, w) == pytest.approx(sum(x - w > 0 for x in s) / len(s))


def test_ctar_is_monotone_and_vanilla_has_no_rounds_accepting():
    curve = metrics.ctar_curve([record()], 5)
    assert all(a >= b for a, b in zip(curve, curve[1:]))
    assert metrics.ctar([vanilla_record()], 1) == 0.0


def test_draft_length_acceptance_rate_and_by_position():
    r = [record()]
    assert metrics.mean_draft_length(r) == pytest.approx(8 / 4)
    assert metrics.acceptance_rate(r) == pytest.approx(4 / 8)
    # position 1 proposed in 3 rounds (3, 3, 2 drafts), accepted in 2; position 2 reached in rounds
    # 1 and 2 (accepted >= 1), accepted in round 1; position 3 reached in round 1 only, accepted.
    assert metrics.acceptance_by_position(r, 3) == pytest.approx([2 / 3, 1 / 2, 1.0])


def test_time_breakdown_and_break_even():
    r, v = [record()], [vanilla_record()]
    tb = metrics.time_breakdown(r)
    assert tb["rounds"] == 4 and tb["drafted"] == 8
    assert tb["draft_s"] == pytest.approx(sum(DRAFT_S[1:]))
    assert tb["verify_s"] == pytest.approx(sum(VERIFY_S[1:]))
    assert metrics.vanilla_step_cost(v) == pytest.approx(0.02)
    c_d = sum(DRAFT_S[1:]) / 8
    assert metrics.draft_cost_ratio(r, v) == pytest.approx(c_d / 0.02)
    assert metrics.break_even_acceptance(r, v) == pytest.approx(c_d / 0.02)
    round_s = (sum(DRAFT_S[1:]) + sum(VERIFY_S[1:]) + sum(ACCEPT_S[1:])) / 4
    assert metrics.break_even_acceptance(r, v, full=True) == pytest.approx((round_s / 0.02 - 1) / 2)
    # the full bound counts the longer verification, so it is above the draft-only one here
    assert metrics.break_even_acceptance(r, v, full=True) > metrics.break_even_acceptance(r, v)


def test_break_even_is_consistent_with_the_speedup_it_predicts():
    """At exactly the full break-even acceptance a method's time per token equals vanilla's."""
    v = [vanilla_record(n=50)]
    c_v = metrics.vanilla_step_cost(v)
    r = [record()]
    a = metrics.break_even_acceptance(r, v, full=True)
    tb = metrics.time_breakdown(r)
    k = tb["drafted"] / tb["rounds"]
    assert tb["round_s"] / (1 + a * k) == pytest.approx(c_v)


def test_speedup_and_question_time_use_median_of_repeat_totals():
    m = record(qid=1, time=1.0)
    v = record(qid=1, time=2.0)
    assert metrics.speedup([m], [v]) == pytest.approx(2.0)
    m = replace(m, wall_time_repeats=[[1.0, 3.0, 2.0]])
    assert m.time == 2.0
    assert metrics.speedup([m], [v]) == pytest.approx(1.0)
    assert metrics.speedup([record(qid=2)], [v]) != metrics.speedup([record(qid=2)], [v])  # nan: no shared ids


def test_fit_line_is_least_squares_and_never_gives_a_negative_cost():
    assert metrics.fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((1.0, 2.0))  # exact line
    fixed, per = metrics.fit_line([1, 2, 4], [1.0, 3.5, 8.0])  # free fit: -1.25 + 2.32 x
    assert fixed == 0.0 and per == pytest.approx((1 + 7 + 32) / 21)  # through the origin instead
    assert metrics.fit_line([1, 2, 3], [5.0, 4.0, 3.0]) == pytest.approx((4.0, 0.0))  # falling: flat at the mean
    assert metrics.fit_line([2, 2], [3.0, 5.0]) == pytest.approx((0.0, 2.0))  # one distinct x: the origin


# ---- looping outputs ---------------------------------------------------------------------------
def test_a_looping_output_is_detected_and_a_fresh_one_is_not():
    fresh = list(range(40))
    looping = list(range(100, 110)) + [1, 2, 3, 4, 5] * 6  # 10 fresh tokens, then a 5-token loop
    assert metrics.loop_share(fresh, 8) == 0.0 and not metrics.loops(fresh)
    # positions 8..39 (32) have an 8-gram before them; those ending at 22.. (18) repeat an earlier one
    assert metrics.loop_share(looping, 8) == pytest.approx(18 / 32)
    assert metrics.loops(looping) and not metrics.loops(looping, threshold=0.6)
    # a longer n-gram must match longer: with n = 20 only the 20-grams ending at 34.. repeat (6 of 20),
    # exactly the default threshold 0.3: a share equal to the threshold loops
    assert metrics.loop_share(looping, 20) == pytest.approx(6 / 20) and metrics.loops(looping, 20)


def test_loop_share_edges_of_n_and_threshold():
    assert metrics.loop_share([5, 5, 5, 5], 1) == 1.0  # a one-token loop: every later token repeats
    assert metrics.loop_share([5, 5, 5, 5], 3) == 1.0  # overlapping occurrences count
    assert metrics.loops([5, 5, 5, 5], 1, threshold=1.0)  # threshold 1 is reachable
    assert metrics.loop_share([1, 2, 1], 1) == pytest.approx(1 / 2)  # n = 1: any token seen before
    assert metrics.loop_share(list(range(8)), 8) == 0.0 and metrics.loop_share([3] * 8, 8) == 0.0  # no earlier n-gram
    assert metrics.loop_share([], 8) == 0.0 and not metrics.loops([])
    ids = list(range(10)) + [0, 1, 2]  # n = 3: 10 positions with an earlier 3-gram, 1 repeats
    assert metrics.loop_share(ids, 3) == 0.1
    assert metrics.loops(ids, 3, threshold=0.1) and not metrics.loops(ids, 3, threshold=0.1 + 1e-12)  # >=
    for bad in (0, -1):
        with pytest.raises(ValueError):
            metrics.loop_share(ids, bad)
    for bad in (0.0, -0.1, 1.01, float("nan")):
        with pytest.raises(ValueError):
            metrics.loops(ids, 3, bad)
