"""The records that flow from the engine to result files to metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Round:
    """One target forward: the prefill (drafted = 0) or one draft -> verify -> accept round."""

    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    accept_s: float


@dataclass
class Generation:
    """One turn's output: generated ids (eos included when produced) and its rounds."""

    token_ids: list[int]
    rounds: list[Round]
    wall_time: float
    stop: str  # "eos" | "length"


@dataclass
class QuestionResult:
    """All turns of one question under one method, as written to the result file."""

    question_id: int | str
    category: str
    subtask: str
    method: str = ""
    turns: list[str] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    seed: int = 0
    wall_time_repeats: list[list[float]] = field(default_factory=list)  # per turn, every timed repeat
