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


class RoundTimer:
    """The engine's clock: marks within each round (start, drafted, verified, accepted) and the
    generation's wall time. On CPU the marks are perf_counter readings. On CUDA they are events
    recorded on the stream, read once per round after its last mark, so timing adds no host sync
    of its own; the wall time synchronises at the end."""

    def __init__(self, device: torch.device | str) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.clock = clock_for(device)
        self.started = self.clock()
        self.marks: list = [self._now()]

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return perf_counter()

    def start(self) -> None:
        self.marks = [self._now()]

    def mark(self) -> None:
        self.marks.append(self._now())

    def _seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def split(self, prefill: bool = False) -> tuple[float, float, float]:
        """(draft, verify, accept) seconds of the round just marked (a prefill has no draft)."""
        if self.cuda:
            self.marks[-1].synchronize()
        m = self.marks if not prefill else [self.marks[0], *self.marks]
        return tuple(self._seconds(a, b) for a, b in zip(m, m[1:]))  # type: ignore[return-value]

    def total(self) -> float:
        return self.clock() - self.started


def instrumentation_cost_s(device: torch.device | str = "cpu", n: int = 2000) -> float:
    """Seconds per round that the engine's own timing breakdown costs: four clock reads (on CUDA,
    the four events ``RoundTimer`` records and the one wait for them), one Round record and one
    observer call (a no-op: observers never see made-up rounds), repeated
    ``n`` times and averaged. Result headers keep it so reports can show it as a share of the mean
    round time (it must stay under 2%)."""
    def observe(rec: Round) -> None:  # the call an observer costs, not its work
        pass

    if torch.device(device).type == "cuda":  # what RoundTimer does there: events, one wait per round
        timer = RoundTimer(device)
        start = perf_counter()
        for _ in range(n):
            timer.start()
            timer.mark()
            timer.mark()
            timer.mark()
            observe(Round(1, 0, *timer.split()))
        return (perf_counter() - start) / n
    clock = clock_for(device)
    start = perf_counter()
    for _ in range(n):
        t0 = clock()
        t1 = clock()
        t2 = clock()
        t3 = clock()
        observe(Round(1, 0, t1 - t0, t2 - t1, t3 - t2))
    return (perf_counter() - start) / n
