"""Which dtype and compile mode the engine runs in: the fastest vanilla on the machine at hand,
measured, never assumed, and recorded in every result header.

Candidates are float32 and bfloat16, each eager or compiled (inductor ``default``; bfloat16 also
``max-autotune``, whose GEMM templates are picked per shape by benchmarking). ``choose`` returns
the cached choice for this model, machine and thread count, or measures every candidate's vanilla
decoding step (one token at a ~256-token context, after compiling) and caches the fastest with all
the timings (``cache_root()/engine/``). ``python -m specharness profile`` measures much more
(width curves, drafters, the roofline) and updates the same choice.
"""

from __future__ import annotations

import json
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
                   sync: bool = False) -> list[list[float]]:
    """Each ``(call, after)``'s ms per round, timed round-robin with the start rotating per round
    (A B C, B C A, ...): load that comes and goes falls on every candidate alike, where timing them
    one after another would hand it all to whichever ran then."""
    times: list[list[float]] = [[] for _ in steps]
    for r in range(warm + rounds):
        for k in range(len(steps)):
            i = (r + k) % len(steps)
            call, after = steps[i]
            seconds = call_seconds(call, sync)
            after()
            if r >= warm:
                times[i].append(1e3 * seconds)
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
    target.forward(ids, cache, 0, head=True, prefill=True)
    return (lambda: target.forward(ids[:width], cache, context, head=True)), (lambda: cache.crop(context))


def step_ms(target, context: int = 256, width: int = 1, repeats: int = 15) -> float:
    """Median ms of one forward over ``width`` positions after ``context`` cached ones (compiles
    first). On CUDA the warm calls also let CUDA graph trees warm up and record, so the timed calls
    are replays."""
    with torch.inference_mode():
        call, after = stepper(target, context, width)
        return median_ms(call, repeats, warm=3, after=after, sync=target.device.type == "cuda")


QUICK_DTYPES = ("float32", "bfloat16")
NOT_COMPARABLE = "eager, nothing compiled: not comparable with compiled runs"


def quick(dtype: str, load, rounds: int = 5, context: int = 256, log=print) -> tuple[EngineConfig, object]:
    """``--engine quick``: no compile, the faster eager dtype, by a few interleaved eager steps
    (seconds, not the minutes of compiling), for iterating on a drafter. Returns the configuration
    and its target, loaded once; an explicit ``dtype`` is taken as asked."""
    if dtype not in DTYPE_CHOICES:
        raise UsageError(f"unknown --dtype '{dtype}'; choose one of {', '.join(DTYPE_CHOICES)}")
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


def apply(target, mode: str) -> tuple[str, str | None]:
    """Switch ``target`` to ``mode``; a compile that fails falls back to eager with a reason."""
    if mode == "none":
        target.compile("none")
        return "none", None
    try:
        target.compile(mode)
        step_ms(target, context=16, repeats=1)  # compiles now: a failure shows here, not mid-run
        return mode, None
    except UsageError:
        raise
    except Exception as exc:  # no compiler, unsupported op...: eager still works
        target.compile("none")
        return "none", exception_line(exc)


def measure(load, model: str, device: str, threads: int, candidates=None, log=print) -> dict:
    """Every candidate's vanilla step; ``load(dtype)`` returns a fresh target in that dtype."""
    rows = []
    for dtype, mode in candidates or CANDIDATES:
        started = time.perf_counter()
        target = load(dtype)
        got, why = apply(target, mode)
        if why or got != mode:
            log(f"engine: {dtype}/{mode} cannot compile here ({why}); left out")
            continue
        ms = step_ms(target)
        rows.append({"dtype": dtype, "compile": mode, "step_ms": ms, "setup_s": time.perf_counter() - started})
        log(f"engine: {dtype} {mode}: {ms:.1f} ms per vanilla step (setup {time.perf_counter() - started:.0f} s)")
    if not rows:
        raise UsageError("no engine configuration ran on this machine")
    best = min(rows, key=lambda r: r["step_ms"])
    return {"model": model, "device": device, "threads": threads, "machine": machine_key(model, device, threads),
            "chosen": {"dtype": best["dtype"], "compile": best["compile"]}, "candidates": rows,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": "specharness.model.engine_choice.measure"}


def choose(dtype: str, compile_mode: str, model: str, device: str, threads: int, load,
           options: EngineOptions | None = None) -> EngineConfig:
    """The configuration a run uses: what the flags say, else what ``options.pinned``
    ($SPECHARNESS_ENGINE) says, else the cached measurement, else measure now."""
    if dtype not in DTYPE_CHOICES:
        raise UsageError(f"unknown --dtype '{dtype}'; choose one of {', '.join(DTYPE_CHOICES)}")
    if compile_mode not in COMPILE_CHOICES:
        raise UsageError(f"unknown --compile '{compile_mode}'; choose one of {', '.join(COMPILE_CHOICES)}")
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
        print("engine: measuring which dtype and compile mode decode fastest on this machine (once; "
              "cached, see 'python -m specharness profile')", file=sys.stderr, flush=True)
        record = measure(load, model, device, threads, log=lambda s: print(s, file=sys.stderr, flush=True))
        save_choice(model, device, threads, record)
        source = "measured"
    rows = [r for r in record["candidates"] if (dtype == "auto" or r["dtype"] == dtype)
            and (compile_mode == "auto" or r["compile"] == compile_mode)]
    if not rows:
        return EngineConfig(dtype if dtype != "auto" else "float32", compile_mode if compile_mode != "auto" else "none",
                            "fallback")
    best = min(rows, key=lambda r: r["step_ms"])
    return EngineConfig(best["dtype"], best["compile"], source)

