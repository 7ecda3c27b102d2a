"""A run's result files: where each method's goes, its header, resume and the vanilla baseline,
and the observer that writes every finished question.

The default location (``results/runs/<model>/``) is a store of results by method and settings:
a file there is continued (finished questions skipped) unless ``--overwrite``; a file the user
named must be asked to resume. A run that needs a vanilla baseline uses a vanilla file beside it
with the same settings, resumed if it lacks questions, or adds vanilla to the run, interleaved.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .hookspecs import hookimpl
from .results import ResultWriter, iter_result_files, provenance, read_results, same_baseline
from .tasks.specbench import sha256_of

if TYPE_CHECKING:
    from .runner import Method
    from .session import RunPlan, Session

RESULTS_DIR = Path("results") / "runs"


def default_name(method: "Method", settings, target) -> str:
    """``<method>[-options]-<dtype>[-<mode>|-quick]-temp<T>-n<N>.jsonl``: a quick run never continues
    (or is continued by) a file of another engine choice."""
    opts = "".join(f"-{k}={Path(str(v)).name}" for k, v in sorted(method.changed.items()))
    mode = target.engine["compile"]
    engine = target.engine["dtype"] + ("" if mode == "none" else f"-{mode}")
    engine += "-quick" if target.engine.get("quick") else ""
    return f"{method.name}{opts}-{engine}-temp{settings.temperature:g}-n{settings.max_new_tokens}.jsonl"


def header(plan: "RunPlan", session: "Session", m: "Method", compared_with: list[str]) -> dict:
    """How one method's results were produced: everything a rerun needs."""
    target, s = session.target, plan.settings
    return provenance(model=target.name, model_source=target.source, dtype=target.engine["dtype"],
                      compile=target.engine["compile"], engine=target.engine, device=plan.engine.device,
                      device_name=session.hardware()["device"],
                      threads=session.threads, method=m.name, label=m.label, options=m.options,
                      option_defaults=m.defaults, options_changed=m.changed, verifier=m.verifier,
                      max_new_tokens=s.max_new_tokens, temperature=s.temperature, seed=s.seed, repeats=s.repeats,
                      warmup=s.warmup, question_file=str(plan.source.path), question_source=plan.source.origin,
                      questions_sha256=sha256_of(plan.source.path), extra_params=m.extra_params,
                      drafter_info=m.info, target_params=target.n_parameters, target_layers=target.n_layers,
                      compared_with=compared_with)


def vanilla_baseline(directory: Path, meta: dict, questions: list, name: str) -> tuple[Path, bool]:
    """The vanilla result file for a run's baseline: (path, whether it already holds every question).

    A file in ``directory`` whose header matches this run's settings (``results.same_baseline``) is
    used, resumed if it lacks questions; otherwise a new file under ``name``. A file of that name
    with other settings is never overwritten: the run stops and says what to do.
    """
    wanted = {q.question_id for q in questions}
    best: tuple[Path, int] | None = None
    for p in iter_result_files(directory):
        other, records = read_results(p)
        if other.get("method") == "vanilla" and not other.get("options") and same_baseline(other, meta):
            have = len(wanted & {r.question_id for r in records})
            if best is None or have > best[1]:
                best = (p, have)
    if best:
        return best[0], best[1] == len(wanted)
    path = directory / name
    if path.exists():
        raise UsageError(f"{path} holds vanilla results with other settings (threads, seed, question file...); "
                         "rerun with those settings, move the file, or pass --baseline none")
    return path, False


class ResultFiles:
    """One result file per method of a run, and the observer that appends each finished question
    to its method's file (and moves the progress bar)."""

    def __init__(self, methods: list["Method"], writers: dict[str, ResultWriter], summary_paths: list[Path],
                 hardware: dict) -> None:
        self.methods = methods  # what runs, the vanilla baseline included when it was added
        self.writers = writers  # by method label
        self.summary_paths = summary_paths  # the files the closing summary reads (a found baseline too)
        self.hardware = hardware
        self.truncated = 0
        self.bar = None  # a tqdm bar, set by the caller

    @property
    def paths(self) -> list[Path]:
        return [w.path for w in self.writers.values()]

    @property
    def done(self) -> dict[str, set]:
        return {label: w.done for label, w in self.writers.items()}

    @classmethod
    def open(cls, plan: "RunPlan", session: "Session", methods: list["Method"]) -> "ResultFiles":
        target, s = session.target, plan.settings
        if plan.out:
            paths = {methods[0].label: plan.out}
        else:
            base = plan.out_dir or RESULTS_DIR / target.name
            paths = {m.label: base / default_name(m, s, target) for m in methods}
        if len(set(paths.values())) != len(paths):
            raise UsageError("two entries of --methods resolve to the same method and options; drop one")
        labels = [m.label for m in methods]
        store = not plan.out and not plan.out_dir
        resume = {m.label: plan.resume or (store and paths[m.label].exists()) for m in methods}
        overwrite = {m.label: plan.overwrite for m in methods}
        for m in methods:
            if store and resume[m.label] and not plan.resume and not plan.overwrite:
                print(f"continuing {paths[m.label]} (finished questions are kept; --overwrite starts again)",
                      file=sys.stderr)
        summary_paths = list(paths.values())
        methods = list(methods)
        if plan.baseline == "vanilla" and methods[0].name != "vanilla":
            vanilla = session.method("vanilla", [], s.temperature, plan.verifier)
            found, holds_all = vanilla_baseline(paths[methods[0].label].parent, header(plan, session, vanilla, labels),
                                                plan.questions, default_name(vanilla, s, target))
            summary_paths.insert(0, found)
            if holds_all:
                print(f"baseline: vanilla results with the same settings in {found}", file=sys.stderr)
            else:
                methods.insert(0, vanilla)
                paths[vanilla.label] = found
                resume[vanilla.label], overwrite[vanilla.label] = found.exists(), False
                print(f"baseline: vanilla runs on the same questions, interleaved, into {found} "
                      "(--baseline none to skip it)", file=sys.stderr)
        compared = [m.label for m in methods]
        writers = {m.label: ResultWriter(paths[m.label], header(plan, session, m, compared), resume=resume[m.label],
                                         overwrite=overwrite[m.label]) for m in methods}
        held = {label: set(w.done) for label, w in writers.items()}  # a question a file holds runs without it
        for label, w in writers.items():
            w.held_beside = {other: ids for other, ids in held.items() if other != label}
        return cls(methods, writers, summary_paths, session.hardware())

    def kept(self) -> str:
        """What an interrupted or failed run leaves, and how to go on from it."""
        if not any(w.done for w in self.writers.values()):
            return "no question had finished, so nothing was kept; rerun the same command to start again"
        return (f"finished questions are saved in {', '.join(str(p) for p in self.paths)}; rerun the same command "
                "with --resume to continue")

    def pending(self, questions: list) -> int:
        """Answers still to run: (question, method) pairs no file holds yet."""
        return sum(q.question_id not in self.writers[m.label].done for q in questions for m in self.methods)

    @hookimpl
    def specharness_question_done(self, result) -> None:
        result.worker = result.worker or self.hardware
        self.writers[result.method].append(result)
        self.truncated += sum(result.truncated)
        if self.bar is not None:
            toks = sum(len(g.token_ids) for g in result.generations)
            secs = sum(g.wall_time for g in result.generations)
            self.bar.set_postfix_str(f"{result.method} {result.subtask} {toks / secs:.1f} tok/s")
            self.bar.update(1)

    def update_meta(self, **fields: Any) -> None:
        for w in self.writers.values():
            w.update_meta(**fields)

    def finish(self, late: int) -> None:
        """Record this process's count of graphs compiled while timing (0 included; a resumed file
        adds it to its earlier runs' where this run added records, ``ResultWriter.update_meta``) and
        close every file."""
        self.update_meta(graphs_compiled_while_timing=late)
        self.close()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
