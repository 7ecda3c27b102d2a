"""The records that flow from the engine to result files to metrics, and typed readers for them.

Writing: the engine makes ``Round``s and a ``Generation`` per turn; the runner gathers a question's
turns in a ``QuestionResult``; ``results.question_record`` turns that into a Spec-Bench answer line.
Reading: ``QuestionRecord.from_json`` gives that line back as typed fields, so metrics, statistics,
summary, report and lossless never walk raw JSON (``rec["choices"][0]...``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Iterator


@dataclass
class Round:
    """One target forward: the prefill (drafted = 0) or one draft -> verify -> accept round.

    ``drafted`` counts the tokens the target verified besides the current one (a chain's length or
    a tree's nodes); ``accepted`` the drafts kept (the accepted path's length, never past an eos).
    """

    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    accept_s: float
    width: int = 0  # positions the round's target forward computed (drafted + 1; the prompt for a prefill)
    # the depth (1-based) of the draft the target rejected on the path it took, 0 when none was: the
    # path ran out of drafts (every one kept) or the round drafted nothing. For a tree, a rejection at
    # depth d needs a drafted child of the path's node at depth d - 1 (lossless level c counts these)
    rejected_at: int = 0
    budget: int = 0  # the round's draft size under ``budget=auto`` (0: the method's own, unsized)
    source: str = ""  # where the drafts came from (``Proposal.source``; "" for a drafter with one source)


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
    worker: dict | None = None  # the hardware that ran it: node, device, threads


# ---- reading ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnRounds:
    """One turn's rounds as stored: index 0 is the prefill; timings may be absent in foreign files."""

    drafted: list[int]
    accepted: list[int]
    draft_s: list[float] | None = None
    verify_s: list[float] | None = None
    accept_s: list[float] | None = None
    width: list[int] | None = None  # forward widths (absent in older files: drafted + 1)
    budget: list[int] | None = None  # each round's draft size under budget=auto (absent: unsized)
    source: list[str] | None = None  # where each round's drafts came from (absent: one source)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TurnRounds":
        return cls(d["drafted"], d["accepted"], d.get("draft_s"), d.get("verify_s"), d.get("accept_s"), d.get("width"),
                   d.get("budget"), d.get("source"))

    def widths(self) -> list[int]:
        return self.width if self.width is not None else [d + 1 for d in self.drafted]

    @property
    def timed(self) -> bool:
        return None not in (self.draft_s, self.verify_s, self.accept_s)

    def seconds(self, i: int) -> float:
        """Draft + verify + accept seconds of round ``i`` (0 when untimed)."""
        return (self.draft_s[i] + self.verify_s[i] + self.accept_s[i]) if self.timed else 0.0


def _numbers(choice: dict, key: str) -> list:
    """``choice[key]``, a list of numbers per turn (a TypeError, which a reader reports, otherwise)."""
    xs = choice[key]
    if not isinstance(xs, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in xs):
        raise TypeError(f"its '{key}' is {str(xs)[:40]}, not a list of numbers")
    return xs


@dataclass(frozen=True)
class QuestionRecord:
    """One line of a result file: a question under one method, every turn."""

    question_id: int | str
    subtask: str
    category: str = ""
    method: str = ""
    turns: list[str] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)
    wall_time_repeats: list[list[float]] = field(default_factory=list)
    rounds: list[TurnRounds] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    seed: int = 0
    worker: dict | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "QuestionRecord":
        ch = d["choices"][0]
        return cls(d["question_id"], d.get("subtask", d.get("category", "")), d.get("category", ""),
                   d.get("method", ""), ch.get("turns", []), ch.get("token_ids", []), _numbers(ch, "new_tokens"),
                   _numbers(ch, "wall_time"), ch.get("wall_time_repeats") or [], [TurnRounds.from_json(t) for t in ch["rounds"]],
                   ch.get("stop", []), d.get("truncated", []), d.get("seed", 0), d.get("worker"))

    def only_turns(self, keep: set[int]) -> "QuestionRecord":
        """The same question with only the turns (0-based) in ``keep``: every per-turn field is cut
        alike, so time, tokens and forwards (and every metric) cover those turns alone."""
        def cut(xs: list) -> list:
            return [x for i, x in enumerate(xs) if i in keep]
        return replace(self, turns=cut(self.turns), token_ids=cut(self.token_ids), new_tokens=cut(self.new_tokens),
                       wall_time=cut(self.wall_time), wall_time_repeats=cut(self.wall_time_repeats),
                       rounds=cut(self.rounds), stop=cut(self.stop), truncated=cut(self.truncated))

    @property
    def tokens(self) -> int:
        """Generated tokens over every turn."""
        return int(sum(self.new_tokens))

    @property
    def forwards(self) -> int:
        """Target forwards over every turn (each round, the prefill included, is one)."""
        return sum(len(t.drafted) for t in self.rounds)

    def repeat_times(self) -> list[float]:
        """Total time (all turns) of each timed repeat."""
        reps = self.wall_time_repeats
        if not reps or not all(reps):
            return [float(sum(self.wall_time))]
        n = min(len(r) for r in reps)
        return [float(sum(turn[i] for turn in reps)) for i in range(n)]

    @property
    def time(self) -> float:
        """The question's time: the median over its timed repeats of the repeat's total (all turns)."""
        return float(statistics.median(self.repeat_times()))

    def verification_rounds(self) -> Iterator[tuple[int, int]]:
        """(drafted, accepted) of every verification round of every turn (the prefill left out)."""
        for t in self.rounds:
            yield from zip(t.drafted[1:], t.accepted[1:])

    def timed_rounds(self) -> Iterator[tuple[int, int, float, float, float]]:
        """(drafted, accepted, draft_s, verify_s, accept_s) of every timed verification round."""
        for t in self.rounds:
            if t.timed:
                yield from zip(t.drafted[1:], t.accepted[1:], t.draft_s[1:], t.verify_s[1:], t.accept_s[1:])

    @property
    def prefill_s(self) -> float:
        """Seconds of the prefill rounds (one per turn)."""
        return sum(t.seconds(0) for t in self.rounds if t.drafted)
