"""How a max-autotune graph's GEMM kernels are chosen: one kernel family per width where that was
measured faster than max-autotune's per-GEMM picks, and otherwise max-autotune's search timed one
benchmark at a time, by its fastest call, with no stale timing reused."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import torch

from specharness.engine_options import EngineOptions
from specharness.errors import UsageError
from specharness.model import backends, engine_choice
from specharness.model.accel import autotune_timing, narrow_linear
from specharness.model.graph_store import GraphStore, inductor_configs

CPU = torch.device("cpu")


def test_the_measured_cpu_gets_the_cpp_template_then_our_kernel_then_onednn(monkeypatch):
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx512_bf16", "avx512f"))
    monkeypatch.setattr(narrow_linear, "available", lambda device: True)
    family = lambda width, dtype=torch.bfloat16, mode="max-autotune", option="auto", device=CPU: \
        backends.gemm_family(option, width, dtype, mode, device)  # noqa: E731
    assert [family(w) for w in (1, 2, 4, 8, 16, 64)] == ["CPP", "CPP", "NARROW", "NARROW", "NARROW", "ATEN"]
    monkeypatch.setattr(narrow_linear, "available", lambda device: False)  # our library did not build: the next tier
    assert [family(w) for w in (1, 2, 4, 8, 16, 64)] == ["CPP", "CPP", "CPP", "ATEN", "ATEN", "ATEN"]
    assert family("wide") is None  # the dynamic graph: not what was measured
    assert family(2, dtype=torch.float32) is None and family(8, mode="default") is None
    assert family(8, device=torch.device("cuda")) is None
    assert family(8, option="cpp") == "CPP" and family(2, option="aten") == "ATEN"
    assert family(2, option="autotune") is None
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("amx_tile", "avx512_bf16", "avx2"))  # not measured there
    assert family(2) is None and family(8) is None


def test_a_cpu_with_avx2_alone_gets_our_kernel_to_width_16_and_autotune_past_it(monkeypatch):
    """Without bfloat16 dot products our kernel's AVX2 build beat max-autotune at every width measured
    (1-16); wider was not measured, so max-autotune chooses there, as everywhere our library did not load."""
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx2", "fma"))
    monkeypatch.setattr(narrow_linear, "available", lambda device: True)
    family = lambda width, dtype=torch.bfloat16, mode="max-autotune":         backends.gemm_family("auto", width, dtype, mode, CPU)  # noqa: E731
    assert [family(w) for w in (1, 2, 4, 8, 16, 32, 64)] == ["NARROW"] * 5 + [None] * 2
    assert family("wide") is None and family(8, dtype=torch.float32) is None and family(8, mode="default") is None
    monkeypatch.setattr(narrow_linear, "available", lambda device: False)
    assert [family(w) for w in (1, 8, 64)] == [None] * 3
    monkeypatch.setattr(narrow_linear, "available", lambda device: True)
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx2", "fma", "avx512f"))  # AVX512 without BF16:
    assert family(8) is None  # it builds the AVX2 kernel, but was not measured: max-autotune chooses


def test_a_family_reaches_inductor_only_under_max_autotune_and_keys_the_package(monkeypatch):
    assert inductor_configs("max-autotune", False, False, "CPP")["max_autotune_gemm_backends"] == "CPP"
    assert "max_autotune_gemm_backends" not in inductor_configs("max-autotune", False, False, None)
    assert "max_autotune_gemm_backends" not in inductor_configs("default", False, False, "ATEN")
    assert "max_autotune_gemm_backends" not in inductor_configs("max-autotune", True, False, "ATEN")  # wide: no search
    from specharness.model import TargetModel
    target = TargetModel.tiny("llama", vocab_size=32, n_layers=2, hidden_size=32, seed=3)
    stack = target.backend.stacks[""]
    x = torch.zeros(2, dtype=torch.long)
    cache = target.new_cache(16)
    args = (x, torch.arange(2), torch.arange(2), torch.zeros(2, 16), cache.keys, cache.values)
    key = backends.GraphKey(0, 2, True, (), True, ((), ()), 2)
    by_width = GraphStore("max-autotune", {}, gemm=lambda width: "CPP" if width == 2 else "ATEN")
    autotuned = GraphStore("max-autotune", {})
    assert by_width.key(key, stack, args, False)[1]["inductor"]["max_autotune_gemm_backends"] == "CPP"
    assert by_width.key(key, stack, args, False)[0] != autotuned.key(key, stack, args, False)[0]


def test_the_gemm_switch_is_read_from_the_environment_and_a_bad_value_is_one_line():
    assert EngineOptions().gemm == "auto" and EngineOptions().autotune_timing == "fastest"
    assert EngineOptions.from_env({"SPECHARNESS_GEMM": "aten"}).gemm == "aten"
    assert EngineOptions.from_env({"SPECHARNESS_AUTOTUNE_TIMING": "inductor"}).autotune_timing == "inductor"
    with pytest.raises(UsageError, match=r"SPECHARNESS_GEMM='onednn': write auto, autotune, cpp, aten or narrow"):
        EngineOptions.from_env({"SPECHARNESS_GEMM": "onednn"})
    with pytest.raises(UsageError, match="SPECHARNESS_AUTOTUNE_TIMING"):
        EngineOptions.from_env({"SPECHARNESS_AUTOTUNE_TIMING": "median"})
    with pytest.raises(UsageError, match="gemm 'x'"):
        EngineOptions(gemm="x")


def test_a_benchmark_reports_its_fastest_call_not_its_median_and_not_its_warm_up():
    now = [0.0]

    def timed(durations_ms):
        durations = iter(durations_ms)

        def call() -> None:
            now[0] += next(durations) / 1e3
        return call

    clock = lambda: now[0]  # noqa: E731
    # a warm-up call of 50 ms, then calls of 1, 9, 9, ... ms: the median is 9, the fastest 1
    assert autotune_timing.fastest_ms(timed(itertools.chain([50.0, 1.0], itertools.repeat(9.0))), 10, 100,
                                      clock=clock) == pytest.approx(1.0)
    # the fastest call of all came in the warm-up: not counted
    assert autotune_timing.fastest_ms(timed(itertools.chain([0.5], itertools.repeat(9.0))), 0.1, 100,
                                      clock=clock) == pytest.approx(9.0)


def test_two_processes_worth_of_benchmarks_never_overlap_under_the_lock(tmp_path):
    lock, inside, overlaps = tmp_path / "autotune.lock", [0], []

    def bench() -> None:
        for _ in range(5):
            with autotune_timing.exclusive(lock):
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.002)
                inside[0] -= 1

    threads = [threading.Thread(target=bench) for _ in range(3)]  # flock is per open file: threads contend too
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(overlaps) == 15 and max(overlaps) == 1


def test_installing_the_timing_replaces_inductors_cpu_benchmark_and_its_stale_cache(monkeypatch, tmp_path):
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime import benchmarking
    assert autotune_timing.install("inductor") is False
    with pytest.raises(ValueError, match="autotune timing 'median'"):
        autotune_timing.install("median")
    monkeypatch.setattr(autotune_timing, "_installed", None)
    monkeypatch.setattr(benchmarking.benchmarker, "benchmark_cpu", benchmarking.benchmarker.benchmark_cpu)
    monkeypatch.setattr(inductor_config, "autotune_local_cache", True)
    assert autotune_timing.install("fastest", lock=tmp_path / "lock") is True
    assert inductor_config.autotune_local_cache is False
    ms = benchmarking.benchmarker.benchmark(lambda: sum(range(200)), (), {}, device="cpu", warmup=1, rep=5)
    assert 0 < ms < 5 and (tmp_path / "lock").is_file()  # timed through ours, under its lock


@pytest.mark.parametrize("native", [True, False])
def test_a_prompts_bfloat16_linear_runs_in_float32_only_where_bfloat16_is_emulated(monkeypatch, native):
    """Without bfloat16 dot products (AVX2), a linear over a prompt's width (the dynamic-width graph,
    or ``WIDEN_ROWS`` rows eagerly) widens its bfloat16 inputs exactly, sums in float32 and rounds
    once; a narrow one, a float32 one and every one on a CPU with them stay as they are."""
    import torch.nn.functional as F
    from specharness.model import layers
    monkeypatch.setattr(layers, "NATIVE_BFLOAT16", native)
    torch.manual_seed(0)
    w, b = torch.randn(64, 96).bfloat16(), torch.randn(64).bfloat16()
    gemm = layers.Gemm()

    def widened(x):
        return F.linear(x.float(), w.float(), b.float()).to(torch.bfloat16)

    prompt, few = torch.randn(layers.WIDEN_ROWS, 96).bfloat16(), torch.randn(layers.WIDEN_ROWS - 1, 96).bfloat16()
    want = (lambda x: F.linear(x, w, b)) if native else widened
    assert torch.equal(gemm(prompt, w, b), want(prompt))
    assert torch.equal(gemm(few, w, b, wide=True), want(few))  # the dynamic-width graph: every width
    assert torch.equal(gemm(few, w, b), F.linear(few, w, b))  # a few rows eagerly: bfloat16's own kernel
    assert gemm(prompt, w, b).dtype == torch.bfloat16
    x32 = torch.randn(layers.WIDEN_ROWS, 96)
    assert torch.equal(gemm(x32, w.float(), b.float()), F.linear(x32, w.float(), b.float()))  # float32: untouched
