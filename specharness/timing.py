"""Clocks that tell the truth on every device: on CUDA, kernels run asynchronously, so a reading
is only meaningful after the device has finished the queued work."""

from __future__ import annotations

from time import perf_counter
from typing import Callable

import torch


def clock_for(device: torch.device | str) -> Callable[[], float]:
    """perf_counter on CPU; synchronise-then-perf_counter on CUDA."""
    if torch.device(device).type == "cuda":
        def cuda_clock() -> float:
            torch.cuda.synchronize()
            return perf_counter()
        return cuda_clock
    return perf_counter
