"""``budget=auto``: each round's draft size from measured costs and this generation's acceptance.

The sizer's arithmetic on made-up rounds; cutting a proposal; greedy identity of every sizable
drafter while the sizer changes sizes; sampling stays lossless when sizes change from round to
round (chi-square against the target's exact distribution); the run's warm-up measures the costs
and the header keeps them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specharness import budget, lossless
from specharness.api import Proposal
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.model import TargetModel
from specharness.options import resolve_options
from specharness.plugins import build_registry
from specharness.runner import Method, Settings, build_method, warm_up
from specharness.tasks.specbench import Question
from specharness.verify import greedy, speculative_sampling

PLUGIN = str(Path(__file__).parent / "fixtures" / "lossless_plugins.py")


def width(n: int) -> int:  # a backend whose narrowest graph is 2 wide (padded), as on the EPYC
    return max(2, next(w for w in (1, 2, 4, 8, 16) if w >= n))


# verification costs 1x at width 2, 1.5x at 4, 2x at 8 (one EPYC compile's shape); drafting is free
FREE = {1: 1e-3, 3: 1e-3, 7: 1e-3}
STEEP = budget.Costs({1: 10e-3, 2: 10e-3, 4: 15e-3, 8: 20e-3}, FREE)
FLAT = budget.Costs({1: 10e-3, 2: 10e-3, 4: 10.5e-3, 8: 11e-3}, FREE)


def test_sizes_fill_each_width_bucket_up_to_the_methods_own():
    assert budget.sizes_for(7, width) == [1, 3, 7]
    assert budget.sizes_for(6, width) == [1, 3, 6]
    assert budget.sizes_for(1, width) == [1]
    assert budget.sizes_for(15, lambda n: n) == [1, 3, 7, 15]


def test_a_cut_keeps_a_prefix_of_drafts_q_and_hidden_states():
    q, h = torch.rand(5, 4), torch.rand(6, 3)
    cut = budget.trim(Proposal([9, 8, 7, 6, 5], q, h, 2, [0, 0, 1, 1, 2]), 3)
    assert cut.tokens == [9, 8, 7] and cut.parents == [0, 0, 1] and cut.layer == 2
    assert torch.equal(cut.q, q[:3]) and torch.equal(cut.hidden, h[:4])
    whole = Proposal([1, 2])
    assert budget.trim(whole, 3) is whole


def run(sizer: budget.Sizer, rounds: list[tuple[int, tuple[int, ...]]]) -> list[int]:
    """Feed (drafted, kept path) rounds in turn; returns the size the sizer chose before each."""
    chosen = []
    for drafted, path in rounds:
        n = sizer.next()
        chosen.append(n)
        d = min(drafted, n)
        sizer.observe(n, d, tuple(p for p in path if p <= d))
    return chosen


def test_one_kept_draft_a_round_on_steep_widths_chooses_one_draft_and_keeps_exploring():
    chosen = run(budget.Sizer(STEEP, [1, 3, 7], width), [(7, (1,))] * 40)
    assert chosen[:budget.FIRST] == [7] * budget.FIRST
    rest = chosen[budget.FIRST:]
    assert set(rest) == {1, 3}  # 1 by choice, 3 on the exploring rounds
    assert [i + budget.FIRST for i, n in enumerate(rest) if n == 3] == \
        [r for r in range(budget.FIRST, 40) if r % budget.EXPLORE == 0]


def test_long_acceptance_or_flat_widths_keep_the_methods_own_size():
    assert set(run(budget.Sizer(STEEP, [1, 3, 7], width), [(7, (1, 2, 3, 4, 5, 6, 7))] * 30)) == {7}
    # 3 or 5 drafts kept, in turn: 2, 4 and 5 tokens a round at sizes 1, 3, 7. Where a wider
    # verification costs next to nothing, 7 wins (5 / 12 ms > 4 / 11.5); at the EPYC's costs, 3 (4 / 16 > 5 / 21)
    mixed = [(7, (1, 2, 3)), (7, (1, 2, 3, 4, 5))] * 20
    assert set(run(budget.Sizer(FLAT, [1, 3, 7], width), mixed)) == {7}
    steep = run(budget.Sizer(STEEP, [1, 3, 7], width), mixed)
    assert {n for r, n in enumerate(steep) if r >= budget.FIRST and r % budget.EXPLORE} == {3}


def test_the_size_follows_the_text_when_acceptance_changes():
    """Loops start mid-generation: after 30 rounds keeping one draft, every draft is kept."""
    chosen = run(budget.Sizer(STEEP, [1, 3, 7], width), [(7, (1,))] * 30 + [(7, (1, 2, 3, 4, 5, 6, 7))] * 30)
    assert chosen[29] == 1 and set(chosen[-8:]) == {7}


def test_a_drafter_that_drafted_less_than_allowed_informs_every_larger_size():
    s = budget.Sizer(STEEP, [1, 3, 7], width)
    s.observe(3, 2, (1, 2))  # room for 3, drafted 2: sizes 3 and 7 would have drafted the same 2
    assert s.tallies[""].tokens == {1: 2.0, 3: 3.0, 7: 3.0}
    assert s.tallies[""].seconds[7] == pytest.approx(STEEP.round(2, 7, width))
    s2 = budget.Sizer(STEEP, [1, 3, 7], width)
    s2.observe(3, 3, (1, 2, 3))  # the size was the limit: what 7 would have done is unknown
    assert 7 not in s2.tallies[""].tokens and s2.tallies[""].tokens[3] == 4.0
    # a tree: kept nodes 2 then 5; with room for 3 nodes node 5 was not there
    s3 = budget.Sizer(STEEP, [1, 3, 7], width)
    s3.observe(7, 7, (2, 5))
    assert s3.tallies[""].tokens == {1: 1.0, 3: 2.0, 7: 3.0}


def test_a_drafter_whose_rounds_cost_more_at_larger_sizes_is_sized_down():
    """Flat widths, but drafting costs 2 ms a token (a Kangaroo-like drafter): one kept draft of
    three a round wins at size 1 (2 tokens / 13 ms > 2 / 17 > 2 / 25)."""
    costly = budget.Costs(FLAT.verify, {1: 2e-3, 3: 6e-3, 7: 14e-3})
    chosen = run(budget.Sizer(costly, [1, 3, 7], width), [(7, (1,))] * 20)
    assert {n for r, n in enumerate(chosen) if r >= budget.FIRST and r % budget.EXPLORE} == {1}


def test_a_tie_keeps_the_larger_size():
    """Rounds that draft nothing (no match) say nothing to prefer a smaller size, even where the measured
    rest of a round differs by noise (0.274 ms at size 1, 0.282 at 7: pld's calibration on the EPYC)."""
    assert set(run(budget.Sizer(FLAT, [1, 3, 7], width), [(0, ())] * 20)) == {7}
    noisy = budget.Costs(FLAT.verify, {1: 0.274e-3, 3: 0.282e-3, 7: 0.282e-3})
    assert set(run(budget.Sizer(noisy, [1, 3, 7], width), [(0, ())] * 10 + [(7, (1, 2, 3, 4, 5))] * 10)) == {7}


def run_sources(sizer: budget.Sizer, rounds: list[tuple[str, int, tuple[int, ...]]]) -> list[tuple[str, int]]:
    """As ``run``, each round from a source: the engine's order (room, propose, the source's size)."""
    chosen = []
    for source, drafted, path in rounds:
        n = min(sizer.room(), sizer.next(source))
        chosen.append((source, n))
        d = min(drafted, n)
        sizer.observe(n, d, tuple(p for p in path if p <= d), source)
    return chosen


def after_start(chosen: list[tuple[str, int]], source: str) -> set[int]:
    """The sizes ``source`` ran at once past its first rounds, exploring rounds left out."""
    mine = [n for s, n in chosen if s == source]
    return {n for r, n in enumerate(mine) if r >= budget.FIRST and r % budget.EXPLORE}


def test_each_source_gets_its_own_size():
    """SAM-like: long matches keep every draft, the fallback keeps one; on steep widths the fallback is
    cut to one draft while the matches keep seven, and a drafter proposes with room for seven."""
    rounds = [("match", 7, (1, 2, 3, 4, 5, 6, 7)), ("fallback", 7, (1,))] * 30
    s = budget.Sizer(STEEP, [1, 3, 7], width)
    chosen = run_sources(s, rounds)
    assert after_start(chosen, "match") == {7} and after_start(chosen, "fallback") == {1}
    assert s.room() == 7
    # one source alone is sized as before sources existed: every round kept one draft -> 1
    assert after_start(run_sources(budget.Sizer(STEEP, [1, 3, 7], width), [("fallback", 7, (1,))] * 30),
                       "fallback") == {1}


def test_a_source_that_keeps_little_yields_time_to_a_fast_one():
    """A source keeping 4 of 7 drafts runs, alone, a hair faster at 7 (5 tokens in 13.5 ms) than at 3 (4
    in 11 ms). Beside a source keeping all 7 (0.59 tokens a ms), the 2.5 ms that size 3 saves buy more
    of the fast source's tokens than the one token it loses: it is cut to 3."""
    costs = budget.Costs({1: 10e-3, 2: 10e-3, 4: 10e-3, 8: 12.5e-3}, FREE)
    slow, fast = ("slow", 7, (1, 2, 3, 4)), ("fast", 7, (1, 2, 3, 4, 5, 6, 7))
    assert after_start(run_sources(budget.Sizer(costs, [1, 3, 7], width), [slow] * 40), "slow") == {7}
    together = run_sources(budget.Sizer(costs, [1, 3, 7], width), [slow, fast] * 40)
    assert after_start(together, "fast") == {7} and after_start(together, "slow") == {3}


# ---- through the engine ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    t = TargetModel.tiny("llama", vocab_size=48, n_layers=3, hidden_size=32, seed=4)
    t.chat_ids = lambda messages: [3 + ord(c) % 40 for m in messages for c in m["content"]]
    t.decode = lambda ids: "".join(chr(97 + i % 26) for i in ids)
    return t


SIZABLE = [("pld", ["min_ngram=1"]), ("recycling", []), ("eagle", []), ("eagle", ["mode=chain"]), ("eagle3", []), ("kangaroo", ["eta=0"]),
           ("early_exit", ["exit_layer=1", "draft_vocab=0"]), ("self-spec", []), ("medusa", []),
           ("medusa", ["tree=chain"]), ("sam", []), ("sam", ["fallback=eagle", "fallback_options=head=untrained+draft_vocab=0"])]


@pytest.mark.parametrize("name, options", SIZABLE, ids=[" ".join([n, *o]) for n, o in SIZABLE])
def test_every_sizable_drafter_keeps_vanillas_tokens_while_sizes_change(tiny, name, options):
    registry = build_registry()
    spec = registry.method(name)
    assert spec.sizable and "budget" in {o.name for o in spec.options}
    opts = resolve_options(name, spec.options, [*(f"{k}={v}" for k, v in spec.tiny_options.items()), *options])
    drafter = spec.build(tiny, opts)  # the engine's option budget among them: the drafter's build never sees it
    sizes = budget.sizes_for(int(getattr(drafter, "max_width", 1)) - 1, tiny.backend.width)
    prompt = [5, 9, 12, 5, 9, 12, 5, 9, 30, 31, 5, 9]  # repeats, so pld and recycling find drafts
    want = generate(tiny, drafter, greedy, prompt, 40).token_ids
    costs = budget.Costs(STEEP.verify, {n: 1e-3 for n in sizes})
    per_source = PerSource(costs, sizes, tiny.backend.width)
    for sizer in budget.Sizer(costs, sizes, tiny.backend.width), per_source, Cycling(costs, sizes, tiny.backend.width):
        got = generate(tiny, drafter, greedy, prompt, 40, sizer=sizer)
        assert got.token_ids == want, type(sizer)
        used = [r.budget for r in got.rounds[1:]]
        assert set(used) <= set(sizes) and all(r.drafted <= r.budget for r in got.rounds[1:])
        if sizer is per_source:  # every round ran at its own source's size, whatever the room was
            assert all(r.budget == sizer.next(r.source) for r in got.rounds[1:] if r.drafted)
            if name in ("pld", "sam"):  # several sources, sized apart
                assert len({r.budget for r in got.rounds[1:] if r.drafted}) > 1
    assert len(set(used)) == min(len(sizes), len(used))  # the cycling sizer visited every size


class PerSource(budget.Sizer):
    """A size per source, picked by its name; rounds that drafted nothing (source "") get the largest, so
    the room is always the largest and every round runs at exactly its source's size."""

    def next(self, source: str = "") -> int:
        return self.sizes[(sum(map(ord, source)) + len(source)) % len(self.sizes)] if source else self.sizes[-1]


class Cycling(budget.Sizer):
    """Its sizes in turn, round by round, whatever the drafts."""

    def next(self, source: str = "") -> int:
        return self.sizes[self.rounds % len(self.sizes)]


@pytest.mark.parametrize("drafter", ["random-draft", "random-tree"])
def test_sampling_stays_lossless_when_the_size_changes_every_round(drafter):
    """Cuts at sizes 1-3 of a chain (q cut with it) and of a tree (siblings drawn without replacement,
    then their children): the first 4 tokens must follow the target's exact distribution."""
    t = TargetModel.tiny("llama", vocab_size=6, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, seed=2)
    spec = build_registry([PLUGIN]).method(drafter)
    d = spec.build(t, resolve_options(drafter, spec.options, ["gamma=3"]))

    def gen(ids, s, seed, on_round=None):
        return generate(t, d, speculative_sampling, ids, s.max_new_tokens, s.temperature, seed, on_round,
                        Cycling(budget.Costs(STEEP.verify, {1: 0.0, 2: 0.0, 3: 0.0}), [1, 2, 3], lambda n: n))

    method = Method(drafter, {}, "speculative-sampling", gen)
    r = lossless.level_a(method, t, [1, 2, 3], k=4, temperature=1.0, n=None, w=0.3, alpha=0.01, seed=3)
    assert r["passed"], r["test"]
    assert r["exercised"]["drafted"] > 0 and 0 < r["exercised"]["accepted"] < r["exercised"]["drafted"]


def test_the_run_measures_the_costs_after_warm_up_and_says_what_it_measured(tiny):
    registry = build_registry()
    methods = [build_method(registry, "pld", ["budget=auto"], tiny, 0.0),
               build_method(registry, "pld", ["budget=max"], tiny, 0.0)]
    methods[1].label = "pld-own-size"
    warm = warm_up(tiny, methods, [Question("w", "qa", "qa", ["a b a b a b c"])], Settings(16, warmup=1))
    got = warm["budget"]
    assert list(got) == ["pld"] and got["pld"]["sizes"] == budget.sizes_for(7, tiny.backend.width)
    assert set(got["pld"]["verify_ms"]) == {str(tiny.backend.width(n + 1)) for n in [0, *got["pld"]["sizes"]]}
    assert all(v > 0 for v in got["pld"]["verify_ms"].values())
    assert set(got["pld"]["rest_ms"]) == {str(n) for n in got["pld"]["sizes"]}


def test_a_sizable_method_runs_every_round_at_a_given_size_and_others_cannot(tiny):
    """``Method.at_size`` (calibration's rounds, the profile's draft-cost line): early exit at 2 drafts
    a round, whatever its gamma, and keeps vanilla's tokens; a drafter that cannot be sized has none."""
    registry = build_registry()
    ee = build_method(registry, "early_exit", ["exit_layer=1", "draft_vocab=0", "gamma=6"], tiny, 0.0)
    prompt = [5, 9, 12, 5, 9, 12, 5, 9]
    got = ee.at_size(prompt, Settings(24), 0, 2)
    drafted = [r.drafted for r in got.rounds[1:]]  # the last rounds: no room past the answer's end
    assert drafted[:10] == [2] * 10 and max(drafted) == 2
    assert got.token_ids == ee.generate(prompt, Settings(24), 0).token_ids
    assert build_method(registry, "lookahead", [], tiny, 0.0).at_size is None


def test_budget_is_offered_to_sizable_drafters_only_and_never_twice_at_each_ones_default():
    registry = build_registry()
    assert "budget" not in {o.name for o in registry.method("lookahead").options}
    default = lambda name: next(o.default for o in registry.method(name).options if o.name == "budget")  # noqa: E731
    # sized where measured faster (the trees: results/smollm2-cpu-epyc-eagle-budget, -tree-budget; pld and recycling:
    # -avx2-budget); kangaroo and sam keep their size (no gain on AVX2, a loss on AVX512: -source-budget)
    names = ("eagle", "eagle3", "medusa", "pld", "recycling", "kangaroo", "sam")
    assert [default(n) for n in names] == ["auto"] * 5 + ["max"] * 2
    from specharness import plugins
    from specharness.hookspecs import DrafterSpec
    clash = DrafterSpec("x", lambda t, o: None, [budget.OPTION], sizable=True)
    with pytest.raises(UsageError, match="declares an option 'budget'"):
        plugins._with_budget(clash)
    with pytest.raises(UsageError, match="declares budget='sometimes'; the choices are max, auto"):
        plugins._with_budget(DrafterSpec("y", lambda t, o: None, sizable=True, budget="sometimes"))
