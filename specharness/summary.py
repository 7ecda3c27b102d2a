"""The per-subtask table that ends every run: tokens/s, mean accepted tokens (CR) and speedup vs
vanilla, each with a 95% bootstrap interval over questions (``stats.py``), and a flag on every
row whose timed repeats varied by more than 10% (coefficient of variation) on some question."""

from __future__ import annotations

from pathlib import Path

from . import metrics, stats
from .records import QuestionRecord
from .results import BASELINE_IDENTITY, iter_result_files, read_meta, read_results
from .tasks.specbench import SUBTASKS
from .width_curve import FASTER


def find_baseline(path: Path, meta: dict, candidates: list[Path]) -> list[QuestionRecord] | None:
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
            records = [r for r in records if r.question_id in wanted]
        base = None if meta.get("method") == "vanilla" else find_baseline(path, meta, paths)
        for sub in (*SUBTASKS, "overall"):
            recs = [r for r in records if sub == "overall" or r.subtask == sub]
            if not recs:
                continue
            if base:
                if sub == "overall":  # the paper's Avg.: mean of the subtask speedups
                    strata = [stats.pair([r for r in recs if r.subtask == t], base) for t in SUBTASKS]
                    sp = stats.mean_speedup_ci(strata)
                else:
                    sp = stats.speedup_ci(stats.pair(recs, base))
            elif meta["method"] == "vanilla":
                sp = stats.Estimate(1.0, 1.0, 1.0, len(recs), "baseline")
            else:
                sp = None
            stab = stats.unstable_timings(recs)
            ids = {r.question_id for r in recs}
            base_stab = stats.unstable_timings([r for r in base if r.question_id in ids]) if base else None
            rows.append({
                "method": meta.get("label") or meta["method"], "subtask": sub, "questions": len(recs),
                "tokens_per_s": metrics.throughput(recs), "cr": metrics.compression_rate(recs),
                "speedup": sp.value if sp else None, "speedup_ci": sp, "cr_ci": stats.cr_ci(recs),
                "repeats": stab.repeats, "unstable": len(stab.unstable), "max_cv": stab.max_cv,
                "unstable_ids": stab.unstable,
                "baseline_unstable": len(base_stab.unstable) if base_stab else 0,
                # vanilla from the files beside it, not timed beside every record of this file, as its
                # header says (``results.merge_compared``; older headers do not say)
                "baseline_elsewhere": bool(base) and meta.get("compared_with") is not None
                and "vanilla" not in meta["compared_with"],
            })
    return rows


def print_summary(paths: list[Path], questions: list | None = None) -> None:
    rows = summary_rows(paths, questions)
    w = max([22, *(len(r["method"]) for r in rows)])
    print(f"\n{'method':{w}s} {'subtask':15s} {'n':>4s} {'tokens/s':>9s} {'CR [95% CI]':>20s} "
          f"{'speedup [95% CI]':>24s}  timing")
    for r in rows:
        sp = r["speedup_ci"].fmt(3, "x") if r["speedup_ci"] is not None else "-"
        if r["unstable"] or r["baseline_unstable"]:
            flag = f"UNSTABLE {r['unstable']}/{r['questions']} (max CV {r['max_cv']:.0%})"
            if r["baseline_unstable"]:
                flag += f", its vanilla {r['baseline_unstable']}/{r['questions']}"
        else:
            flag = "ok" if r["repeats"] > 1 else "1 repeat"
        print(f"{r['method']:{w}s} {r['subtask']:15s} {r['questions']:4d} {r['tokens_per_s']:9.2f} "
              f"{r['cr_ci'].fmt(3):>20s} {sp:>24s}  {flag}")
    print("speedup: throughput ratio vs vanilla on the same questions, 95% paired BCa bootstrap over "
          "questions; 'overall' = mean of the subtask speedups (stratified bootstrap).")
    if any(r["unstable"] or r["baseline_unstable"] for r in rows):
        print(f"UNSTABLE: some questions' timed repeats vary by more than {stats.CV_LIMIT:.0%} "
              "(coefficient of variation); their median is used, but the machine was noisy: rerun "
              "on a quieter machine or with more --repeats before trusting those rows.")
    if any(r["questions"] < stats.MIN_QUESTIONS and r["method"] != "vanilla" for r in rows):
        print(f"(rows with fewer than {stats.MIN_QUESTIONS} questions: their intervals are rough, a bootstrap "
              "cannot say much about so few questions; use a larger --limit)")
    if rows and all(r["repeats"] <= 1 for r in rows):
        print("(one timed repeat per question: timing stability cannot be checked; use --repeats 3)")
    if any(r["speedup_ci"] is None for r in rows):
        print("(speedup needs a vanilla result with the same model and settings: run --method vanilla "
              "or use 'compare --methods vanilla,...')")
    elsewhere = sorted({r["method"] for r in rows if r["baseline_elsewhere"]})
    if elsewhere:
        print(f"note: {', '.join(elsewhere)} ran without vanilla on some or all of its questions: its speedup is "
              "partly against vanilla timed in an earlier run with the same settings (the file beside it), not "
              "interleaved with it, and a machine's speed moves "
              "between runs (vanilla's step 14% cheaper from one table to the next: n10-v11, n10-v12); for a ratio "
              "from one run use 'compare --methods vanilla,METHOD'")
    for note in (narrow_step_note(paths), unstored_note(paths)):
        if note:
            print(note)
    for p in paths:
        print(f"results: {p}")


def narrow_step_note(paths: list[Path]) -> str | None:
    """One line when this run's compile made a wider verification graph faster than a narrower one (the
    header's ``warmup.verify_ms_by_width``): the engine then ran those forwards on the wider graph,
    vanilla's step among them (``warmup.route``), or, where it could not, every speedup is against the
    slower step."""
    for path in paths:
        warm = read_meta(path).get("warmup") or {}
        curve = {int(w): ms for w, ms in (warm.get("verify_ms_by_width") or {}).items()}
        if len(curve) < 2:
            continue
        route = {int(w): int(r) for w, r in (warm.get("route") or {}).items()}
        narrow = min(curve)
        wide = route.get(narrow) or min((w for w in curve if w > narrow), key=curve.__getitem__)
        said = (f"note: in this compile a verification of {wide} positions took {curve[wide]:.1f} ms, less than one of "
                f"{narrow} ({curve[narrow]:.1f} ms; max-autotune's kernel choice): ")
        if route:
            return said + ("forwards of " + ", ".join(f"{w} -> {r}" for w, r in sorted(route.items())) +
                           " positions ran padded to the faster graph, vanilla's step too (header: warmup.route)")
        if curve[wide] <= FASTER * curve[narrow]:
            return said + "every speedup here is against the slower step (header: warmup.verify_ms_by_width)"
        return None
    return None


def unstored_note(paths: list[Path]) -> str | None:
    """One line when graphs of this run could not be kept as graph store packages (the header's
    ``warmup.graphs_not_stored``): they ran through torch.compile instead, which every later run
    compiles again, and which ran ~1 ms a forward slower than a package on a 2-core EPYC
    (results/smollm2-cpu-epyc-narrow-build). Silent, such failures once went unnoticed for two tables."""
    failed: dict[str, str] = {}
    for path in paths:
        failed.update((read_meta(path).get("warmup") or {}).get("graphs_not_stored") or {})
    if not failed:
        return None
    graph, why = next(iter(failed.items()))
    return (f"note: {len(failed)} graph(s) could not be kept in the graph store (e.g. {graph}: {why}); they ran "
            "through torch.compile, slower than a package here, and compile again in every run "
            "(header: warmup.graphs_not_stored)")
