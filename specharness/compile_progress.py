"""Progress you can trust while graphs compile: which graph, how many are left, and how long the
rest took before. Compiling can take minutes a graph; a bar that only counts seconds says
nothing about when timing starts. Each graph's compile seconds are kept in the cache beside the
engine choice (``cache_root()/engine/``), keyed by machine, dtype and mode, so a later run with
the same engine knows which graphs are coming and what they cost. The store is read once per
process, before anything compiles (``read_times``): a run's own first graphs, saved when its
compile check ends, must not pass for an earlier run's whole set in its warm-up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from .paths import cache_root, write_text_atomic


def graph_id(key: tuple) -> str:
    """A graph key as stored: every field, so graphs that differ only in what they capture differ."""
    return "|".join(map(str, key))


def times_file(machine: str, dtype: str, mode: str) -> Path:
    """Where one engine's per-graph compile seconds are kept (``machine``: ``engine_choice.machine_key``)."""
    return cache_root() / "engine" / f"{machine}-{dtype}-{mode}.compile.json"


def read_times(path: Path) -> dict[str, float]:
    """Earlier runs' compile seconds per graph ({} when none, or the store is unreadable: that
    only costs the estimate)."""
    try:
        return dict(json.loads(path.read_text())["graphs"]) if path.is_file() else {}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return {}


class CompileProgress:
    """An ``on_new_graph`` observer: ``say`` gets one line per graph compiled, with the graphs left
    and an estimate from earlier runs' times (``last``: what ``read_times`` gave before this
    process compiled anything); ``save()`` merges this run's times into the store."""

    def __init__(self, backend, path: Path, say: Callable[[str], None], last: dict[str, float] | None = None) -> None:
        self.backend, self.path, self.say = backend, path, say
        self.started = time.perf_counter()
        self.last = read_times(path) if last is None else last

    def __call__(self, key) -> None:
        done = {graph_id(k) for k in self.backend.graphs}
        n = len(self.backend.graphs) + 1
        # a stored package loads; one built in the background runs eagerly until warm-up waits for it
        verb = "loading" if self.backend.loading else "building" if self.backend.background else "compiling"
        line = f"{verb} graph {n} ({key.describe()})"
        if self.backend.background:
            line += f" in the background ({self.backend.build_jobs} at a time)"
        if self.last:
            todo = [g for g in self.last if g not in done]
            left = len([g for g in todo if g != graph_id(key)])
            line += (f", {left} more expected, about {sum(self.last[g] for g in todo) / self.backend.build_jobs:.0f} s "
                     "to go (earlier runs' times)")
        else:
            line += ", no estimate yet (first compile of this engine here)"
        self.say(f"{line}; {time.perf_counter() - self.started:.0f} s so far")

    def built(self, key, seconds: float, left: int) -> None:
        """A background build ended (``on_graph_built``): which, how long it took, how many are still awaited."""
        self.say(f"graph built ({key.describe()}) in {seconds:.0f} s; {left} more to wait for; "
                 f"{time.perf_counter() - self.started:.0f} s so far")

    def save(self) -> None:
        """Keep every graph's compile seconds for the next run (a graph not compiled now keeps its old time)."""
        if not self.backend.compile_times:
            return
        merged = {**self.last, **{graph_id(k): s for k, s in self.backend.compile_times.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps({"graphs": merged}, indent=1))
