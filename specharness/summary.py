"""The per-subtask table that ends every run: tokens/s, mean accepted tokens, speedup vs vanilla."""

from __future__ import annotations

from pathlib import Path

from . import metrics
from .results import BASELINE_IDENTITY, iter_result_files, read_results
from tasks.specbench import SUBTASKS


def find_baseline(path: Path, meta: dict, candidates: list[Path]) -> list[dict] | None:
    """Vanilla records for the same model and settings: from this run, else beside the file."""
    pool = [p for p in candidates if p != path] + [p for p in iter_result_files(path.parent) if p not in candidates]
    for p in pool:
        other, records = read_results(p)
        if other.get("method") == "vanilla" and all(other.get(k) == meta.get(k) for k in BASELINE_IDENTITY):
            return records
    return None


def summary_rows(paths: list[Path], questions: list | None = None) -> list[dict]:
    rows = []
    for path in paths:
        meta, records = read_results(path)
        if questions is not None:
            wanted = set(questions)
            records = [r for r in records if r["question_id"] in wanted]
        base = None if meta.get("method") == "vanilla" else find_baseline(path, meta, paths)
        for sub in (*SUBTASKS, "overall"):
            recs = [r for r in records if sub == "overall" or r.get("subtask") == sub]
            if not recs:
                continue
            rows.append({
                "method": meta["method"], "subtask": sub, "questions": len(recs),
                "tokens_per_s": metrics.throughput(recs), "cr": metrics.compression_rate(recs),
                "speedup": metrics.speedup(recs, base) if base else (1.0 if meta["method"] == "vanilla" else None),
            })
    return rows


def print_summary(paths: list[Path], questions: list | None = None) -> None:
    rows = summary_rows(paths, questions)
    print(f"\n{'method':22s} {'subtask':15s} {'n':>4s} {'tokens/s':>9s} {'mean acc.':>9s} {'speedup':>8s}")
    for r in rows:
        sp = f"{r['speedup']:.3f}x" if r["speedup"] is not None else "   -"
        print(f"{r['method']:22s} {r['subtask']:15s} {r['questions']:4d} {r['tokens_per_s']:9.2f} "
              f"{r['cr']:9.3f} {sp:>8s}")
    if any(r["speedup"] is None for r in rows):
        print("(speedup needs a vanilla result with the same model and settings: run --method vanilla "
              "or use 'compare --methods vanilla,...')")
    for p in paths:
        print(f"results: {p}")
