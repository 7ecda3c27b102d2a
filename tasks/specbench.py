"""Spec-Bench's six subtasks: finding, validating and selecting questions.

Subtask names follow the Kangaroo paper. MT-bench's eight categories form ``multi_turn``: both
turns are run, the second conditioned on the model's own first answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specharness.errors import UsageError
from specharness.paths import cache_root

SUBTASKS = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag")
MT_BENCH_CATEGORIES = frozenset(
    {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
SAMPLE_FILE = Path(__file__).with_name("sample_questions.jsonl")
BENCHES = ("sample", "spec-bench")
# Spec-Bench's question file, pinned: the commit it was taken from and the file's sha256
SPEC_BENCH_COMMIT = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
SPEC_BENCH_URL = (f"https://raw.githubusercontent.com/hemingkx/Spec-Bench/{SPEC_BENCH_COMMIT}"
                  "/data/spec_bench/question.jsonl")
SPEC_BENCH_SHA256 = "4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04"


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    subtask: str
    turns: tuple[str, ...]


def subtask_of(category: str) -> str:
    return "multi_turn" if category in MT_BENCH_CATEGORIES else category


@dataclass(frozen=True)
class QuestionSource:
    """Which question file a run reads, and how it was chosen (said to the user, kept in headers)."""

    path: Path
    origin: str  # "--bench-file", "$SPECHARNESS_SPECBENCH", "spec-bench" or "sample"

    @property
    def is_sample(self) -> bool:
        return self.origin == "sample"


def find_question_file(explicit: str | None = None, bench: str | None = None) -> QuestionSource:
    """--bench-file, else --bench spec-bench (downloaded once), else $SPECHARNESS_SPECBENCH, else the
    built-in sample. Nothing outside the repository is looked at unless asked for."""
    if bench is not None and bench not in BENCHES:
        raise UsageError(f"unknown --bench '{bench}'; choose one of {', '.join(BENCHES)}")
    if explicit and bench == "spec-bench":
        raise UsageError("give either --bench-file or --bench spec-bench, not both")
    env = os.environ.get("SPECHARNESS_SPECBENCH")
    if explicit or (env and bench is None):
        path, origin = (explicit, "--bench-file") if explicit else (env, "$SPECHARNESS_SPECBENCH")
        if Path(path).is_dir():
            inside = " (it holds question.jsonl)" if (Path(path) / "question.jsonl").is_file() else ""
            raise UsageError(f"question file '{path}' (from {origin}) is a folder{inside}; give the path of the "
                             "question.jsonl file itself")
        if not Path(path).is_file():
            raise UsageError(f"question file '{path}' (from {origin}) does not exist; give the path of "
                             "Spec-Bench's question.jsonl, or --bench spec-bench to download it")
        return QuestionSource(Path(path), origin)
    if bench == "spec-bench":
        return QuestionSource(spec_bench_file(), "spec-bench")
    return QuestionSource(SAMPLE_FILE, "sample")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def known_question_files() -> list[Path]:
    """Every question file on this machine that needs no download: the built-in sample,
    $SPECHARNESS_SPECBENCH and Spec-Bench's cached copy (what a retrieval corpus is checked against)."""
    env = os.environ.get("SPECHARNESS_SPECBENCH")
    candidates = [SAMPLE_FILE, Path(env) if env else None, _cached_spec_bench()]
    return [p for p in candidates if p is not None and p.is_file()]


def _cached_spec_bench() -> Path:
    return cache_root() / "specbench" / f"question-{SPEC_BENCH_SHA256[:16]}.jsonl"


def spec_bench_file(url: str | None = None) -> Path:
    """Spec-Bench's question.jsonl at the pinned commit: from the cache, else downloaded over HTTPS
    (``$SPECHARNESS_SPECBENCH_URL`` points at a mirror), checked against its sha256 and cached."""
    cached = _cached_spec_bench()
    if cached.is_file() and sha256_of(cached) == SPEC_BENCH_SHA256:
        return cached
    url = url or os.environ.get("SPECHARNESS_SPECBENCH_URL") or SPEC_BENCH_URL
    how = (f"download {SPEC_BENCH_URL} yourself (sha256 {SPEC_BENCH_SHA256[:12]}...) and pass --bench-file PATH, "
           "or set $SPECHARNESS_SPECBENCH to it and leave out --bench")
    print(f"specharness: downloading Spec-Bench's questions (commit {SPEC_BENCH_COMMIT[:7]}) from {url}",
          file=sys.stderr, flush=True)
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UsageError(f"cannot download Spec-Bench's question file ({reason}); {how}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != SPEC_BENCH_SHA256:
        raise UsageError(f"the file downloaded from {url} has sha256 {digest[:12]}..., not the pinned "
                         f"{SPEC_BENCH_SHA256[:12]}...; refusing it: {how}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(cached.name + ".partial")
    tmp.write_bytes(data)
    os.replace(tmp, cached)
    return cached


def load_questions(path: Path | str) -> list[Question]:
    """Parse a Spec-Bench question file; a malformed line is reported by number."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")  # not splitlines: JSON may hold U+2028
    except UnicodeDecodeError as exc:
        raise UsageError(f"question file '{path}' is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as "
                         "UTF-8 JSON lines") from None
    out, seen = [], set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            qid, category, turns = d["question_id"], d["category"], d["turns"]
            if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
                raise ValueError("'turns' must be a non-empty list of strings")
            if not all(t.strip() for t in turns):  # an empty user turn is a broken file, not a prompt
                raise ValueError(f"turn {next(i for i, t in enumerate(turns, 1) if not t.strip())} is empty")
        except (json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc).split("\n")[0]
            raise UsageError(f"{path}:{n}: malformed question ({reason}); each line must be JSON "
                             "with question_id, category and turns") from None
        if qid in seen:
            raise UsageError(f"{path}:{n}: question_id {qid} appears twice; ids must be unique")
        seen.add(qid)
        sub = subtask_of(category)
        if sub not in SUBTASKS:
            raise UsageError(f"{path}:{n}: unknown category '{category}'; expected an MT-bench "
                             f"category or one of {', '.join(SUBTASKS[1:])}")
        out.append(Question(qid, category, sub, tuple(turns)))
    if not out:
        raise UsageError(f"question file '{path}' holds no questions")
    return out


def parse_subtasks(text: str | None) -> tuple[str, ...]:
    """``--subtasks``: None is every subtask; a name given twice runs once."""
    if text is None:
        return SUBTASKS
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not names:
        raise UsageError(f"--subtasks '{text}' names no subtask; choose from {', '.join(SUBTASKS)} (or leave it out "
                         "for all)")
    for name in names:
        if name not in SUBTASKS:
            raise UsageError(f"unknown subtask '{name}'; choose from {', '.join(SUBTASKS)}")
    return names


def select(questions: list[Question], subtasks: tuple[str, ...] = SUBTASKS,
           limit: int | None = None) -> list[Question]:
    """The first ``limit`` questions of each chosen subtask, in file order, subtasks in paper order."""
    if limit is not None and limit <= 0:
        raise UsageError(f"--limit must be a positive number of questions per subtask, got {limit}")
    out = []
    for sub in subtasks:
        chosen = [q for q in questions if q.subtask == sub]
        out.extend(chosen[:limit] if limit else chosen)
    return out


def per_subtask(questions: list[Question]) -> dict[str, int]:
    """How many questions each subtask holds, in paper order (subtasks with none left out)."""
    counts = {sub: sum(q.subtask == sub for q in questions) for sub in SUBTASKS}
    return {sub: n for sub, n in counts.items() if n}


def describe_selection(source: QuestionSource, available: list[Question], subtasks: tuple[str, ...],
                       limit: int | None) -> list[str]:
    """The lines a run prints about its questions: where they come from, and a --limit the file
    cannot meet (said once, never capped silently)."""
    have = per_subtask([q for q in available if q.subtask in subtasks])
    lines = []
    if source.is_sample:
        counts = sorted(set(have.values()))
        each = f"{counts[0]} per subtask" if len(counts) == 1 else ", ".join(f"{k} {n}" for k, n in have.items())
        lines.append(f"questions: the built-in sample ({each}, written for this project); for Spec-Bench's "
                     "480 questions use --bench spec-bench (downloaded once) or --bench-file PATH")
    short = {sub: n for sub, n in have.items() if limit and n < limit}
    if short:
        lines.append(f"note: --limit {limit} asks for more than the question file holds in "
                     + ", ".join(f"{sub} ({n})" for sub, n in short.items()) + "; running all of those")
    return lines
