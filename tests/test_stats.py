"""Statistics on synthetic data whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specharness import stats
from specharness.records import QuestionRecord


def rec(qid, times_per_turn, tokens_per_turn=(100,), drafted=None, accepted=None):
    """A question record: ``times_per_turn`` = [[repeat times of turn 1], [turn 2], ...]."""
    n_turns = len(times_per_turn)
    tokens = list(tokens_per_turn) * (n_turns // len(tokens_per_turn))
    rounds = []
    for t in range(n_turns):
        d = drafted or [0] * tokens[t]
        a = accepted or [0] * tokens[t]
        rounds.append({"drafted": d, "accepted": a, "draft_s": [0.0] * len(d), "verify_s": [0.0] * len(d),
                       "accept_s": [0.0] * len(d)})
    return QuestionRecord.from_json({"question_id": qid, "subtask": "qa", "choices": [{
        "new_tokens": tokens, "wall_time": [float(np.median(r)) for r in times_per_turn],
        "wall_time_repeats": [list(r) for r in times_per_turn], "rounds": rounds}]})


def synthetic(n, true_speedup, noise, seed, repeats=3):
    """Vanilla times vary by question (log-normal); the method is true_speedup times faster, times noise."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0, 0.4, n) * 3
    van, meth = [], []
    for i, b in enumerate(base):
        van.append(rec(i, [list(b * rng.lognormal(0, 0.02, repeats))]))
        meth.append(rec(i, [list(b / true_speedup * rng.lognormal(0, noise, 1) * rng.lognormal(0, 0.02, repeats))]))
    return meth, van


def test_known_speedup_is_recovered_with_covering_interval():
    meth, van = synthetic(30, 1.5, 0.05, seed=1)
    est = stats.speedup_ci(stats.pair(meth, van))
    assert est.method == "BCa"
    assert est.low < est.value < est.high
    assert est.covers(1.5)
    assert abs(est.value - 1.5) < 0.05
    assert est.high - est.low < 0.2


def test_interval_coverage_is_near_nominal():
    """Over repeated synthetic experiments the 95% interval covers the truth most of the time."""
    covered = 0
    trials = 25
    for seed in range(trials):
        meth, van = synthetic(20, 1.3, 0.1, seed=100 + seed)
        covered += stats.speedup_ci(stats.pair(meth, van), n_resamples=999).covers(1.3)
    assert covered >= 20  # expected ~24 of 25; a broken interval (too narrow, biased) fails


def test_a_medians_interval_covers_a_skewed_timings_median_at_its_level_and_needs_six_values():
    """Heavy-tailed timings (log-normal: a slow spell now and then): the order-statistics interval
    covers the true median in about 95% of experiments, at 8 and at 16 values; 5 have no 95% interval."""
    rng = np.random.default_rng(7)
    for n in (8, 16):
        samples = [rng.lognormal(0, 0.5, n) for _ in range(400)]
        est = [stats.median_ci(x) for x in samples]
        assert all(e.low <= e.value <= e.high for e in est)
        assert np.mean([e.covers(1.0) for e in est]) >= 0.93  # the log-normal(0, .5)'s median is 1
    assert all(e.low == np.sort(x)[3] and e.high == np.sort(x)[12] for x, e in zip(samples, est))  # 16: ranks 4, 13
    assert stats.median_ci([1.0, 2.0, 3.0, 9.0, 4.0]).method == "none"
    assert stats.median_ci([2.0] * 7).fmt() == "2.00 [2.00, 2.00]" and stats.median_ci([]).n == 0


def test_identical_timings_give_ratio_one():
    _, van = synthetic(12, 1.0, 0.0, seed=3)
    est = stats.speedup_ci(stats.pair(van, van))
    assert est.value == pytest.approx(1.0)
    assert est.low == pytest.approx(1.0) and est.high == pytest.approx(1.0)
    assert est.method == "degenerate"


def test_more_questions_narrow_the_interval():
    widths = []
    for n in (8, 64):
        meth, van = synthetic(n, 1.2, 0.15, seed=5)
        e = stats.speedup_ci(stats.pair(meth, van))
        widths.append(e.high - e.low)
    assert widths[1] < widths[0]


def test_pairing_uses_shared_questions_only():
    meth, van = synthetic(10, 2.0, 0.0, seed=7)
    p = stats.pair(meth[:6], van)
    assert p.ids == [r.question_id for r in meth[:6]]
    assert stats.speedup_ci(p).value == pytest.approx(2.0, rel=0.05)


def test_single_question_has_no_interval():
    meth, van = synthetic(1, 1.5, 0.0, seed=8)
    e = stats.speedup_ci(stats.pair(meth, van))
    assert math.isfinite(e.value) and math.isnan(e.low) and e.method == "none"


def test_mean_over_subtasks_and_its_interval():
    strata, truths = [], [1.2, 1.6, 0.9]
    for i, s in enumerate(truths):
        meth, van = synthetic(15, s, 0.05, seed=20 + i)
        strata.append(stats.pair(meth, van))
    est = stats.mean_speedup_ci(strata)
    assert est.covers(np.mean(truths))
    assert est.n == 45
    # each stratum's own estimate agrees with the per-stratum ratio
    assert est.value == pytest.approx(np.mean([stats.speedup_ci(s).value for s in strata]))


def test_repeats_are_folded_by_median_of_repeat_totals():
    r = rec("q", [[1.0, 5.0, 2.0], [1.0, 1.0, 9.0]], tokens_per_turn=(10,))
    # repeat totals 2, 6, 11 -> median 6 (not 2 + 1 = 3 from per-turn medians)
    assert r.repeat_times() == [2.0, 6.0, 11.0]
    assert r.time == 6.0


def test_unstable_timings_are_flagged():
    stable = rec("s", [[1.0, 1.02, 0.99]])
    noisy = rec("n", [[1.0, 1.0, 1.5]])
    assert stats.timing_cv(stable) < 0.10 < stats.timing_cv(noisy)
    st = stats.unstable_timings([stable, noisy])
    assert st.unstable == ["n"] and st.repeats == 3 and st.flagged
    assert not stats.unstable_timings([stable]).flagged
    assert stats.timing_cv(rec("one", [[1.0]])) == 0.0


def test_paired_test_detects_a_faster_method_and_not_identical_ones():
    meth, van = synthetic(15, 1.1, 0.03, seed=11)
    t = stats.paired_test(meth, van)
    assert t.n == 15 and t.p_a_faster < 0.01 and t.p_two_sided < 0.01
    assert t.a_over_b_speed == pytest.approx(1.1, rel=0.05)
    back = stats.paired_test(van, meth)
    assert back.p_a_faster > 0.5 and back.p_two_sided == pytest.approx(t.p_two_sided)
    same = stats.paired_test(van, van)
    assert same.p_two_sided == 1.0


def test_paired_test_under_no_difference_is_not_significant_too_often():
    rejections = 0
    for seed in range(20):
        meth, van = synthetic(15, 1.0, 0.1, seed=200 + seed)
        rejections += stats.paired_test(meth, van).p_two_sided < 0.05
    assert rejections <= 4  # expected ~1 of 20


def test_cr_interval_on_records():
    # 4 questions: tokens/forwards = 2 each, except one at 3
    recs = [rec(i, [[1.0]], tokens_per_turn=(t,), drafted=[0] * f, accepted=[0] * f)
            for i, (t, f) in enumerate([(20, 10), (40, 20), (30, 15), (30, 10)])]
    e = stats.cr_ci(recs)
    assert e.value == pytest.approx(120 / 55)
    assert e.low <= e.value <= e.high and e.low >= 2.0 and e.high <= 3.0
