"""Which dtype and compile mode the engine runs in: the fastest vanilla on the machine at hand,
known from a measurement, never assumed, and recorded in every result header.

Candidates are float32 and bfloat16, each eager or compiled (inductor ``default``; bfloat16 also
``max-autotune``, whose GEMM templates are picked per shape by benchmarking). ``choose`` returns
the cached choice for this model, machine and thread count (``profile``'s, or an earlier
measurement), else the table's known-best row for this CPU's features, model and threads (AMX,
AVX512-BF16, AVX2: seconds, not the ~17 minutes of compiling every candidate, and independent of load), else measures every
candidate interleaved and caches the fastest unless the machine was loaded (``cache_root()/engine/``).
``quick`` (``--engine quick``) picks the faster eager dtype in seconds and compiles nothing.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..engine_options import COMPILE_CHOICES, DTYPE_CHOICES, PIN_ENV, EngineOptions
from ..errors import UsageError, exception_line
from ..paths import cache_root, model_slug, write_text_atomic
from .loading import DEFAULT_MODEL

CANDIDATES = (("float32", "none"), ("bfloat16", "none"), ("float32", "default"), ("bfloat16", "default"),
              ("bfloat16", "max-autotune"))


@dataclass(frozen=True)
class EngineConfig:
    dtype: str
    compile: str  # none | default | max-autotune
    source: str = "asked"  # "asked" (flags), "measured" (now), "cached" (an earlier measurement), "fallback", "quick"
    choice: dict | None = field(default=None, compare=False)  # how it was chosen, for the header's engine.choice


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(model: str, device: str, threads: int) -> str:
    dev = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else cpu_name()
    raw = f"{model}|{device}|{dev}|{threads}|torch{torch.__version__}"
    return model_slug(raw)


def choice_file(model: str, device: str, threads: int) -> Path:
    return cache_root() / "engine" / f"{machine_key(model, device, threads)}.json"


def load_choice(model: str, device: str, threads: int) -> dict | None:
    path = choice_file(model, device, threads)
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None
    return None


def save_choice(model: str, device: str, threads: int, record: dict) -> Path:
    path = choice_file(model, device, threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=1))
    return path


def call_seconds(call: Callable[[], object], sync: bool = False) -> float:
    """Seconds one ``call()`` takes; ``sync`` (CUDA): CUDA events recorded around it on an idle
    stream, since kernels run asynchronously and a host clock read after the launch would time the
    launch alone."""
    if sync:
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        call()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def median_ms(call, repeats: int, warm: int = 1, after=None, sync: bool = False) -> float:
    """Median ms of ``call()`` over ``repeats`` timed calls after ``warm`` untimed ones; ``after()``
    (untimed) restores the state each call changed, e.g. the cache length."""
    times = []
    for i in range(warm + repeats):
        seconds = call_seconds(call, sync)
        if i >= warm:
            times.append(seconds)
        if after is not None:
            after()
    return 1e3 * statistics.median(times)


def interleaved_ms(steps: list[tuple[Callable[[], object], Callable[[], object]]], rounds: int, warm: int = 1,
                   sync: bool = False, min_s: float = 0.0, max_rounds: int = 1000) -> list[list[float]]:
    """Each ``(call, after)``'s ms per round, timed round-robin with the start rotating per round
    (A B C, B C A, ...): load that comes and goes falls on every candidate alike, where timing them
    one after another would hand it all to whichever ran then. Runs ``rounds`` timed rounds, more
    (up to ``max_rounds``) until ``min_s`` have passed, so a window of cheap steps is long enough
    to tell whether other work shared it."""
    times: list[list[float]] = [[] for _ in steps]
    started = time.perf_counter()
    r = 0
    while r < warm + rounds or (time.perf_counter() - started < min_s and r < warm + max_rounds):
        for k in range(len(steps)):
            i = (r + k) % len(steps)
            call, after = steps[i]
            seconds = call_seconds(call, sync)
            after()
            if r >= warm:
                times[i].append(1e3 * seconds)
        r += 1
    return times


def random_ids(target, n: int, seed: int, batch: bool = False) -> torch.Tensor:
    """``n`` token ids drawn from ``seed`` on the target's device (``batch``: shape (1, n))."""
    ids = torch.randint(0, target.vocab_size, (1, n) if batch else (n,), generator=torch.Generator().manual_seed(seed))
    return ids.to(target.device)


def stepper(target, context: int = 256, width: int = 1) -> tuple[Callable[[], object], Callable[[], object]]:
    """``(call, after)``: one forward over ``width`` positions after ``context`` cached ones, and
    the crop that undoes it. Call both under ``torch.inference_mode()``: every tensor is made as the
    engine's are, since a compiled graph guards on its inputs' dispatch keys and a normal tensor
    here would compile graphs no run ever reuses."""
    # on CUDA the engine's own cache: its buffers have static addresses, without which a graph
    # that writes them cannot be a CUDA graph (torch skips cudagraphs for mutated inputs)
    cache = target.session_cache(context + 128) if target.device.type == "cuda" else target.new_cache(context + 128)
    ids = random_ids(target, context, 0)
    target.forward(ids, cache, 0, head=True, prefill=True, last=True)  # the graph a run's prefill uses
    return (lambda: target.forward(ids[:width], cache, context, head=True)), (lambda: cache.crop(context))


def step_ms(target, context: int = 256, width: int = 1, repeats: int = 15) -> float:
    """Median ms of one forward over ``width`` positions after ``context`` cached ones (compiles
    first). On CUDA the warm calls also let CUDA graph trees warm up and record, so the timed calls
    are replays."""
    with torch.inference_mode():
        call, after = stepper(target, context, width)
        return median_ms(call, repeats, warm=3, after=after, sync=target.device.type == "cuda")


def width_curve_ms(target, context: int, widths, repeats: int = 15) -> dict[int, float]:
    """Median ms of one forward at each width after ``context`` cached ones (compiled in the warm
    rounds), timed round-robin (``interleaved_ms``) so a slow spell falls on every width alike: timed
    one width after another, n10-v12's profile on the AVX512 EPYC had width 2 at 14.4 ms beside 13.0
    at width 4 and 10.2 at width 1, where the run's own verifications took 9.4-9.8 ms at widths 1-2."""
    with torch.inference_mode():
        steps = [stepper(target, context, w) for w in widths]
        times = interleaved_ms(steps, repeats, warm=3, sync=target.device.type == "cuda")
    return {w: statistics.median(t) for w, t in zip(widths, times)}


def check_request(dtype: str, compile_mode: str) -> None:
    """One line for a --dtype or --compile the engine does not know."""
    if dtype not in DTYPE_CHOICES:
        raise UsageError(f"unknown --dtype '{dtype}'; choose one of {', '.join(DTYPE_CHOICES)}")
    if compile_mode not in COMPILE_CHOICES:
        raise UsageError(f"unknown --compile '{compile_mode}'; choose one of {', '.join(COMPILE_CHOICES)}")


QUICK_DTYPES = ("float32", "bfloat16")
NOT_COMPARABLE = "eager, nothing compiled: not comparable with compiled runs"


def quick(dtype: str, load, rounds: int = 5, context: int = 256, log=print) -> tuple[EngineConfig, object]:
    """``--engine quick``: no compile, the faster eager dtype, by a few interleaved eager steps
    (seconds, not the minutes of compiling), for iterating on a drafter. Returns the configuration
    and its target, loaded once; an explicit ``dtype`` is taken as asked."""
    check_request(dtype, "none")
    if dtype != "auto":
        return EngineConfig(dtype, "none", "quick", {"source": "quick", "why": f"--dtype {dtype} asked; "
                                                     + NOT_COMPARABLE}), load(dtype)
    targets = [load(d) for d in QUICK_DTYPES]
    with torch.inference_mode():
        steps = [stepper(t, context) for t in targets]
        times = interleaved_ms(steps, rounds, sync=targets[0].device.type == "cuda")
    ms = [statistics.median(t) for t in times]
    best = min(range(len(ms)), key=ms.__getitem__)
    log("engine: quick: eager " + ", ".join(f"{d} {m:.1f} ms" for d, m in zip(QUICK_DTYPES, ms))
        + f" per vanilla step; {QUICK_DTYPES[best]}, nothing compiled")
    choice = {"source": "quick", "eager_step_ms": dict(zip(QUICK_DTYPES, ms)), "rounds": rounds,
              "why": f"the faster eager dtype by {rounds} interleaved steps; {NOT_COMPARABLE}"}
    return EngineConfig(QUICK_DTYPES[best], "none", "quick", choice), targets[best]


def apply(target, mode: str, watch: Callable[[object], None] | None = None,
          wait: bool = True) -> tuple[str, str | None]:
    """Switch ``target`` to ``mode``; a compile that fails falls back to eager with a reason.
    ``watch(backend)`` sees the new backend before it compiles anything (a progress observer).
    ``wait=False`` returns once one graph has built (the compiler works), the others building on
    (``CompiledBackend.in_background``): a run's warm-up starts its builds beside them."""
    if mode == "none":
        target.compile("none")
        return "none", None
    try:
        target.compile(mode)
        if watch is not None:
            watch(target.backend)
        with target.backend.in_background(wait=wait):  # the prefill's and the step's graphs build side by side
            step_ms(target, context=16, repeats=1)  # compiles now: a failure shows here, not mid-run
        return mode, None
    except UsageError:
        raise
    except Exception as exc:  # no compiler, unsupported op...: eager still works
        target.compile("none")
        return "none", exception_line(exc)


FEATURE_FLAGS = ("amx_tile", "amx_bf16", "avx512_bf16", "avx512f", "avx2")


@dataclass(frozen=True)
class KnownBest:
    """A row of the table: CPUs with ``flag`` run ``model`` at ``threads`` best in ``ranking``
    (fastest first), as measured; another model or thread count is measured, not assumed."""

    row: str
    flag: str
    ranking: tuple[tuple[str, str], ...]
    why: str
    model: str = DEFAULT_MODEL
    threads: int = 2


# What was measured, never assumed (SmolLM2-135M, 2 threads, vanilla step at context 256). The first
# row whose flag the CPU has answers (an AVX512 CPU has AVX2 too: its rows come first). A CPU with
# none of the flags has no row: it is measured, interleaved, once, since eager timings cannot stand
# in for compiled ones (on the 105 MiB Xeon bfloat16 led eager, float32 led inductor's default).
KNOWN_BEST = (
    KnownBest("amx", "amx_tile", (("bfloat16", "max-autotune"), ("float32", "default"), ("bfloat16", "default"),
                                  ("bfloat16", "none"), ("float32", "none")),
              "AMX: bfloat16/max-autotune 24.5 ms per step, float32 compiled 33.9, bfloat16 compiled 37.4, bfloat16 "
              "eager 72.6, float32 eager 83.3 on a 2-core Xeon (2.0 GHz, L3 105 MiB; issue 34); 14.4 ms against "
              "float32 eager 35.5 on another (results/smollm2-cpu-xeon-profile-v6)"),
    KnownBest("avx512_bf16", "avx512_bf16", (("bfloat16", "max-autotune"), ("bfloat16", "default"),
                                             ("float32", "default"), ("bfloat16", "none"), ("float32", "none")),
              "AVX512-BF16 without AMX: bfloat16/max-autotune 16.7 ms per step, bfloat16 compiled 23.4, float32 "
              "compiled 45.1, bfloat16 eager 51.8, float32 eager 74.0 on a 2-core AMD EPYC, interleaved, others' "
              "work 0.02 cores (results/smollm2-cpu-epyc-engine-choice)"),
    KnownBest("avx2", "avx2", (("bfloat16", "max-autotune"), ("bfloat16", "default"), ("float32", "default"),
                               ("bfloat16", "none"), ("float32", "none")),
              "AVX2 without AVX512: bfloat16/max-autotune 13.4 ms per step, bfloat16 compiled 17.3, float32 compiled "
              "27.0, bfloat16 eager 29.8, float32 eager 50.8 on a 2-core AMD EPYC (Zen 3), interleaved, others' work "
              "0.01 cores (results/smollm2-cpu-epyc-avx2-engine-choice)"),
)
OTHERS_LIMIT = 0.5  # others' work on our cores during the timing, in cores, above which a choice is flagged


def cpu_flags() -> frozenset[str]:
    """Every flag /proc/cpuinfo lists (none where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_features() -> tuple[str, ...]:
    """The CPU flags that pick a table row."""
    flags = cpu_flags()
    return tuple(f for f in FEATURE_FLAGS if f in flags)


def from_table(dtype: str, compile_mode: str, device: str, model: str | None, threads: int) -> EngineConfig | None:
    """The known-best configuration for this CPU's features, model and thread count, or None (no
    row, a GPU, or a partial request the row's measurement does not cover). Taken from the table,
    the choice cannot depend on how loaded the machine is now."""
    if not device.startswith("cpu"):
        return None
    features = cpu_features()
    for known in KNOWN_BEST:
        if known.flag not in features or (model or DEFAULT_MODEL) != known.model or threads != known.threads:
            continue
        if (dtype, compile_mode) != ("auto", "auto") and not set(CANDIDATES) <= set(known.ranking):
            return None  # only part of the candidates was measured there: the asked subset may lack its best
        fits = [(d, m) for d, m in known.ranking if dtype in ("auto", d) and compile_mode in ("auto", m)]
        if fits:
            return EngineConfig(*fits[0], "table", {"source": "table", "row": known.row,
                                                    "cpu_features": list(features), "why": known.why})
    return None


def _cpu_seconds() -> tuple[float, float] | None:
    """(busy seconds of the cores this process may run on, this process's CPU seconds), or None
    where /proc/stat cannot say (not Linux)."""
    try:
        cores = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        busy = 0.0
        for line in Path("/proc/stat").read_text().splitlines():
            name, *ticks = line.split()
            if name in cores:  # user nice system idle iowait irq softirq steal: all but idle and iowait
                t = [int(x) for x in ticks[:8]]
                busy += sum(t) - t[3] - t[4]
        ours = os.times()
        return busy / os.sysconf("SC_CLK_TCK"), ours.user + ours.system
    except (OSError, AttributeError, ValueError):
        return None


def others_busy(before: tuple[float, float] | None, after: tuple[float, float] | None, wall_s: float) -> float | None:
    """How many cores' worth of other work ran on our cores between two ``_cpu_seconds`` readings
    (steal time included): what the 1-minute load average cannot say, since it also counts our own
    compiling and reacts over a minute."""
    if before is None or after is None or wall_s <= 0:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall_s


def contention(times: list[list[float]], others: float | None, threads: int) -> str | None:
    """Why a measurement cannot be trusted as the quiet machine's, or None. ``others`` counts every
    core this process may run on, so the cores our ``threads`` leave free may be busy without harm."""
    spare = max(0, len(os.sched_getaffinity(0)) - threads) if hasattr(os, "sched_getaffinity") else 0
    if others is not None and others > spare + OTHERS_LIMIT:
        return f"other work used {others:.1f} core(s) of ours while timing"
    if others is None and hasattr(os, "getloadavg") and os.getloadavg()[0] > threads + 1:
        return f"load average {os.getloadavg()[0]:.1f} above the {threads} thread(s) in use"
    spreads = [statistics.quantiles(t, n=4) for t in times if len(t) >= 4]
    worst = max((q[2] / q[0] for q in spreads if q[0] > 0), default=1.0)
    if worst > 1.3:
        return f"a candidate's step times spread {worst:.2f}x between quartiles"
    return None


def measure(load, model: str, device: str, threads: int, candidates=None, log=print, rounds: int = 9) -> dict:
    """Every candidate's vanilla step; ``load(dtype)`` returns a fresh target in that dtype. All are
    compiled first, then timed round-robin (``interleaved_ms``), so a load that comes and goes
    falls on all alike; ``flagged`` says why the machine looked loaded, if it did."""
    ready = []
    for dtype, mode in candidates or CANDIDATES:
        started = time.perf_counter()
        target = load(dtype)
        got, why = apply(target, mode)
        if why or got != mode:
            log(f"engine: {dtype}/{mode} cannot compile here ({why}); left out")
            continue
        ready.append((dtype, mode, target, time.perf_counter() - started))
        log(f"engine: {dtype}/{mode} ready (setup {ready[-1][3]:.0f} s)")
    if not ready:
        raise UsageError("no engine configuration ran on this machine")
    with torch.inference_mode():
        steps = [stepper(target) for _, _, target, _ in ready]
        before, started = _cpu_seconds(), time.perf_counter()
        times = interleaved_ms(steps, rounds, warm=3, sync=device.startswith("cuda"), min_s=2.0)
        others = others_busy(before, _cpu_seconds(), time.perf_counter() - started)
    rows = [{"dtype": d, "compile": m, "step_ms": statistics.median(t), "setup_s": setup, "ms": t}
            for (d, m, _, setup), t in zip(ready, times)]
    for r in rows:
        log(f"engine: {r['dtype']} {r['compile']}: {r['step_ms']:.1f} ms per vanilla step")
    best = min(rows, key=lambda r: r["step_ms"])
    flagged = contention(times, others, threads)
    return {"model": model, "device": device, "threads": threads, "machine": machine_key(model, device, threads),
            "chosen": {"dtype": best["dtype"], "compile": best["compile"]}, "candidates": rows,
            "interleaved_rounds": len(times[0]), "others_cores": others, "flagged": flagged,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": "specharness.model.engine_choice.measure"}


def choose(dtype: str, compile_mode: str, model: str, device: str, threads: int, load,
           options: EngineOptions | None = None) -> EngineConfig:
    """The configuration a run uses: what the flags say, else what ``options.pinned``
    ($SPECHARNESS_ENGINE) says, else the cached measurement (``profile``'s or an earlier one), else
    the table's row for this CPU, else measure now (cached unless flagged: a choice made on a
    loaded machine is redone by the next run)."""
    check_request(dtype, compile_mode)
    if dtype != "auto" and compile_mode != "auto":
        return EngineConfig(dtype, compile_mode, "asked")
    pinned = (options or EngineOptions.from_env()).pinned
    if pinned:
        p_dtype, p_mode = pinned
        return EngineConfig(p_dtype if dtype == "auto" else dtype, p_mode if compile_mode == "auto" else compile_mode,
                            f"${PIN_ENV}")
    record = load_choice(model, device, threads)
    source = "cached"
    if record is None:
        table = from_table(dtype, compile_mode, device, model, threads)
        if table is not None:
            return table
        print("engine: measuring which dtype and compile mode decode fastest on this machine (no known-best row "
              "for this CPU; once, cached; see 'python -m specharness profile')", file=sys.stderr, flush=True)
        wanted = [(d, m) for d, m in CANDIDATES if dtype in ("auto", d) and compile_mode in ("auto", m)]
        record = measure(load, model, device, threads, wanted or None,
                         log=lambda s: print(s, file=sys.stderr, flush=True))
        source = "measured"
        if record["flagged"]:
            print(f"engine: the machine was loaded while measuring ({record['flagged']}); this choice is not "
                  "cached, the next run measures again", file=sys.stderr, flush=True)
        elif len(wanted) == len(CANDIDATES):  # a partial measurement would pass for a full one later
            save_choice(model, device, threads, record)
    rows = [r for r in record["candidates"] if (dtype == "auto" or r["dtype"] == dtype)
            and (compile_mode == "auto" or r["compile"] == compile_mode)]
    if not rows:
        return EngineConfig(dtype if dtype != "auto" else "float32", compile_mode if compile_mode != "auto" else "none",
                            "fallback")
    best = min(rows, key=lambda r: r["step_ms"])
    choice = {"source": source, "by": record.get("by"), "measured": record.get("measured"),
              "why": "the fastest vanilla step measured here" + (" (interleaved)" if "interleaved_rounds" in record
                                                                 else ""),
              **({"flagged": record["flagged"]} if record.get("flagged") else {})}
    return EngineConfig(best["dtype"], best["compile"], source, choice)
