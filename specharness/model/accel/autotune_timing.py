"""Max-autotune's kernel timings on a shared CPU: the fastest of many calls, one benchmark at a time.

Why: inductor times each GEMM choice as the median of ~100 ms of calls. The graph store builds two
packages at once on a 2-core machine (``graph_store.default_jobs``), beside the run's eager warm-up.
A 2-thread kernel timed while another process holds a core waits a scheduler slice at its OpenMP
barrier, and reads 4-16 ms for a GEMM that takes 30 us. Which choice won then depended on which
one happened to be timed in a quiet moment:
- in one fresh build of SmolLM2's widths 2/4/8/16 on a 2-core EPYC, 9 of the 15 GEMM shapes other than
  the LM head had a choice timed at over 1 ms in inductor's timing cache;
- the whole-model forward then took 9.5 / 12.8 / 21.6 / 26.0 ms at those widths, width 8 at 2.3x
  width 2 (``results/smollm2-cpu-epyc-gemm-families``);
- between two compiles of close code, width 8 went from 0.72x to 1.38x width 2 (n10-v4 and n10-v5),
  which moved every tree method's speedup by up to a third.

And inductor keeps these timings in its local autotune cache, so one bad draw lasted for every later
build on that machine. Here (``install``):
- each benchmark holds an exclusive lock on one file shared by every builder, so two never time at
  once;
- the timing is the fastest call rather than the median: contention only ever adds time;
- inductor's local autotune cache is no longer read, so no timing taken the old way is reused (a
  package's choices live in the package: the graph store is the cache).

This does not make the timings right. The other build's compiler still holds a core for seconds at a
time, and a benchmark still times weights left in cache by its previous call, where a forward streams
them from memory. So where one kernel family was measured faster at every width than max-autotune's
mix, graphs use it alone (``backends.GEMM_FAMILIES``); this module serves the graphs still autotuned.

``EngineOptions.autotune_timing`` ("inductor", ``SPECHARNESS_AUTOTUNE_TIMING=inductor``) keeps
inductor's own timing, for A/Bs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

_installed: Path | None = None


def fastest_ms(call: Callable[[], object], warmup_ms: float, rep_ms: float,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of the calls made in ``rep_ms`` milliseconds, after ``warmup_ms`` of calls, in ms."""
    def run_for(ms: float) -> float:
        best, began = float("inf"), clock()
        while True:
            start = clock()
            call()
            end = clock()
            best = min(best, end - start)
            if (end - began) * 1e3 > ms:
                return best * 1e3
    run_for(warmup_ms)
    return run_for(rep_ms)


@contextlib.contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold ``lock`` (a file, created if missing) against every other process timing kernels."""
    try:
        import fcntl
    except ImportError:  # no flock here (Windows): the fastest call alone still holds up
        yield
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_path() -> Path:
    """The lock every builder of this cache root times under (the run's process and its children)."""
    from ...paths import cache_root
    return cache_root() / "autotune.lock"


def install(timing: str = "fastest", lock: Path | None = None) -> bool:
    """Time this process's CPU autotune benchmarks as ``fastest_ms`` under ``lock`` (default
    ``lock_path()``), and stop reading inductor's local autotune cache; True when installed (``timing``
    "inductor": left as torch has it). Where torch's benchmarker is not where this expects (another
    torch), nothing changes."""
    global _installed
    from ...engine_options import TIMING_CHOICES
    if timing not in TIMING_CHOICES:
        raise ValueError(f"autotune timing '{timing}': choose one of {', '.join(TIMING_CHOICES)}")
    if timing == "inductor":
        return False
    if _installed is not None:
        return True
    try:
        import torch._inductor.config as inductor_config
        from torch._inductor.runtime.benchmarking import benchmarker
    except ImportError:
        return False
    if not hasattr(benchmarker, "benchmark_cpu"):
        return False

    lock = lock or lock_path()

    def benchmark_cpu(call: Callable[[], object], warmup: int = 20, rep: int = 100, **_) -> float:
        with exclusive(lock):
            return fastest_ms(call, warmup, rep)

    benchmarker.benchmark_cpu = benchmark_cpu  # the instance's: extern and C++ template choices both call it
    inductor_config.autotune_local_cache = False
    _installed = lock
    return True
