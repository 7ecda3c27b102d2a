"""The run's own width curve: what a verification forward costs at each compiled width, measured
after warm-up in the run's process, and the route that runs a forward at a wider graph when that one
is faster.

Why: on a CPU, max-autotune's kernel choices vary between compiles. On a 2-core EPYC the whole
model's width-2 graph (vanilla's padded step there) took 10.6 ms in one compile, beside 16.9 ms at
width 8 (``results/smollm2-cpu-epyc-profile-v7``), and 15.4 ms in another, beside 11.5 ms at width 8
(``results/smollm2-cpu-epyc-budget``). A speedup measured against the slower step is inflated by what
padding to the faster graph would have saved, so the engine pads to it (``TargetModel.forward``).
"""

from __future__ import annotations

import statistics
from time import perf_counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import TargetModel

FASTER = 0.9  # a wider graph is taken when it runs at <= 90% of the narrower one's time


def choose_route(curve: dict[int, float], faster: float = FASTER) -> dict[int, int]:
    """Width -> the wider measured width to run instead, where that one took <= ``faster`` of its time."""
    route = {}
    for w in curve:
        best = min((v for v in curve if v >= w), key=lambda v: (curve[v], v))
        if best != w and curve[best] <= faster * curve[w]:
            route[w] = best
    return route


def verify_seconds(target: "TargetModel", layer: int, widths: list[int], reps: int = 5,
                   context: int = 256) -> dict[int, float]:
    """Median seconds of a verification forward (layers [layer, L) with the head, at ``context``, or as
    near as the target's context allows) at each width, timed round-robin so drift falls on every width
    alike; the first pass of each warms it."""
    import torch  # here: the summary reads this module's threshold without loading torch
    # a routed verification runs at its route's wider width (padding rows write cache slots too)
    room = max(max(widths), *((getattr(target.backend, "route", None) or {}).get(w, w) for w in widths))
    context = max(0, min(context, target.max_context - room))
    times: dict[int, list[float]] = {w: [] for w in widths}
    with torch.inference_mode():  # the engine's tensors are inference tensors, and compiled graphs guard on that
        cache = target.new_cache(context + room)
        for rep in range(reps + 1):
            for w in widths:
                x = (torch.zeros(w, dtype=torch.long, device=target.device) if layer == 0 else
                     torch.zeros(w, target.hidden_size, dtype=target.dtype, device=target.device))
                cache.crop(0)
                cache.lengths[:] = [context] * len(cache.lengths)
                start = perf_counter()
                target.forward(x, cache, context, layer, head=True)
                if target.device.type == "cuda":
                    torch.cuda.synchronize()
                if rep:
                    times[w].append(perf_counter() - start)
    return {w: statistics.median(s) for w, s in times.items()}
