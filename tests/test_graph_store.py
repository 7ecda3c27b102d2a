"""The graph store (``specharness.model.graph_store``): compiled CPU graphs kept as AOTInductor
packages, so a second process loads them instead of tracing, AOT-compiling and freezing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specharness.engine_options import EngineOptions
from specharness.model import TargetModel
from specharness.model.graph_store import GraphStore

pytestmark = pytest.mark.usefixtures("graph_store")  # the suite turns the store off elsewhere (conftest)


@pytest.mark.slow  # 70 s of max-autotune builds; the default run's stand-in: a second model loads in the switch test
def test_a_second_process_loads_every_graph_from_the_store_and_computes_the_first_ones_logits(tmp_path, own_cache):
    """Three processes on one fresh store, bfloat16 max-autotune (frozen, oneDNN-packed weights in the
    package): the first builds a package per model, two models of one shape with other weights
    each get their own logits (keyed by shape alone, the second would run the first's weights); the
    second process builds nothing, loads both, and gets the first's logits bit for bit. (That the
    store off means torch.compile is the switch test below; torch.compile against eager is
    test_compiled's.)"""
    probe = Path(__file__).with_name("inductor_cache_probe.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), SPECHARNESS_CACHE=str(own_cache))

    def process(store: str) -> dict:
        done = subprocess.run([sys.executable, str(probe), "1", "2"], env={**env, "SPECHARNESS_AOT_GRAPHS": store},
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])["runs"]

    first = process("1")
    assert all(r["failures"] == {} and r["built"] == 1 and r["loaded"] == 0 for r in first.values()), first
    assert all(r["eager_gap"] < 0.25 for r in first.values())  # each model's own weights ran
    assert first["1"]["logits"] != first["2"]["logits"]
    assert len(list((own_cache / "graphs").glob("*.pt2"))) == 2
    second = process("1")
    assert all(r["built"] == 0 and r["loaded"] == 1 for r in second.values()), second
    assert [r["logits"] for r in second.values()] == [r["logits"] for r in first.values()]


def test_the_store_keys_weights_by_value_and_graphs_by_what_they_compute():
    """The key changes with a weight's value (after an in-place edit too), the graph and the
    inputs' static shapes; a cache's slot count and the context are export dimensions, not keys."""
    from specharness.model.backends import GraphKey
    model = TargetModel.tiny("llama", seed=3)
    stack = model.backend.stack
    store = GraphStore("default", {}, root=Path("/nonexistent"))
    g = GraphKey(0, 4, True, (), True, ((), ()), 2)
    args = lambda slots, ctx: (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long),  # noqa: E731
                               torch.zeros(2, dtype=torch.long), torch.zeros(2, ctx), torch.zeros(4, 2, slots, 16),
                               torch.zeros(4, 2, slots, 16))
    base = store.key(g, stack, args(32, 5), False)[0]
    assert store.key(g, stack, args(64, 9), False)[0] == base
    assert store.key(g._replace(width=4), stack, args(32, 5), False)[0] != base
    assert store.key(g._replace(stack="drafter-x"), stack, args(32, 5), False)[0] == base  # named by its weights
    with torch.no_grad():
        stack.wo[0][0, 0] += 1.0
    assert store.key(g, stack, args(32, 5), False)[0] != base
    other = TargetModel.tiny("llama", seed=4).backend.stack
    assert store.key(g, other, args(32, 5), False)[0] != store.key(g, stack, args(32, 5), False)[0]
    assert not GraphStore.fits(args(32, 1), False) and GraphStore.fits(args(32, 2), False)


def test_the_store_is_an_engine_switch_and_compiled_generation_through_it_equals_eager(own_cache, monkeypatch):
    """``SPECHARNESS_AOT_GRAPHS=0`` turns it off; on, a float32 compiled generation (prefill through the
    wide package, rounds through width packages) gives eager's tokens, every graph from the store; a
    second model of the same weights (as the next run would make) loads every package, builds none and
    gives the same tokens. (Across processes, under bfloat16 max-autotune, with models of one shape and
    other weights: the slow test above.)"""
    from specharness.engine import generate
    from specharness.methods.vanilla import NoDraft
    from specharness.verify import greedy
    assert EngineOptions.from_env({"SPECHARNESS_AOT_GRAPHS": "0"}).aot_graphs is False
    assert EngineOptions.from_env({}).aot_graphs is True
    monkeypatch.setenv("SPECHARNESS_AOT_GRAPHS", "0")
    off = TargetModel.tiny("llama", seed=5)
    off.compile("default")
    assert off.backend.store is None  # torch.compile's graphs, as the rest of the suite runs
    monkeypatch.setenv("SPECHARNESS_AOT_GRAPHS", "1")
    compiled, eager = TargetModel.tiny("llama", seed=5), TargetModel.tiny("llama", seed=5)
    compiled.compile("default")
    prompt = [3, 7, 11, 5, 9]
    with torch.inference_mode():
        got = generate(compiled, NoDraft(), greedy, prompt, 8).token_ids
        want = generate(eager, NoDraft(), greedy, prompt, 8).token_ids
    store = compiled.backend.store
    assert got == want
    assert store.failures == {} and store.built == compiled.backend.graphs
    assert any(k.width == "wide" for k in store.built)
    again = TargetModel.tiny("llama", seed=5)
    again.compile("default")
    with torch.inference_mode():
        assert generate(again, NoDraft(), greedy, prompt, 8).token_ids == want
    assert again.backend.store.built == set() and again.backend.store.loaded == compiled.backend.graphs


def _generation(seed: int):
    from specharness.engine import generate
    from specharness.methods.vanilla import NoDraft
    from specharness.verify import greedy
    compiled, eager = TargetModel.tiny("llama", seed=seed), TargetModel.tiny("llama", seed=seed)
    compiled.compile("default")
    prompt = [3, 7, 11, 5, 9]

    def run(model):
        with torch.inference_mode():
            return generate(model, NoDraft(), greedy, prompt, 8).token_ids
    return compiled, run, run(eager)


@pytest.mark.slow  # two minutes of child builds; the block's bookkeeping: the failed and interrupted builds below
def test_graphs_built_in_the_background_run_eagerly_until_the_block_ends_then_from_their_packages(own_cache):
    """Inside ``in_background`` a missing graph is exported and built by a child process while its
    calls run eagerly (eager's tokens); leaving the block waits for every build and loads it, and a
    generation after it runs the packages, compiling nothing more."""
    compiled, run, want = _generation(6)
    backend, store = compiled.backend, compiled.backend.store
    store.jobs = 2  # two at a time, as on a 2-core machine (a pinned test worker has one core)
    with backend.in_background():
        assert run(compiled) == want
        assert backend.building and len(backend.building) == len(backend.graphs)  # prefill's wide graph and steps'
        assert not backend.packages
    assert not backend.building and store.failures == {}
    assert store.built == backend.graphs and len(backend.packages) == len(backend.graphs)
    assert all(b.done and b.proc.returncode == 0 for b in store.builds)
    assert sorted(p.suffix for p in (own_cache / "graphs").iterdir()) == sorted([".json", ".pt2"] * len(backend.graphs))
    graphs = set(backend.graphs)
    assert run(compiled) == want
    assert backend.graphs == graphs and len(store.builds) == len(graphs)


@pytest.mark.slow  # two minutes of child builds
def test_a_block_left_without_waiting_keeps_building_and_the_next_call_waits_for_every_package(own_cache):
    """``in_background(wait=False)`` (a run's compile check) returns once one package has built; the
    others build on, and the first call outside a block waits for them, so it runs packages only
    (eager's tokens, nothing compiled by torch.compile)."""
    compiled, run, want = _generation(9)
    backend, store = compiled.backend, compiled.backend.store
    store.jobs = 2
    with backend.in_background(wait=False):
        assert run(compiled) == want
        started = len(backend.building)
    assert started >= 2 and 1 <= len(backend.packages) and len(backend.packages) + len(backend.building) == started
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert run(compiled) == want
    assert not backend.building and len(backend.packages) == len(backend.graphs) and store.failures == {}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames


class _Ended:
    """A build that has ended (a stand-in for ``graph_store.Build``)."""

    def __init__(self, package) -> None:
        self.package, self.seconds, self.done = package, 1.0, True


def test_finishing_until_one_build_stops_at_the_first_success_and_leaves_the_rest(monkeypatch):
    """``finish(one=True)`` loads builds in the order they end and stops at the first that built;
    a plain ``finish`` then takes the rest; each ended build is reported once."""
    from specharness.model.backends import GraphKey
    target = TargetModel.tiny("llama", seed=2)
    target.compile("default")
    backend = target.backend
    ok1, ok2 = object(), object()
    builds = [_Ended(ok1), _Ended(ok2)]
    keys = [GraphKey(0, 4, True, (), True, ((), ()), w) for w in (1, 2)]
    backend.building = {(k, "sig"): (b, None, (), False) for k, b in zip(keys, builds)}

    class Store:
        def wait_any(self, pending):
            return next(b for b in builds if b in pending)
    backend.store = Store()
    seen = []
    backend.on_graph_built = lambda key, seconds, left: seen.append((key.width, left))
    backend.finish(one=True)
    assert backend.packages == {(keys[0], "sig"): ok1} and list(backend.building) == [(keys[1], "sig")]
    backend.finish()
    assert backend.packages[(keys[1], "sig")] is ok2 and not backend.building and seen == [(1, 1), (2, 0)]


@pytest.mark.slow  # 44 s of compiling, a failure path; the default run checks the builds that succeed (above)
def test_a_failed_background_build_is_compiled_by_torch_compile_before_the_block_ends(own_cache, monkeypatch):
    """A child that fails leaves its last line as the reason (its log stays beside the store); the
    graph is compiled by torch.compile when the block ends (untimed), so later calls compile nothing
    and give eager's tokens."""
    from specharness.model import graph_store
    monkeypatch.setattr(graph_store, "BUILDER", [sys.executable, "-c",
                                                 "import sys; print('graph build failed: RuntimeError: no compiler'); "
                                                 "sys.exit(1)"])
    compiled, run, want = _generation(7)
    backend, store = compiled.backend, compiled.backend.store
    store.jobs = 2
    with backend.in_background():
        assert run(compiled) == want
    assert set(store.failures) == backend.graphs
    assert set(store.failures.values()) == {"RuntimeError: no compiler"}
    assert sorted(p.suffix for p in (own_cache / "graphs").iterdir()) == [".log"] * len(backend.graphs)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert run(compiled) == want
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames  # compiled when the block ended


def test_an_interrupted_background_block_stops_its_builds_and_leaves_nothing_half_built(own_cache, monkeypatch):
    """Ctrl-C inside the block kills the running children and removes their programs, specs and half
    packages; a package finished earlier would stay (nothing here finishes)."""
    from specharness.model import graph_store
    monkeypatch.setattr(graph_store, "BUILDER", [sys.executable, "-c", "import time; time.sleep(600)"])
    compiled, run, want = _generation(8)
    backend, store = compiled.backend, compiled.backend.store
    store.jobs = 4  # every graph's child starts (a pinned test worker has one core: one at a time would wait)
    try:
        with backend.in_background():
            run(compiled)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert store.builds and all(b.proc.returncode is not None for b in store.builds)
    assert not backend.building and not backend.deferred
    assert list((own_cache / "graphs").iterdir()) == []


def test_max_autotune_searches_the_static_graphs_kernels_and_the_wide_graphs_only_when_asked():
    """The dynamic-width (prefill) graph builds without max-autotune unless ``wide_autotune`` says so
    (results/smollm2-cpu-epyc-wide-autotune: 114 s against 102 s to build, prefills alike); the switch
    is read from the environment, keys only the packages it changes, and no other mode autotunes."""
    from specharness.model.backends import STORE_SWITCHES
    from specharness.model.graph_store import inductor_configs
    assert inductor_configs("max-autotune", False, False)["max_autotune"] is True
    assert "max_autotune" not in inductor_configs("max-autotune", True, False)
    assert inductor_configs("max-autotune", True, True)["coordinate_descent_tuning"] is True
    assert inductor_configs("default", False, True) == {"freezing": True, "cpp_wrapper": True}
    assert EngineOptions.from_env({}).wide_autotune is False
    assert EngineOptions.from_env({"SPECHARNESS_WIDE_AUTOTUNE": "1"}).wide_autotune is True
    with pytest.raises(Exception, match="SPECHARNESS_WIDE_AUTOTUNE"):
        EngineOptions.from_env({"SPECHARNESS_WIDE_AUTOTUNE": "yes"})
    assert "wide_autotune" not in STORE_SWITCHES  # it keys the packages it changes, through their settings:
    from specharness.model.backends import GraphKey
    stack = TargetModel.tiny("llama", seed=3).backend.stack
    on, off = (GraphStore("max-autotune", {}, root=Path("/nonexistent"), wide_autotune=w) for w in (True, False))
    static, wide = GraphKey(0, 4, True, (), True, ((), ()), 2), GraphKey(0, 4, True, (), True, ((), ()), "wide")
    args = (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long),
            torch.zeros(2, 5), torch.zeros(4, 2, 32, 16), torch.zeros(4, 2, 32, 16))
    assert on.key(static, stack, args, False)[0] == off.key(static, stack, args, False)[0]
    assert on.key(wide, stack, args, True)[0] != off.key(wide, stack, args, True)[0]
    assert "max_autotune" in on.key(wide, stack, args, True)[1]["inductor"]


def test_a_short_disk_loses_stale_packages_oldest_first_and_then_says_so_in_one_line(tmp_path, monkeypatch):
    from specharness.errors import UsageError
    from specharness.model import graph_store
    store = GraphStore("max-autotune", {}, root=tmp_path)
    sizes = {}

    def package(name: str, record: dict | None, age: int, size: int) -> Path:
        path = tmp_path / f"{name}.pt2"
        path.write_bytes(b"x")
        if record is not None:
            path.with_suffix(".json").write_text(json.dumps(record))
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
        sizes[path] = size
        return path

    current = {"code": store.env["code"], "torch": store.env["torch"]}
    old_code = package("a", {**current, "code": "0" * 16}, age=1, size=3)
    old_torch = package("b", {**current, "torch": "2.0.0"}, age=2, size=3)
    unrecorded = package("c", None, age=3, size=3)
    mine = package("d", current, age=0, size=50)
    scratch = package("e.program", None, age=0, size=50)  # a running build's: never touched
    assert store.stale() == [old_code, old_torch, unrecorded]

    def free_bytes(_path):  # what the deleted packages gave back, on a disk that had 1 byte free
        return type("Usage", (), {"free": 1 + sum(s for p, s in sizes.items() if not p.exists())})()

    monkeypatch.setattr(graph_store.shutil, "disk_usage", free_bytes)
    store.ensure_space(need=6)  # the two oldest stale ones are enough
    assert not old_code.exists() and not old_code.with_suffix(".json").exists() and not old_torch.exists()
    assert unrecorded.exists() and mine.exists() and scratch.exists()
    with pytest.raises(UsageError, match=r"GB free on the disk of .*: free some space, or set SPECHARNESS_CACHE"):
        store.ensure_space(need=100)  # every stale one deleted, still short: one line, the current package kept
    assert not unrecorded.exists() and mine.exists() and scratch.exists()
