"""The compiled forward computes what the eager one does, for every width bucket and for trees;
two models of the same shape never share compiled weights; the engine's configuration is chosen
by measurement and recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from specharness.model import engine_choice
from specharness.engine import generate
from specharness.engine_options import EngineOptions
from specharness.errors import UsageError
from specharness.methods.vanilla import NoDraft
from specharness.model import TargetModel
from specharness.tree import Tree
from specharness.verify import greedy


@pytest.fixture(scope="module")
def pair():
    """Two tiny models of one shape (different weights), compiled, and eager twins of them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    eager = [TargetModel.tiny("qwen2", vocab_size=48, n_layers=2, hidden_size=32, seed=s) for s in (1, 2)]
    compiled = [TargetModel.tiny("qwen2", vocab_size=48, n_layers=2, hidden_size=32, seed=s) for s in (1, 2)]
    for t in compiled:
        t.compile("default")
    yield eager, compiled
    torch.set_num_threads(before)


def test_compiled_logits_equal_eager_and_models_do_not_share_weights(pair):
    (e1, e2), (c1, c2) = pair
    ids = [i % 45 + 3 for i in range(70)]  # longer than the widest bucket: the dynamic-width graph
    for c in (c1, c2):
        c.expect_widths(8)  # verification up to 8 positions: static buckets 1, 2, 4 and 8; the prompt: dynamic
    for e, c in ((e1, c1), (e2, c2), (e1, c1)):  # the second model would reuse the first's graph if keyed badly
        torch.testing.assert_close(c.logits(ids), e.logits(ids), rtol=1e-4, atol=1e-4)
        for width in (1, 3, 8):  # padded to the buckets 1, 4, 8
            ce, cc = e.new_cache(160), c.new_cache(160)
            e.forward(torch.tensor(ids), ce, 0)
            c.forward(torch.tensor(ids), cc, 0)
            x = torch.tensor(ids[:width])
            torch.testing.assert_close(c.forward(x, cc, len(ids), head=True).logits,
                                       e.forward(x, ce, len(ids), head=True).logits, rtol=1e-4, atol=1e-4)
    assert any(g.width == 8 for g in c1.backend.graphs) and any(g.width == "wide" for g in c1.backend.graphs)
    # a prefill hands back the layer a drafter asks for, from the dynamic-width graph too (where dynamo
    # once turned the layer numbers symbolic and captured nothing); once compiled, that graph serves
    # every prefill, whatever it captures and however long (the first call here may recompile once:
    # c1.logits above ran on a cache exactly the prompt's length, and dynamo guarded on that equality)
    from torch._dynamo.utils import counters

    def prefill(x, capture):
        got = c1.forward(x, c1.new_cache(160), 0, head=True, capture=capture, prefill=True).captured
        want = e1.forward(x, e1.new_cache(160), 0, head=True, capture=capture, prefill=True).captured
        for layer in capture:
            torch.testing.assert_close(got[layer], want[layer], rtol=1e-4, atol=1e-4)

    prefill(torch.tensor(ids), (0,))
    compiled_before = counters["stats"]["unique_graphs"]
    for x in (torch.tensor(ids[:5]), torch.tensor(ids[:40]), torch.tensor(ids)):
        prefill(x, (0,))
        prefill(x, ())
    assert counters["stats"]["unique_graphs"] == compiled_before


def test_a_prefill_asked_for_its_last_logits_runs_the_head_there_alone(pair):
    """``last=True``: the logits of the last position, as the whole prefill gives them; an unpadded
    (dynamic-width) prefill runs the head at that row alone, and a padded one (a prompt narrower than
    a bucket) still hands back its last real row, not a padding row's."""
    (e1, _), (c1, _) = pair
    c1.expect_widths(8)
    for ids in ([i % 45 + 3 for i in range(70)], [7, 8, 9]):
        want = e1.logits(ids)[-1:]
        for t in (e1, c1):
            got = t.logits(ids, last=True)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert any(g.head == "last" and g.width == "wide" for g in c1.backend.graphs)
    assert not any(g.head == "last" and g.width != "wide" for g in c1.backend.graphs)


def test_compiled_tree_and_generation_equal_eager(pair):
    (e1, _), (c1, _) = pair
    tree = Tree((-1, 0, 0, 1, 2))
    ce, cc = e1.new_cache(64), c1.new_cache(64)
    prefix = torch.tensor([5, 6, 7, 8])
    e1.forward(prefix, ce, 0)
    c1.forward(prefix, cc, 0)
    x = torch.tensor([9, 10, 11, 12, 13])
    torch.testing.assert_close(c1.forward(x, cc, 4, tree=tree, head=True).logits,
                               e1.forward(x, ce, 4, tree=tree, head=True).logits, rtol=1e-4, atol=1e-4)
    assert generate(c1, NoDraft(), greedy, [1, 2, 3], 12).token_ids == generate(e1, NoDraft(), greedy, [1, 2, 3], 12).token_ids


@pytest.mark.slow  # 37 s; by default the warm-up test below checks every bucket up to a drafter's widest, and
# test_engine_choice that each compile is announced before it starts
def test_precompile_covers_every_bucket_up_to_the_widest_draft(pair):
    _, (c1, _) = pair
    generate(c1, NoDraft(), greedy, [1, 2, 3], 4)
    announced: list[tuple] = []  # warm-up's progress line hears of every compile, before it starts
    c1.backend.on_new_graph = announced.append
    try:
        compiled = c1.precompile(max_width=4)
        generate(c1, NoDraft(), greedy, [1, 2, 3], 4)  # every graph it needs exists now: nothing announced
    finally:
        c1.backend.on_new_graph = None
    assert len(announced) == compiled and set(announced) <= c1.backend.graphs
    widths = {g.width for g in c1.backend.graphs if g.a == 0 and g.head}  # the full-depth graphs with the head
    assert {1, 2, 4} <= widths  # every bucket up to the widest draft's


def test_the_configuration_is_pinned_asked_cached_or_measured(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECHARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(engine_choice, "CANDIDATES", (("float32", "none"), ("bfloat16", "none"), ("float32", "default")))
    assert engine_choice.choose("bfloat16", "none", "m", "cpu", 1, None) == engine_choice.EngineConfig("bfloat16", "none", "asked")
    monkeypatch.setenv(engine_choice.PIN_ENV, "float32/none")
    assert engine_choice.choose("auto", "auto", "m", "cpu", 1, None).source == "$SPECHARNESS_ENGINE"
    monkeypatch.setenv(engine_choice.PIN_ENV, "float32")
    with pytest.raises(UsageError, match="DTYPE/MODE"):
        engine_choice.choose("auto", "auto", "m", "cpu", 1, None)
    monkeypatch.delenv(engine_choice.PIN_ENV)
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ())  # no table row (no AMX): measured
    monkeypatch.setattr(engine_choice, "contention", lambda *a: None)  # a quiet machine (tests share cores)
    loads = []

    def load(dtype):
        loads.append(dtype)
        return TargetModel.tiny("llama", vocab_size=32, n_layers=1, hidden_size=32, seed=0, dtype=dtype)

    chosen = engine_choice.choose("auto", "auto", "m", "cpu", 1, load)
    assert chosen.source == "measured" and len(loads) == len(engine_choice.CANDIDATES)
    record = json.loads(engine_choice.choice_file("m", "cpu", 1).read_text())
    best = min(record["candidates"], key=lambda r: r["step_ms"])
    assert (chosen.dtype, chosen.compile) == (best["dtype"], best["compile"])
    again = engine_choice.choose("auto", "auto", "m", "cpu", 1, load)
    assert again.source == "cached" and len(loads) == len(engine_choice.CANDIDATES)  # nothing measured twice
    only = engine_choice.choose("float32", "auto", "m", "cpu", 1, load)
    assert only.dtype == "float32" and only.compile in ("none", "default")


def _text_target(seed: int) -> TargetModel:
    """A tiny llama that reads and writes text (one token per character), as a run's target does."""
    t = TargetModel.tiny("llama", vocab_size=48, n_layers=2, hidden_size=32, seed=seed)
    t.chat_ids = lambda messages: [3 + ord(c) % 40 for m in messages for c in m["content"]]
    t.decode = lambda ids: "".join(chr(97 + i % 26) for i in ids)
    return t


WARM_QUESTION = "a question of some forty characters, say"


def test_warm_up_compiles_verification_widths_only_and_timing_reuses_its_graphs():
    """Nothing compiles while timing, and a graph no round uses costs no compile. A compiled graph
    guards on its inputs' dispatch keys and the engine's tensors are inference tensors, so the compile
    check of ``engine_choice.apply`` and ``precompile`` must make theirs the same way; a vanilla run gets
    width 1 and the dynamic-width graph only; a method verifying up to 8 positions adds buckets 2, 4 and
    8, never 16-64; and every prefill, whatever its length, runs the one dynamic-width graph warm-up
    compiled. (One test, one target: each graph of a tiny model still costs seconds to compile.)"""
    from specharness.plugins import build_registry
    from specharness.runner import Settings, build_method, run_question, warm_up
    from specharness.tasks.specbench import Question
    t = _text_target(3)

    @contextmanager
    def no_recompile():  # neither a new graph of ours nor a recompile of one of dynamo's
        announced: list = []
        t.backend.on_new_graph = announced.append
        try:
            with torch._dynamo.config.patch(error_on_recompile=True):
                yield
        finally:
            t.backend.on_new_graph = None
        assert not announced, f"compiled while timing: {[k.describe() for k in announced]}"

    assert engine_choice.apply(t, "default") == ("default", None)  # compiles width 1 and the dynamic width (its context)
    with no_recompile():
        generate(t, NoDraft(), greedy, list(range(3, 15)), 4)  # prefill 12 -> dynamic, then width 1
    registry = build_registry()
    question = Question("q", "qa", "qa", [WARM_QUESTION])
    vanilla = build_method(registry, "vanilla", [], t, 0.0)
    warm_up(t, [vanilla], [question], Settings(4, warmup=1))
    assert {g.width for g in t.backend.graphs} == {1, "wide"}
    pld = build_method(registry, "pld", ["k=3", "nodes=6"], t, 0.0)
    assert pld.max_width == 7
    warm_up(t, [pld], [question], Settings(4, warmup=1))
    assert {g.width for g in t.backend.graphs} == {1, 2, 4, 8, "wide"}
    long = Question("long", "qa", "qa", ["a prompt of a hundred characters " * 3])
    with no_recompile():
        for method in (vanilla, pld):
            run_question(t, method, long, Settings(4))
    assert t.precompile(max_width=20) >= 1  # a bucket past 8: a new graph
    with no_recompile():
        generate(t, NoDraft(), greedy, list(range(3, 30)), 4)  # prefill 27 -> dynamic, though a bucket holds it


@pytest.mark.slow  # 45 s of compiling; the default run's drafter-stack test checks a run's graphs with drafters
def test_warm_up_compiles_each_methods_graphs_only_for_its_own_layer_ranges(monkeypatch):
    """Each method's graphs up to its own widest verification: early exit verifies 4 positions through
    layers 1-2; vanilla runs layers 0-2 one position at a time, and gets the run's widest static width
    besides (4: a step may run padded to it where it measures faster) only where early exit's layers 1-2,
    which stand in for it, ran at width 4, scaled to both layers, within 90% of vanilla's own width-1 step
    (timings forced here: first not, then so); no width-2 or width-8 graph of them."""
    from specharness import runner
    from specharness.plugins import build_registry
    from specharness.runner import Settings, build_method, warm_up
    measured = runner.verify_seconds
    wide_is_faster = False

    def stand_in_times(target, layer, widths, reps=5):  # the check's times forced; the curve of two widths measured
        if layer == 0:
            return {1: 2e-3} if widths == [1] else measured(target, layer, widths, reps)
        assert layer == 1 and widths == [1, 4]
        return {1: 1e-3, 4: 0.5e-3 if wide_is_faster else 1e-3}  # x 2/1 layers: 1 or 2 ms against 0.9 x 2

    monkeypatch.setattr(runner, "verify_seconds", stand_in_times)
    from specharness.tasks.specbench import Question
    registry = build_registry()
    question = Question("q", "qa", "qa", [WARM_QUESTION])
    u = _text_target(5)
    u.compile("default")
    methods = [build_method(registry, "vanilla", [], u, 0.0),
               build_method(registry, "early_exit", ["exit_layer=1", "gamma=3"], u, 0.0)]
    warm = warm_up(u, methods, [question], Settings(4, warmup=1))
    widths = lambda a, b: {g.width for g in u.backend.graphs if (g.a, g.b, g.head) == (a, b, True)}  # noqa: E731
    assert widths(0, 2) == {1, "wide"} and widths(1, 2) == {1, 2, 4}
    assert warm["route_check"] == {"layer": 1, "verify_ms_by_width": {"1": 1.0, "4": 1.0}, "whole_model_ms": {"1": 2.0},
                                   "estimate_ms": {"4": 2.0}, "built": False}
    assert warm["verify_ms_by_width"] == {"1": 2.0}
    wide_is_faster = True
    warm = warm_up(u, methods, [question], Settings(4, warmup=1))
    assert widths(0, 2) == {1, 4, "wide"} and widths(1, 2) == {1, 2, 4}
    assert warm["route_check"]["built"] and set(warm["verify_ms_by_width"]) == {"1", "4"}
    # both methods prefill through the one full-depth dynamic-width graph (early exit's layer-1 states
    # come back captured): each graph is ~20 s of a second run's warm-up
    assert sum(g.width == "wide" for g in u.backend.graphs) == 1


@pytest.mark.slow  # the graph store's fallback path; test_graph_store checks what runs by default
def test_a_second_process_reads_frozen_graphs_from_inductors_disk_cache_keyed_by_weights(tmp_path):
    """bfloat16 graphs hold oneDNN-packed weights, which torch alone never caches on disk, and under
    max-autotune the C++ GEMM template stores re-blocked weights in the entry itself
    (specharness.model.accel.inductor_cache). Three processes on one fresh cache, the template forced: the first
    compiles two models of one shape and each gets its own logits (keyed by shape alone, the second
    would run the first's weights); the second process hits for both and gets the first's logits
    bit for bit; with the hook off the graphs bypass the cache, so they did hold packed weights."""
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has no bfloat16 oneDNN kernels: inductor packs no weights to cache")
    probe = Path(__file__).with_name("inductor_cache_probe.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS="CPP",
               SPECHARNESS_AOT_GRAPHS="0")  # torch.compile's path: the graph store's fallback

    def process(hook: str) -> dict:
        done = subprocess.run([sys.executable, str(probe), "1", "2"], env={**env, "SPECHARNESS_CACHE_PREPACKED": hook},
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second, unhooked = process("1"), process("1"), process("0")
    assert all(r["eager_gap"] < 0.25 for r in first["runs"].values())  # each model's own weights ran
    assert first["runs"]["1"]["logits"] != first["runs"]["2"]["logits"]
    assert first["fx"].get("fxgraph_cache_miss", 0) >= 2 and "fxgraph_cache_bypass" not in first["fx"]
    assert second["fx"].get("fxgraph_cache_hit", 0) >= 2 and "fxgraph_cache_miss" not in second["fx"]
    assert unhooked["fx"].get("fxgraph_cache_bypass", 0) >= 1
    for run in (second, unhooked):
        assert run["runs"] == first["runs"]  # the cached code computes exactly what a fresh compile does


def test_the_amx_prefetch_changes_no_logit_and_its_graphs_have_cache_entries_of_their_own(tmp_path):
    """specharness.model.accel.amx_prefetch edits inductor's AMX GEMM template: the graphs it compiles hold the
    prefetch, compute the stock template's logits bit for bit, and never come from (or serve) the
    stock template's cache entries. Two processes on one fresh cache, the template forced: stock
    first, then with the prefetch, which must miss."""
    if not torch.cpu._is_amx_tile_supported():
        pytest.skip("this CPU has no AMX: the GEMM template the prefetch edits does not run here")
    probe = Path(__file__).with_name("inductor_cache_probe.py")
    cache = tmp_path / "inductor"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE", "SPECHARNESS_AMX"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS="CPP",
               SPECHARNESS_AOT_GRAPHS="0")  # counted in inductor's FX cache (the store keys the switch too)

    def process(prefetch: str) -> dict:
        done = subprocess.run([sys.executable, str(probe), "1"], env={**env, "SPECHARNESS_AMX_PREFETCH": prefetch},
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def with_prefetch() -> int:
        return sum("specharness: prefetch" in p.read_text(errors="replace") for p in cache.rglob("*") if p.is_file()
                   and p.suffix in (".py", ".cpp") and p.stat().st_size < 5_000_000)

    stock = process("0")
    assert stock["fx"].get("fxgraph_cache_miss", 0) >= 1 and with_prefetch() == 0
    edited = process("1")
    assert edited["fx"].get("fxgraph_cache_miss", 0) >= 1 and "fxgraph_cache_hit" not in edited["fx"]
    assert with_prefetch() >= 1  # the AMX kernel was generated with the prefetch in it
    assert edited["runs"] == stock["runs"]  # a prefetch hint changes no value


def test_the_prefetch_edit_fits_this_torchs_amx_template_and_picks_its_rule_by_kernel_rows():
    import jinja2

    import torch._inductor.graph  # noqa: F401  (inductor's codegen modules import in this order)
    from torch._inductor.codegen import cpp_micro_gemm

    from specharness.model.accel import amx_prefetch
    template = cpp_micro_gemm.CppMicroGemmAMX.TEMPLATE_KERNEL
    edited = amx_prefetch.patched(template)
    assert edited is not None and amx_prefetch.patched(edited) == edited  # found; a second edit adds nothing
    assert amx_prefetch.patched("no k-loop in this text") is None  # another torch's template: left alone
    jinja2.Environment().parse(edited)
    hint = jinja2.Template(amx_prefetch._HINT)
    narrow, wide = (hint.render(num_rows=rows, block_k=32) for rows in (16, 32))
    assert "(k + 4 * 32)" in narrow and "_MM_HINT_T0" in narrow
    assert "(k + 8 * 32)" in wide and "_MM_HINT_T1" in wide


def test_the_narrow_attention_kernel_serves_compiled_and_eager_bfloat16_tree_forwards(narrow_kernel):
    """Over a bfloat16 cache, tree forwards attend through our C++ kernel
    (specharness.model.accel.narrow_attention), inside compiled graphs as one extern op, on each of its paths:
    AMX where the CPU has it (10 rows eager, 16 padded to the bucket 8 when compiled) and
    AVX512-BF16 (``EngineOptions(narrow_attention="avx512")``). Compiled and eager, each gives the logits
    of the same forward through SDPA's kernel (ours switched off) to within bfloat16 rounding: two
    units in the last place of these logits (~12), where compiled and eager bfloat16 forwards
    differ by 7 from fusing alone. The profiler shows the op called exactly where the kernel is on,
    and never in the dynamic-width graph of compiled prefills, which prefills of 9 and 70 positions
    (either side of the kernel's limits) share without a recompile."""
    from specharness.model.accel import narrow_attention
    shape = dict(vocab_size=64, n_layers=2, hidden_size=128, n_heads=2, n_kv_heads=1, seed=3, dtype="bfloat16")
    tree, prefix, x = Tree((-1, 0, 0, 1, 2)), torch.tensor([5, 6, 7, 8, 9, 10, 11]), torch.tensor([12, 13, 14, 15, 16])
    logits = {}
    paths = {"on": narrow_attention.kind(), "avx512": "avx512-bf16", "off": ""}
    if paths["on"] == paths["avx512"]:  # no AMX here: "on" is the AVX512-BF16 path, compiled once
        del paths["avx512"]
    for setting, kind in paths.items():
        options = EngineOptions(narrow_attention=setting)
        eager, compiled = TargetModel.tiny("llama", **shape, options=options), TargetModel.tiny("llama", **shape, options=options)
        assert eager.attention.narrow == compiled.attention.narrow == kind
        compiled.compile("default")
        compiled.expect_widths(8)
        for mode, t in (("eager", eager), ("compiled", compiled)):
            cache = t.new_cache(64)
            t.forward(prefix, cache, 0, prefill=True)
            with torch.profiler.profile() as prof:
                logits[mode, kind] = t.forward(x, cache, len(prefix), tree=tree, head=True).logits.float()
            assert any("narrow_attention" in e.key for e in prof.key_averages()) == bool(kind), (mode, kind)
        if kind:  # compiled prefills share the dynamic-width graph, which keeps SDPA: no guard on the kernel's limits
            from torch._dynamo.utils import counters
            compiled.forward(torch.arange(9) % 64, compiled.new_cache(128), 0, prefill=True)
            graphs = counters["stats"]["unique_graphs"]
            with torch.profiler.profile() as prof:
                compiled.forward(torch.arange(70) % 64, compiled.new_cache(128), 0, prefill=True)
            assert counters["stats"]["unique_graphs"] == graphs, "a prefill past 64 positions recompiled the wide graph"
            assert not any("narrow_attention" in e.key for e in prof.key_averages())
    for mode in ("eager", "compiled"):
        for kind in set(paths.values()) - {""}:
            torch.testing.assert_close(logits[mode, kind], logits[mode, ""], rtol=0, atol=0.125, msg=f"{mode} {kind}")
