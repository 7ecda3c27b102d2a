"""Progress you can trust while graphs compile: which graph, how many are left, and how long the
rest took before. Compiling can take minutes a graph; a bar that only counts seconds says
nothing about when timing starts. Each graph's seconds are kept in the cache beside the engine
choice (``cache_root()/engine/``), keyed by machine, dtype and mode, so a later run with the same
engine knows which graphs are coming and what they cost: the seconds it took to build (compile)
and, apart, to load from the graph store. A run's graphs go one way (the store's key holds the code,
torch and the CPU), so the rest are estimated from the times of the way the current graph goes: a
store emptied or outdated after runs that loaded in 1 s no longer promises "5 s to go" for builds
of minutes. The file is read once per process, before anything compiles (``read_times``): a run's
own first graphs, saved when its compile check ends, must not pass for an earlier run's whole set
in its warm-up.
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


KINDS = ("builds", "loads")  # seconds to build a graph, to load its stored package (files before
# builds and loads were told apart hold "graphs", a mix of both: ignored)


def read_times(path: Path) -> dict[str, dict[str, float]]:
    """Earlier runs' seconds per graph: ``{"builds": build seconds, "loads": load seconds}`` (empty
    when there are none or the file is unreadable: that only costs the estimate)."""
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
        return {kind: {str(g): float(s) for g, s in dict(data.get(kind, {})).items()} for kind in KINDS}
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return {kind: {} for kind in KINDS}


class CompileProgress:
    """An ``on_new_graph`` observer: ``say`` gets one line per graph compiled, with the graphs left
    and an estimate from earlier runs' times (``last``: what ``read_times`` gave before this
    process compiled anything); ``save()`` merges this run's times into the store."""

    def __init__(self, backend, path: Path, say: Callable[[str], None],
                 last: dict[str, dict[str, float]] | None = None) -> None:
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
        expected = {g for kind in KINDS for g in self.last[kind]}
        if expected:
            todo = [g for g in expected if g not in done]
            left = len([g for g in todo if g != graph_id(key)])
            way, jobs = ("load", 1) if self.backend.loading else ("build", self.backend.build_jobs)
            times = self.last[way + "s"]
            known = [times[g] for g in todo if g in times]
            line += f", {left} more expected"
            line += (f", about {sum(known) / jobs:.0f} s to go (earlier runs' {way} times)" if known
                     else f" ({way}ing: no time measured here yet)")
        else:
            line += ", no estimate yet (first compile of this engine here)"
        self.say(f"{line}; {time.perf_counter() - self.started:.0f} s so far")

    def built(self, key, seconds: float, left: int) -> None:
        """A background build ended (``on_graph_built``): which, how long it took, how many are still awaited."""
        self.say(f"graph built ({key.describe()}) in {seconds:.0f} s; {left} more to wait for; "
                 f"{time.perf_counter() - self.started:.0f} s so far")

    def save(self) -> None:
        """Keep every graph's build and load seconds for the next run (a graph not built, or not
        loaded, now keeps its old time of that kind)."""
        now = {"builds": self.backend.compile_times, "loads": self.backend.load_times}
        if not any(now.values()):
            return
        merged = {kind: {**self.last[kind], **{graph_id(k): s for k, s in now[kind].items()}} for kind in KINDS}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(merged, indent=1))
