"""The profile's measuring: a drafter's cost line (each drafted count's median, rounds at each size, the
drafters in turn) and nothing timed while graphs build."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specharness.model import TargetModel
from specharness.plugins import build_registry


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=40, n_layers=4, hidden_size=32, seed=3)


def test_the_draft_line_goes_through_each_drafted_counts_median():
    """One point per drafted count (its median), so the count drafted most does not set the slope alone
    and one disturbed round moves nothing; rounds that draft nothing and counts seen too rarely give
    no point."""
    R = SimpleNamespace
    from specharness.profile import MIN_ROUNDS, draft_line
    cost = lambda k: 1.0e-3 + 0.5e-3 * k  # noqa: E731  (seconds)
    rounds = [R(drafted=6, draft_s=cost(6)) for _ in range(40)] + [R(drafted=6, draft_s=0.5)]  # one disturbed round
    rounds += [R(drafted=k, draft_s=cost(k)) for k in (1, 3) for _ in range(MIN_ROUNDS)]
    rounds += [R(drafted=0, draft_s=0.0)] * 9 + [R(drafted=2, draft_s=0.2)] * (MIN_ROUNDS - 1)  # no point either
    fixed, per, medians = draft_line(rounds)
    assert list(medians) == [1, 3, 6] and medians[6] == pytest.approx(cost(6))
    assert (fixed, per) == pytest.approx((1.0e-3, 0.5e-3))
    assert draft_line([R(drafted=0, draft_s=1.0)]) == (0.0, 0.0, {})  # nothing drafted: no line
    only = draft_line([R(drafted=2, draft_s=4e-3)])  # too few anywhere: what there is, through the origin
    assert only[2] == {2: 4e-3} and only[:2] == pytest.approx((0.0, 2e-3))
    # one count with rounds enough and one without: both are points, or the line would run through the origin
    # and call one-draft rounds' whole time a token's (the sparse count's rounds are then all there is)
    mostly_one = [R(drafted=1, draft_s=cost(1))] * 9 + [R(drafted=2, draft_s=cost(2))]
    assert draft_line(mostly_one)[:2] == pytest.approx((1.0e-3, 0.5e-3))


def test_the_profile_times_a_sizable_drafter_at_each_size_and_every_drafter_in_each_pass(tiny, monkeypatch):
    """Early exit always drafts its 6 at its own size; its line still gets points at 1 and 3 drafts
    (its rounds at each size a budget can pick), and each pass takes the drafters in turn."""
    from specharness import profile
    ran, real = [], profile._built

    def recording(*args):  # each timed generation's drafter and size (None: its own size)
        for label, method in real(*args):
            own, sized = method.generate, method.at_size
            method.generate = lambda *a, f=own, n=label: ran.append((n, None)) or f(*a)
            if sized:
                method.at_size = lambda ids, s, seed, size, f=sized, n=label: (ran.append((n, size))
                                                                               or f(ids, s, seed, size))
            yield label, method

    monkeypatch.setattr(profile, "_built", recording)
    prompt = [5, 9, 12, 5, 9, 12, 5, 9, 30, 31, 5, 9]
    variants = {"ee": ("early_exit", ["exit_layer=1", "draft_vocab=0"]), "v": ("vanilla", [])}
    out = profile.drafter_costs(tiny, build_registry(), prompt, tokens=40, log=lambda *a: None, variants=variants,
                                passes=3)
    ee = out["ee"]
    assert {"1", "3", "6"} <= set(ee["draft_ms_by_drafted"]) and ee["draft_per_token_ms"] > 0
    assert ee["mean_drafted"] > 4.5 and ee["draft_line_rounds"] > ee["rounds"]  # bookkeeping: its own size
    assert len(ee["draft_per_token_ms_by_pass"]) == 3  # each pass's own line, for the spread
    assert out["v"]["draft_ms_by_drafted"] == {} and out["v"]["rounds"] > 0
    # warm-up: each drafter at its own size, then at every size it is timed at (no graph built while timing)
    assert ran[:5] == [("ee", None), ("ee", 1), ("ee", 3), ("ee", 6), ("v", None)]
    timed = ran[5:]
    one_pass = [("ee", None), ("ee", 1), ("ee", 3), ("ee", 6), ("v", None)]
    assert timed[:5] == one_pass and timed[5:10] == [one_pass[0], *one_pass[3:0:-1], one_pass[4]]
    assert len(timed) == 5 * 3


def test_the_profile_waits_for_graphs_building_in_the_background_before_timing():
    """A session returns once one graph has built, the rest building beside it; the profile times
    nothing until they are done."""
    from specharness.profile import settled
    done = []
    backend = SimpleNamespace(building={"graph": "its build"}, finish=lambda: done.append(True))
    target = SimpleNamespace(backend=backend)
    assert settled(target) is target and done == [True]
    backend.building = {}
    settled(target)
    assert done == [True]  # nothing building: nothing to wait for
    settled(SimpleNamespace(backend=SimpleNamespace()))  # an eager backend builds nothing


def test_the_per_token_cost_over_the_roofline_gives_the_passes_median_and_interval_or_their_spread():
    from specharness.profile import markdown
    p = {"model": "m", "cpu": "c", "threads": 2, "torch": "t", "bandwidth_gbs": 20.0, "command": "x",
         "rooflines": {"bfloat16": {"ms": 13.5}}, "hf_generate": {}, "configs": [],
         "drafters": {"early_exit": {"draft_fixed_ms": 1.0, "draft_per_token_ms": 3.0, "bookkeeping_ms": 0.4,
                                     "draft_bytes": 20_000_000, "draft_per_token_ms_by_pass": [2.5, None, 4.0, 3.0]}}}
    assert "| early_exit | 1.00 | 3.00 | 1.00 ms (20.0) | 3.00 (2.50-4.00) | - | 0.40 |" in markdown(p)
    p["drafters"]["early_exit"]["draft_per_token_ms_by_pass"] = [None, 2.0, None]  # one pass's line: no range
    assert "| early_exit | 1.00 | 3.00 | 1.00 ms (20.0) | 3.00 | - | 0.40 |" in markdown(p)
    # passes enough for an interval on their median: ranks 5 and 13 of 17 (a binomial's 95%), not the range
    p["drafters"]["early_exit"]["draft_per_token_ms_by_pass"] = [None, 9.0, *[0.5 + 0.25 * i for i in range(16)]]
    assert "| 1.00 ms (20.0) | 3.00 (passes: 2.50 [1.50, 3.50]) |" in markdown(p)


def test_a_pass_with_one_drafted_count_gives_no_slope_of_its_own():
    from specharness.profile import MIN_ROUNDS, pass_slope
    R = SimpleNamespace
    ones = [R(drafted=1, draft_s=2e-3)] * 9 + [R(drafted=2, draft_s=3e-3)] * (MIN_ROUNDS - 1)
    assert pass_slope(ones) is None  # a line through one count's median would be its time, not a slope
    assert pass_slope(ones + [R(drafted=2, draft_s=3e-3)]) == pytest.approx(1e-3)
