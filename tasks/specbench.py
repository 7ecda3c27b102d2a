"""Spec-Bench's six subtasks: finding, validating and selecting questions.

Subtask names follow the Kangaroo paper. MT-bench's eight categories form ``multi_turn``: both
turns are run, the second conditioned on the model's own first answer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from specharness.errors import UsageError

SUBTASKS = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag")
MT_BENCH_CATEGORIES = frozenset(
    {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
SAMPLE_FILE = Path(__file__).with_name("sample_questions.jsonl")
SHARED_CANDIDATES = (  # ../shared beside the working directory, or beside this checkout
    Path("..") / "shared" / "specbench" / "question.jsonl",
    Path(__file__).resolve().parents[2] / "shared" / "specbench" / "question.jsonl",
)


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    subtask: str
    turns: tuple[str, ...]


def subtask_of(category: str) -> str:
    return "multi_turn" if category in MT_BENCH_CATEGORIES else category


def find_question_file(explicit: str | None = None) -> Path:
    """--bench-file, else $SPECHARNESS_SPECBENCH, else ../shared/specbench, else the built-in sample."""
    for candidate, origin in ((explicit, "--bench-file"), (os.environ.get("SPECHARNESS_SPECBENCH"),
                                                           "$SPECHARNESS_SPECBENCH")):
        if candidate:
            if not Path(candidate).is_file():
                raise UsageError(f"question file '{candidate}' (from {origin}) does not exist; give the "
                                 "path of Spec-Bench's question.jsonl")
            return Path(candidate)
    return next((p for p in SHARED_CANDIDATES if p.is_file()), SAMPLE_FILE)


def load_questions(path: Path | str) -> list[Question]:
    """Parse a Spec-Bench question file; a malformed line is reported by number."""
    out, seen = [], set()
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                qid, category, turns = d["question_id"], d["category"], d["turns"]
                if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
                    raise ValueError("'turns' must be a non-empty list of strings")
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
    if not text:
        return SUBTASKS
    names = tuple(s.strip() for s in text.split(",") if s.strip())
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
