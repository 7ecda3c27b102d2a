"""Result files: one JSON line per question, Spec-Bench compatible, written as each one finishes.

``RUN.jsonl`` holds only question records, so Spec-Bench's ``evaluation/speed.py`` (which reads
every line as a question) works on it unchanged. How the run was produced (command, commit,
model, device, threads, versions, method and options) lives beside it in ``RUN.meta.json``.

Each line is appended, flushed and fsynced before the next question starts; the sidecar is
replaced atomically. A torn last line (power cut, kill -9) is dropped on resume.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from .errors import UsageError
from .paths import write_text_atomic
from .records import Generation, QuestionRecord, QuestionResult

FORMAT = "specharness-result/1"
# settings that must match for a resumed file or a vanilla baseline to be comparable
IDENTITY = ("model", "dtype", "compile", "device", "threads", "method", "options", "verifier", "max_new_tokens",
            "temperature", "seed")
BASELINE_IDENTITY = ("model", "dtype", "compile", "device", "max_new_tokens", "temperature")
# what a vanilla file found beside a run must share with it to serve as that run's baseline
RUN_BASELINE_IDENTITY = (*BASELINE_IDENTITY, "seed", "threads", "questions_sha256")


def same_baseline(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether vanilla results in header ``a`` can stand for a vanilla run with header ``b``."""
    return all(a.get(k) == b.get(k) for k in RUN_BASELINE_IDENTITY)


def _try_writing(folder: Path, probe: str) -> None:
    """``folder`` made if need be and a file written and removed in it (OSError where it cannot be)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / probe).write_text("")
    (folder / probe).unlink()


def check_writable(path: Path, flag: str = "--out") -> None:
    """Fail now, in one line, if results cannot be written at ``path`` (before hours of work)."""
    if path.is_dir():
        example = path / ("report.json" if flag == "--json" else "results.jsonl")
        raise UsageError(f"{flag} '{path}' is a folder; name a file in it (e.g. {example})")
    blocked = next((p for p in path.parents if p.is_file()), None)
    if blocked is not None:
        raise UsageError(f"cannot write results to '{path}': '{blocked}' is a file, not a folder; choose another {flag}")
    try:
        _try_writing(path.parent, f".{path.name}.probe")
    except OSError as exc:
        raise UsageError(f"cannot write results to '{path}' ({exc.strerror or exc}); choose a writable "
                         f"{flag}{' / --out-dir' if flag == '--out' else ''}") from None


def check_folder(path: Path, flag: str = "--out") -> Path:
    """A folder a command writes into, made now if need be, or one line saying why it cannot be."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} '{path}' is a file; this writes a folder: name a new one")
    try:
        _try_writing(path, ".probe")
    except OSError as exc:
        raise UsageError(f"cannot write into {flag} '{path}' ({exc.strerror or exc}); choose a writable folder") from None
    return path


def meta_path(path: Path) -> Path:
    name = path.name[:-len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    return path.with_name(name + ".meta.json")


def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parents[1]
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (commit + ("-dirty" if dirty else "")) if commit else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(**fields: Any) -> dict[str, Any]:
    """The header every result file carries: how to rerun it and on what it ran."""
    import torch
    import transformers
    head = {
        "format": FORMAT,
        "command": "python -m specharness " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    head.update(fields)
    return head


def question_record(result: QuestionResult, meta: dict[str, Any]) -> dict[str, Any]:
    """A Spec-Bench answer line, plus token ids, per-round counts, timings and the seed."""
    gens = result.generations
    accept_lengths = [n for g in gens for n in tokens_per_round(g)]
    return {
        "question_id": result.question_id,
        "category": result.category,
        "subtask": result.subtask,
        "answer_id": f"{meta['method']}-{result.question_id}",
        "model_id": f"{meta['model']}-{meta['method']}",
        "method": meta["method"],
        "choices": [{
            "index": 0,
            "turns": result.turns,
            "token_ids": [g.token_ids for g in gens],
            "new_tokens": [len(g.token_ids) for g in gens],
            "wall_time": [g.wall_time for g in gens],
            "wall_time_repeats": [list(w) for w in result.wall_time_repeats],
            "decoding_steps": [len(g.rounds) for g in gens],
            "accept_lengths": accept_lengths,
            "stop": [g.stop for g in gens],
            "rounds": [{
                "drafted": [r.drafted for r in g.rounds],
                "accepted": [r.accepted for r in g.rounds],
                "draft_s": [round(r.draft_s, 7) for r in g.rounds],
                "verify_s": [round(r.verify_s, 7) for r in g.rounds],
                "accept_s": [round(r.accept_s, 7) for r in g.rounds],
                "width": [r.width for r in g.rounds],
                **({"budget": [r.budget for r in g.rounds]} if any(r.budget for r in g.rounds) else {}),
                **({"source": [r.source for r in g.rounds]} if any(r.source for r in g.rounds) else {}),
            } for g in gens],
        }],
        "truncated": result.truncated,
        "seed": result.seed,
        **({"worker": result.worker} if result.worker else {}),
        "tstamp": time.time(),
    }


def tokens_per_round(g: Generation) -> list[int]:
    """Tokens each target forward added: its kept drafts plus the target's own token, except in a
    last round whose kept drafts end with an eos (nothing after an eos is kept)."""
    out = [r.accepted + 1 for r in g.rounds]
    if out and sum(out) == len(g.token_ids) + 1 and g.stop == "eos":
        out[-1] -= 1
    return out


def _read_lines(path: Path) -> tuple[list[dict], int]:
    """Complete records and the byte length they occupy. A torn last line (a run killed while writing)
    is not counted; an unreadable line with finished records after it stops here, in one line, rather
    than have a resume cut those records off or a report leave them out."""
    records, good = [], 0
    with open(path, "rb") as fh:
        lines = fh.readlines()
    for n, raw in enumerate(lines, 1):
        try:
            if not raw.endswith(b"\n"):
                raise ValueError
            records.append(json.loads(raw))
        except ValueError:
            if any(rest.strip() for rest in lines[n:]):
                raise UsageError(f"{path}: line {n} is not a JSON record, and finished questions follow it; "
                                 "repair or delete that line, then rerun") from None
            break
        good += len(raw)
    return records, good


def read_meta(path: Path) -> dict[str, Any]:
    mp = meta_path(path)
    if not mp.is_file():
        raise UsageError(f"{path} has no header file {mp.name}; it was not written by specharness "
                         "(or the header was removed): rerun, or copy the header beside it")
    try:
        meta = json.loads(mp.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"{mp} is not valid JSON ({exc.msg}, line {exc.lineno}); restore or delete it") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{mp} is not a specharness header (a JSON object); restore or delete it")
    for key in ("temperature", "max_new_tokens"):  # what every table divides or groups by
        if meta.get(key) is not None and (isinstance(meta[key], bool) or not isinstance(meta[key], (int, float))):
            raise UsageError(f"{mp}: '{key}' is {meta[key]!r}, not a number; restore it or delete the file")
    return meta


def read_results(path: Path | str) -> tuple[dict[str, Any], list[QuestionRecord]]:
    """(header, typed question records) of one result file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"result file '{path}' does not exist")
    meta = read_meta(path)
    try:
        return meta, [QuestionRecord.from_json(d) for d in _read_lines(path)[0]]
    except (KeyError, IndexError, TypeError) as exc:
        raise UsageError(f"{path} holds a line that is not a specharness question record ({type(exc).__name__}: "
                         f"{exc}); was it written by another tool?") from None


def iter_result_files(directory: Path) -> Iterator[Path]:
    if directory.is_dir():
        yield from sorted(p for p in directory.glob("*.jsonl") if meta_path(p).is_file())


def merge_compared(compared: list[str], beside: list[str]) -> list[str]:
    """A file's ``compared_with`` once a record timed beside ``beside`` joins it: the methods timed
    beside every record (vanilla only if each was interleaved with it, so a ratio that spans runs
    says so)."""
    return [m for m in compared if m in beside]


def holds_records(path: Path) -> bool:
    """Whether a run writing ``path`` afresh would discard something: an empty file was left by a run
    stopped before its first question finished, and is simply started again."""
    return path.exists() and path.stat().st_size > 0


def refuse_existing(path: Path) -> None:
    raise UsageError(f"{path} already exists; add --resume to continue it, --overwrite to start again, "
                     "or --out to write elsewhere")


class ResultWriter:
    """Appends question records to one method's result file; resumes or refuses as asked."""

    def __init__(self, path: Path | str, meta: dict[str, Any], resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        self.meta = meta
        self.done: set = set()
        self._compared: list[str] = list(meta.get("compared_with") or [])  # the methods this run times
        self.held_beside: dict[str, set] = {}  # per other method of the run, what its file held before it
        self._compiled_before = 0
        self.appended = 0
        check_writable(self.path)
        if holds_records(self.path) and not overwrite:
            if not resume:
                refuse_existing(self.path)
            old = read_meta(self.path)
            diff = [k for k in IDENTITY if old.get(k) != meta.get(k)]
            if diff:
                k = diff[0]
                raise UsageError(f"cannot resume {self.path}: it was written with {k}={old.get(k)!r}, "
                                 f"this run has {k}={meta.get(k)!r}; use another --out or the same settings")
            records, good = _read_lines(self.path)
            with open(self.path, "r+b") as fh:  # drop a torn last line
                fh.truncate(good)
            self.done = {r["question_id"] for r in records}
            self._compiled_before = old.get("graphs_compiled_while_timing") or 0
            self.meta = {**old, "resumed": old.get("resumed", []) + [meta.get("command")]}
        elif self.path.exists():
            self.path.unlink()
        self._write_meta()
        self._fh = open(self.path, "a", encoding="utf-8")

    def _write_meta(self) -> None:
        write_text_atomic(meta_path(self.path), json.dumps(self.meta, indent=1) + "\n")

    def update_meta(self, **fields: Any) -> None:
        if "graphs_compiled_while_timing" in fields:  # over the runs that timed this file's records
            fields["graphs_compiled_while_timing"] = ((fields["graphs_compiled_while_timing"] if self.appended else 0)
                                                      + self._compiled_before)
        self.meta.update(fields)
        self._write_meta()

    def append(self, result: QuestionResult) -> None:
        if self.meta.get("compared_with") is not None:  # older headers do not say, and stay so
            # a method whose file already held this question did not run it beside this one
            beside = [m for m in self._compared if result.question_id not in self.held_beside.get(m, ())]
            kept = merge_compared(self.meta["compared_with"], beside)
            if kept != self.meta["compared_with"]:
                self.update_meta(compared_with=kept)
        self._fh.write(json.dumps(question_record(result, self.meta)) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done.add(result.question_id)
        self.appended += 1

    def close(self) -> None:
        self._fh.close()
