"""Clocks that tell the truth on every device: on CUDA, kernels run asynchronously, so a reading
is only meaningful after the device has finished the queued work."""

from __future__ import annotations

from time import perf_counter
from typing import Callable

import torch

from .records import Round


def clock_for(device: torch.device | str) -> Callable[[], float]:
    """perf_counter on CPU; synchronise-then-perf_counter on CUDA."""
    if torch.device(device).type == "cuda":
        def cuda_clock() -> float:
            torch.cuda.synchronize()
            return perf_counter()
        return cuda_clock
    return perf_counter


def instrumentation_cost_s(device: torch.device | str = "cpu", n: int = 2000) -> float:
    """Seconds per round that the engine's own timing breakdown costs: four clock reads, one
    Round record and one observer call (a no-op: observers never see made-up rounds), repeated
    ``n`` times and averaged. Result headers keep it so reports can show it as a share of the mean
    round time (it must stay under 2%)."""
    clock = clock_for(device)
    def observe(rec: Round) -> None:  # the call an observer costs, not its work
        pass

    start = perf_counter()
    for _ in range(n):
        t0 = clock()
        t1 = clock()
        t2 = clock()
        t3 = clock()
        observe(Round(1, 0, t1 - t0, t2 - t1, t3 - t2))
    return (perf_counter() - start) / n
