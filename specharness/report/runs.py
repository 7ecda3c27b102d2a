"""Which result file is what, decided from the files alone: labels, baselines, main runs, numbers.

- A *run* is one result file. Its label is the method name plus the options that differ between
  the files of that method (``kangaroo (eta=0.4, gamma=4)``), plus the temperature when files of
  several temperatures are given.
- Its baseline is a ``vanilla`` file with the same model, dtype, device, max_new_tokens and
  temperature; among several, the one from the same command (the same ``compare`` run) and with
  the most shared questions. Speedups are paired over the questions both files hold.
- *Main* runs (Table 1, Figure 1) are, per method and temperature, the files whose options equal
  the method's option defaults as recorded in their header (``option_defaults``), else the files
  whose every option has its most common value, else every file of it. No plugin is imported.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import metrics, stats
from ..errors import UsageError
from ..records import QuestionRecord
from ..results import BASELINE_IDENTITY, iter_result_files, read_results
from ..tasks.specbench import SUBTASKS

SUBTASK_TITLES = {"multi_turn": "MT-bench", "translation": "Translation", "summarization": "Summarization",
                  "qa": "QA", "math_reasoning": "Math", "rag": "RAG"}


@dataclass
class Cell:
    """A run's numbers on one subtask (or 'overall': means over subtasks, as the paper's Avg.)."""

    speedup: stats.Estimate
    cr: stats.Estimate
    n: int
    unstable: int = 0
    tokens_per_s: float = float("nan")


@dataclass
class Run:
    path: Path
    meta: dict
    records: list[QuestionRecord]
    label: str = ""
    short: str = ""  # the label in Table 1 and Figure 1: the method name when it is its only main file
    baseline: "Run | None" = None
    main: bool = False
    cells: dict = field(default_factory=dict, repr=False)  # numbers per subtask, see ``cell``

    @property
    def method(self) -> str:
        return self.meta.get("method", "?")

    @property
    def options(self) -> dict:
        return self.meta.get("options") or {}

    @property
    def temperature(self) -> float:
        return float(self.meta.get("temperature", 0.0) or 0.0)

    @property
    def quick(self) -> bool:
        """Run with ``--engine quick`` (eager, nothing compiled): not comparable with compiled runs."""
        return bool((self.meta.get("engine") or {}).get("quick"))

    @property
    def is_vanilla(self) -> bool:
        return self.method == "vanilla"

    def subset(self, subtask: str | None) -> list[QuestionRecord]:
        return [r for r in self.records if subtask in (None, "overall") or r.subtask == subtask]


QUICK_MARK = "[quick]"
QUICK_NOTE = (f" {QUICK_MARK}: run with --engine quick (eager, nothing compiled); its numbers are not comparable "
              "with compiled runs.")


# ---- loading and grouping ------------------------------------------------------------------
def expand_paths(items: list[str]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = list(iter_result_files(p)) or sorted(
                q for sub in sorted(p.iterdir()) if sub.is_dir() for q in iter_result_files(sub))
            if not found:
                raise UsageError(f"directory '{p}' holds no result files (*.jsonl with a .meta.json)")
            out.extend(found)
        elif p.name.endswith(".meta.json"):
            out.append(p.with_name(p.name[:-len(".meta.json")] + ".jsonl"))
        else:
            out.append(p)
    seen, uniq = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            uniq.append(p)
    return uniq


def load_runs(paths: list[Path]) -> list[Run]:
    runs = []
    for p in paths:
        meta, records = read_results(p)
        if not records:
            print(f"note: {p} holds no question records; left out", file=sys.stderr)
            continue
        runs.append(Run(p, meta, records))
    if not runs:
        raise UsageError("no result file with question records was given")
    return runs


def fmt_value(v: Any) -> str:
    """An option's value in a label: a path by its last part, the empty string (a plugin's "use the
    default", e.g. the shipped checkpoint) as '' rather than nothing."""
    if v == "":
        return "''"
    if isinstance(v, str) and ("/" in v or "\\" in v):
        return Path(v).name or v
    return str(v)


def assign_labels(runs: list[Run]) -> None:
    temps = {r.temperature for r in runs}
    by_method: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_method[r.method].append(r)
    for method, group in by_method.items():
        keys = sorted({k for r in group for k in r.options})
        varying = [k for k in keys if len({json.dumps(r.options.get(k), sort_keys=True) for r in group}) > 1]
        for r in group:
            parts = [f"{k}={fmt_value(r.options.get(k))}" for k in varying]
            if len(temps) > 1:
                parts.append(f"T={r.temperature:g}")
            r.label = method + (f" ({', '.join(parts)})" if parts else "")
    same: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        same[r.label].append(r)
    for group in same.values():  # same method and options twice (two runs): tell them apart by file name,
        if len(group) > 1:  # or by folder and file name where two folders hold files of one name
            by_name = len({r.path.stem for r in group}) == len(group)
            for r in group:
                r.label += f" [{r.path.stem}]" if by_name else f" [{r.path.parent.name}/{r.path.stem}]"


def same_setting(a: Run, b: Run) -> bool:
    """Whether two runs are comparable (the settings a vanilla baseline must share)."""
    return all(a.meta.get(k) == b.meta.get(k) for k in BASELINE_IDENTITY)


def assign_baselines(runs: list[Run]) -> None:
    vanillas = [r for r in runs if r.is_vanilla]
    for r in runs:
        if r.is_vanilla:
            r.baseline = r
            continue
        ids = {q.question_id for q in r.records}
        best, best_key = None, None
        for v in vanillas:
            if not same_setting(v, r):
                continue
            overlap = len(ids & {q.question_id for q in v.records})
            key = (v.meta.get("command") == r.meta.get("command"), overlap)
            if overlap and (best_key is None or key > best_key):
                best, best_key = v, key
        r.baseline = best


def mode(values) -> Any:
    """The most common value (compared as JSON, so lists and dicts count too)."""
    return json.loads(Counter(json.dumps(v, sort_keys=True) for v in values).most_common(1)[0][0])


def _mode_is_unique(values) -> bool:
    top = Counter(json.dumps(v, sort_keys=True) for v in values).most_common(2)
    return len(top) < 2 or top[0][1] > top[1][1]


def assign_main(runs: list[Run]) -> None:
    """Per method and temperature: the files with the recorded default options, else the files
    whose every option has its most common value among that method's files, else all of them."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[(r.method, r.temperature)].append(r)
    for (method, _), group in groups.items():
        if len(group) == 1:
            group[0].main = True
            continue
        chosen = [r for r in group if isinstance(r.meta.get("option_defaults"), dict)
                  and all(r.options.get(k) == v for k, v in r.meta["option_defaults"].items() if k in r.options)]
        if not chosen:
            keys = sorted({k for r in group for k in r.options})
            common = {k: mode(r.options.get(k) for r in group) for k in keys}
            chosen = [r for r in group if all(r.options.get(k) == v for k, v in common.items())]
            if not all(_mode_is_unique(r.options.get(k) for r in group) for k in keys):
                chosen = []  # a tie: no file stands for the method, all are shown
        for r in chosen or group:
            r.main = True
    for r in runs:
        group = groups[(r.method, r.temperature)]
        peers = [x for x in group if x.main]
        r.short = r.label
        if r.main and len(peers) == 1 and (len(group) == 1 or len(peers) < len(group)):
            temps = {x.temperature for x in runs}
            r.short = r.method + (f" (T={r.temperature:g})" if len(temps) > 1 else "")


def select_runs(paths: list[str | Path]) -> list[Run]:
    """Result files -> labelled runs with their baselines and main flags."""
    runs = load_runs(expand_paths([str(p) for p in paths]))
    assign_labels(runs)
    assign_baselines(runs)
    assign_main(runs)
    for r in runs:  # every table shows it, so no quick number passes for a compiled one
        if r.quick:
            r.label, r.short = f"{r.label} {QUICK_MARK}", f"{r.short} {QUICK_MARK}"
    return runs


# ---- numbers ----------------------------------------------------------------------------------
def cell(run: Run, subtask: str | None) -> Cell:
    """A run's numbers for one subtask, computed once and kept on the run itself."""
    key = (subtask, run.baseline.path if run.baseline else None, len(run.records))
    if key not in run.cells:
        run.cells[key] = _cell(run, subtask)
    return run.cells[key]


def _cell(run: Run, subtask: str | None) -> Cell:
    recs = run.subset(subtask)
    unstable = len(stats.unstable_timings(recs).unstable)
    if subtask in (None, "overall"):
        present = [s for s in SUBTASKS if run.subset(s)]
        if run.baseline is not None:
            sp = stats.mean_speedup_ci([stats.pair(run.subset(s), run.baseline.records) for s in present])
        else:
            sp = stats.NAN_ESTIMATE
        cr = stats.mean_cr_ci([run.subset(s) for s in present])
        base_unstable = len(stats.unstable_timings(run.baseline.records).unstable) if run.baseline else 0
    else:
        sp = (stats.speedup_ci(stats.pair(recs, run.baseline.records)) if run.baseline is not None
              else stats.NAN_ESTIMATE)
        cr = stats.cr_ci(recs)
        base_unstable = (len(stats.unstable_timings(run.baseline.subset(subtask)).unstable)
                         if run.baseline else 0)
    if run.is_vanilla:
        sp = stats.Estimate(1.0, 1.0, 1.0, len(recs), "baseline")
        base_unstable = 0
    return Cell(sp, cr, len(recs), unstable + base_unstable, metrics.throughput(recs))


def subtasks_present(runs: list[Run]) -> list[str]:
    return [s for s in SUBTASKS if any(r.subset(s) for r in runs)]


def fmt_params(r: Run) -> str:
    """Parameters the method adds to the target (and their share of it), from the run header."""
    extra, tp = r.meta.get("extra_params"), r.meta.get("target_params")
    if not isinstance(extra, (int, float)):
        return "-"
    if not extra:
        return "0"
    share = f" ({100 * extra / tp:.2f}%)" if tp else ""
    return f"{extra / 1e6:.2f}M{share}"


def fmt_speedup(c: Cell) -> str:
    s = "1.00×" if c.speedup.method == "baseline" else c.speedup.fmt(2, "×")
    return s + ("†" if c.unstable else "")


def fmt_cr(c: Cell) -> str:
    return f"{c.cr.value:.2f}" if math.isfinite(c.cr.value) else "-"
