"""The run's width curve and route: a verification runs on a wider compiled graph when that one
measured faster, never on one that is not compiled, with the same tokens; the summary says so."""

from __future__ import annotations

import json

import pytest
import torch

from specharness.engine import generate
from specharness.methods.vanilla import NoDraft
from specharness.model import GraphKey, TargetModel
from specharness.results import meta_path
from specharness.runner import route_stand_in, verify_curve
from specharness.summary import narrow_step_note, unstored_note
from specharness.verify import greedy
from specharness.width_curve import choose_route


def test_a_route_goes_to_the_fastest_wider_width_only_when_it_is_clearly_faster():
    # one EPYC compile: width 2 (vanilla's padded step) 15.4 ms, 4 14.9, 8 11.5
    assert choose_route({2: 15.4, 4: 14.9, 8: 11.5}) == {2: 8, 4: 8}
    # another: width 2 10.6, 4 15.4, 8 16.9: nothing wider is faster
    assert choose_route({2: 10.6, 4: 15.4, 8: 16.9}) == {}
    assert choose_route({1: 10.0, 2: 9.5, 4: 20.0}) == {}  # 5% faster is noise, not a route
    assert choose_route({1: 10.0}) == {}


def test_timing_a_routed_width_leaves_room_in_its_cache_for_the_routes_padding(monkeypatch):
    """Budget calibration times verification at each width; a width the route sends to a wider graph
    writes that many cache slots. At the longest context the model allows, the cache must hold them
    (a route chosen from noisy timings once overflowed it in CI)."""
    from specharness.width_curve import verify_seconds
    t = TargetModel.tiny("llama", vocab_size=48, n_layers=2, hidden_size=32, seed=3)
    t.backend.route = {2: 8}
    monkeypatch.setattr(t.backend, "routed", lambda key: t.backend.route.get(key.width, key.width), raising=False)
    got = verify_seconds(t, 0, [1, 2], reps=1)
    assert set(got) == {1, 2} and all(v > 0 for v in got.values())


def _keys_target(keys: list[GraphKey], top: int, n_layers: int = 30):
    from types import SimpleNamespace
    return SimpleNamespace(n_layers=n_layers, backend=SimpleNamespace(compiled=True, static_top=top, graphs=set(keys)))


def test_kangaroos_verification_graphs_stand_in_for_the_whole_models_widest_one():
    """Vanilla steps at width 2 through layers 0-30; Kangaroo verifies through layers 2-30 at widths 2, 4
    and 8: those decide whether the whole model's width-8 graph is built (same matrix shapes). Nothing
    stands in where a method already has the whole model at 8, or where no later layer has both widths."""
    full = lambda w: GraphKey(0, 30, True, (), True, ((), ()), w)  # noqa: E731
    deep = lambda w, a=2: GraphKey(a, 30, True, (), False, ((), ()), w)  # noqa: E731
    drafter = GraphKey(0, 3, True, (), True, ((), ()), 2, "kangaroo-1")
    assert route_stand_in(_keys_target([full("wide"), full(2), deep(2), deep(4), deep(8), drafter], 8)) == 2
    assert route_stand_in(_keys_target([full(2), full(8), deep(2), deep(8)], 8)) is None  # built anyway
    assert route_stand_in(_keys_target([full(2), deep(4), deep(8)], 8)) is None  # no width 2 to compare
    assert route_stand_in(_keys_target([full(2), deep(2), deep(4)], 8)) is None  # no width 8 to compare
    assert route_stand_in(_keys_target([full(2), deep(2)], 2)) is None  # nothing wider in this run
    skipping = GraphKey(2, 30, True, (), False, ((4,), ()), 8)
    assert route_stand_in(_keys_target([full(2), deep(2), skipping], 8)) is None  # a layer-skipping pass is no stand-in
    assert route_stand_in(_keys_target([full(2), deep(2, 1), deep(8, 1), deep(2), deep(8)], 8)) == 1


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return TargetModel.tiny("llama", vocab_size=48, n_layers=2, hidden_size=32, seed=5)


def test_a_routed_verification_keeps_vanillas_tokens_and_never_runs_an_uncompiled_graph(tiny, monkeypatch):
    widths = []
    backend = tiny.backend
    call = type(backend).__call__

    def spy(self, request):
        widths.append(request.x.shape[0])
        return call(self, request)

    want = generate(tiny, NoDraft(), greedy, [3, 4, 5], 12).token_ids
    monkeypatch.setattr(type(backend), "__call__", spy)
    try:
        backend.route = {1: 8}
        widths.clear()
        generate(tiny, NoDraft(), greedy, [3, 4, 5], 12)
        assert set(widths[1:]) == {1}, widths  # the width-8 graph is not compiled: the route is not taken
        key = GraphKey(0, tiny.n_layers, True, (), True, ((), ()), 8, "")
        backend.graphs.add(key)  # as if compiled
        widths.clear()
        got = generate(tiny, NoDraft(), greedy, [3, 4, 5], 12).token_ids
        assert got == want and set(widths[1:]) == {8}, widths
        # drafter stacks, prefills and layer-skipping forwards never take the route
        widths.clear()
        tiny.forward(torch.tensor([1]), tiny.new_cache(32), 0, head=False)
        assert widths == [1]
    finally:
        backend.route = {}
        backend.graphs.discard(GraphKey(0, tiny.n_layers, True, (), True, ((), ()), 8, ""))


def test_an_eager_run_has_no_width_curve(tiny):
    assert verify_curve(tiny) == {}


def test_the_summary_says_when_a_wider_graph_beat_a_narrower_one(tmp_path):
    path = tmp_path / "vanilla.jsonl"
    path.write_text("")
    cases = [({"2": 15.4, "4": 14.9, "8": 11.5}, {"2": 8, "4": 8}, "2 -> 8, 4 -> 8 positions ran padded"),
             ({"2": 15.4, "4": 14.9, "8": 11.5}, None, "every speedup here is against the slower step"),
             ({"2": 10.6, "4": 15.4, "8": 16.9}, None, None)]
    for curve, route, says in cases:
        warm = {"verify_ms_by_width": curve, **({"route": route} if route else {})}
        meta_path(path).write_text(json.dumps({"method": "vanilla", "warmup": warm}))
        note = narrow_step_note([path])
        if says is None:
            assert note is None
        else:
            assert note and "8 positions took 11.5 ms" in note and says in note, note


def test_the_summary_says_when_graphs_could_not_be_stored(tmp_path):
    path = tmp_path / "vanilla.jsonl"
    path.write_text("")
    meta_path(path).write_text(json.dumps({"method": "vanilla", "warmup": {"graphs_stored": 3}}))
    assert unstored_note([path]) is None
    failed = {"layers 0-30 +head, width 8": "UnsupportedOperatorException: specharness.narrow_linear.default"}
    meta_path(path).write_text(json.dumps({"method": "vanilla", "warmup": {"graphs_not_stored": failed}}))
    note = unstored_note([path])
    assert note and "1 graph(s)" in note and "width 8: UnsupportedOperatorException" in note and "torch.compile" in note
