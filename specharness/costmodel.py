"""Predicting a result file's speedup from an engine profile and the file's own rounds.

The profile (``python -m specharness profile``) is measured separately, so agreement is evidence
(the old fitted model explained each file by its own round timings, which only shows they add up).
A question's predicted time, per turn: the prefill at its prompt length, then for every round the
drafter's cost (fixed + per drafted token, as profiled), the target forward at the round's width and
context (profiled at two contexts, interpolated), and a fixed cost per round. For the engine's
methods that is the engine's forward and bookkeeping; for transformers' ``generate`` and its
speculative peers, transformers' own eager forward and ``generate``'s per-step overhead, plus the
peer's profiled costs per round and per drafted token. Vanilla's: the engine with no drafts. The predicted speedup
is the ratio of those sums over the questions both files hold; files without widths (older engine)
or whose method or configuration the profile does not hold are left out.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import UsageError, exception_line
from .records import QuestionRecord, TurnRounds

DEFAULT_BUCKETS = (1, 8, 16, 32, 64)  # a profile that does not say which buckets it ran with


def _interpolate(points: dict[str, float], x: int) -> float:
    """Linear between measured points, and past the ends from the two nearest."""
    pts = sorted((int(k), v) for k, v in points.items())
    xs = [p[0] for p in pts]
    if x in xs:
        return pts[xs.index(x)][1]
    if len(pts) == 1:
        return pts[0][1]
    i = min(max(bisect_left(xs, x), 1), len(pts) - 1)
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _by_width(row: dict[str, float], width: int, padded: bool, buckets=DEFAULT_BUCKETS) -> float:
    """ms at ``width``: a compiled engine pads to its bucket, so every width of a bucket costs the
    same (the median of the bucket's measured widths); eager, linear between measured widths."""
    if padded and width <= buckets[-1]:
        bucket = next(b for b in buckets if b >= width)
        lower = max([b for b in buckets if b < bucket], default=0)
        same = [v for w, v in row.items() if lower < int(w) <= bucket]
        if same:
            return statistics.median(same)
    if width < min(int(w) for w in row):
        return row[str(min(int(w) for w in row))]
    return _interpolate(row, width)


def _forward(by_context: dict[str, dict[str, float]], padded: bool, buckets) -> Callable[[int, int], float]:
    """(width, context) -> ms, from forward costs measured by width at a few contexts."""
    def ms(width: int, context: int) -> float:
        return _interpolate({c: _by_width(row, width, padded, buckets) for c, row in by_context.items()}, context)
    return ms


@dataclass
class RoundCosts:
    """What each part of a question costs (ms) for one method under one profile."""

    prefill: Callable[[int], float]  # prompt length -> ms
    forward: Callable[[int, int], float]  # (width, context) -> ms
    draft_fixed_ms: float = 0.0  # per round that drafts
    draft_per_token_ms: float = 0.0
    per_round_ms: float = 0.0  # the engine's bookkeeping, or generate's overhead around each forward
    profiled_on: dict | None = None  # options the profile measured the drafter on where they differ from the file's


@dataclass
class Profile:
    data: dict

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """A profile.json, or one line saying why the file is not one."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"profile '{path}' cannot be read ({exception_line(exc)}); give the profile.json "
                             "that 'python -m specharness profile' wrote") from None
        if not isinstance(data, dict) or not isinstance(data.get("configs"), list):
            raise UsageError(f"profile '{path}' is not a specharness profile (no 'configs' list); give the "
                             "profile.json that 'python -m specharness profile' wrote")
        return cls(data)

    def config(self, dtype: str, compile_mode: str) -> dict | None:
        return next((c for c in self.data["configs"] if c["dtype"] == dtype and c["compile"] == (compile_mode or "none")),
                    None)

    def _measured(self, kind: str, method: str, options: dict | None) -> tuple[dict | None, dict | None]:
        """The profile's entry for ``method``: the variant measured on exactly ``options`` (a tree
        drafts at another cost than a chain), else the closest one (fewest options apart; the
        method's defaults on a tie) with the options where it differs, so a report can say so (None:
        no difference). Options that only locate weights (the entry's ``weights_options``: trained
        or random heads of one shape) are left out of the match."""
        entries = self.data.get(kind) or {}
        if options is None:  # a file that records no options: the method's defaults
            return entries.get(method), None

        def differ(e: dict) -> dict:
            free, theirs = set(e.get("weights_options") or ()), e.get("options") or {}
            return {k: theirs.get(k) for k in sorted(set(theirs) | set(options))
                    if k not in free and theirs.get(k) != options.get(k)}

        near = sorted((len(differ(e)), label != method, label) for label, e in entries.items()
                      if e.get("method", label) == method)
        if not near:
            return None, None
        e = entries[near[0][2]]
        return e, differ(e) or None

    def engine_costs(self, dtype: str, compile_mode: str, method: str, options: dict | None = None) -> RoundCosts | None:
        """The engine's costs for a drafter the profile measured, in a configuration it measured."""
        cfg, (drafter, own) = self.config(dtype, compile_mode), self._measured("drafters", method, options)
        if cfg is None or drafter is None:
            return None
        buckets = tuple(self.data.get("width_buckets") or DEFAULT_BUCKETS)
        return RoundCosts(lambda n: _interpolate(cfg["prefill_ms"], n),
                          _forward(cfg["by_width"], cfg["compile"] != "none", buckets),
                          drafter["draft_fixed_ms"], drafter["draft_per_token_ms"], drafter["bookkeeping_ms"],
                          profiled_on=own)

    def transformers_costs(self, dtype: str, method: str, options: dict | None = None) -> RoundCosts | None:
        """transformers' costs (eager, in ``dtype``) for ``generate`` or a peer the profile measured."""
        hf = (self.data.get("hf_generate") or {}).get(dtype) or {}
        decoder, own = self._measured("decoders", method, options)
        if "by_width" not in hf or decoder is None:
            return None
        forward = _forward(hf["by_width"], False, DEFAULT_BUCKETS)
        overhead = max(hf["step_ms"] - forward(1, int(hf.get("step_context", 256))), 0.0)
        return RoundCosts(lambda n: _interpolate(hf["prefill_ms"], n), forward,
                          0.0, decoder["draft_per_token_ms"], overhead + decoder.get("per_round_ms", 0.0),
                          profiled_on=own)

    def costs(self, meta: dict) -> tuple[RoundCosts | None, str]:
        """A result file's method's costs (engine drafter first, else transformers) and what ran it."""
        dtype, mode, method, options = meta.get("dtype"), meta.get("compile"), meta.get("method"), meta.get("options")
        got, ran = self.engine_costs(dtype, mode, method, options), f"{dtype}/{mode or 'none'}"
        if got is None:
            got, ran = self.transformers_costs(dtype, method, options), f"transformers {dtype}/eager"
        return got, ran + profiled_note(got)


def profiled_note(costs: RoundCosts | None) -> str:
    """`` (drafter profiled at k=v, ...)`` when the profile measured the drafter on other options."""
    if costs is None or not costs.profiled_on:
        return ""
    return " (drafter profiled at " + ", ".join(f"{k}={v}" for k, v in costs.profiled_on.items()) + ")"


def turn_rounds(rounds) -> TurnRounds:
    """A generation's rounds (``records.Round``) as a stored turn, for ``question_ms``."""
    return TurnRounds([r.drafted for r in rounds], [r.accepted for r in rounds], width=[r.width for r in rounds])


def question_ms(turns: list[TurnRounds], costs: RoundCosts) -> float | None:
    """Predicted ms of one question's turns (None: a turn lacks forward widths)."""
    total = 0.0
    for turn in turns:
        if not turn.width:
            return None
        ctx = turn.width[0]  # the prefill's width is the prompt's length
        total += costs.prefill(ctx)
        for k, a, w in zip(turn.drafted[1:], turn.accepted[1:], turn.width[1:]):
            total += (costs.draft_fixed_ms + costs.draft_per_token_ms * k if k else 0.0)
            total += costs.forward(w, ctx) + costs.per_round_ms
            ctx += a + 1
    return total


def _totals(records: list[QuestionRecord], vanilla: list[QuestionRecord], costs: RoundCosts,
            base: RoundCosts) -> dict | None:
    """Predicted and measured ms and tokens over the questions both files hold (None: no widths)."""
    by_id = {r.question_id: r for r in vanilla}
    t = dict.fromkeys(("pred_m", "pred_v", "meas_m", "meas_v", "tok_m", "tok_v"), 0.0)
    for r in records:
        v = by_id.get(r.question_id)
        if v is None:
            continue
        pm, pv = question_ms(r.rounds, costs), question_ms(v.rounds, base)
        if pm is None or pv is None:
            return None
        for key, value in (("pred_m", pm), ("pred_v", pv), ("meas_m", r.time), ("meas_v", v.time),
                           ("tok_m", r.tokens), ("tok_v", v.tokens)):
            t[key] += value
    return t if t["pred_m"] and t["meas_m"] else None


def _ratio(t: dict, kind: str) -> float:
    """Tokens per second over vanilla's, of the predicted or measured sums."""
    return (t["tok_m"] / t[f"{kind}_m"]) / (t["tok_v"] / t[f"{kind}_v"])


def _vanilla_costs(profile: Profile, vanilla_meta: dict) -> RoundCosts | None:
    """The engine's vanilla costs in the vanilla file's configuration: every prediction's baseline."""
    return profile.engine_costs(vanilla_meta.get("dtype"), vanilla_meta.get("compile"), "vanilla")


def predict(records: list[QuestionRecord], meta: dict, vanilla: list[QuestionRecord], profile: Profile,
            vanilla_meta: dict | None = None) -> dict | None:
    """Predicted and measured speedup of a file over its vanilla file, or None when the profile
    cannot speak for it (another configuration, an unprofiled method, no widths recorded)."""
    costs, engine = profile.costs(meta)
    base = _vanilla_costs(profile, vanilla_meta or meta)
    if costs is None or base is None:
        return None
    t = _totals(records, vanilla, costs, base)
    if t is None:
        return None
    predicted, measured = _ratio(t, "pred"), _ratio(t, "meas")
    return {"predicted_speedup": predicted, "measured_speedup": measured, "gap": measured / predicted - 1,
            "predicted_vanilla_ms_per_token": t["pred_v"] / t["tok_v"],
            "measured_vanilla_ms_per_token": 1e3 * t["meas_v"] / t["tok_v"], "config": engine}


def ceilings(records: list[QuestionRecord], meta: dict, vanilla: list[QuestionRecord], profile: Profile,
             vanilla_meta: dict | None = None) -> dict | None:
    """What the profile predicts for a file's own rounds (its draft sizes, widths, acceptance) with
    parts of its cost taken away: ``free_drafting``, no drafting time and vanilla's bookkeeping per
    round; ``flat_verification``, besides, every verification at the cost of a one-position
    step (or its own, where that is less). So the distance from the predicted speedup to the first
    is what the drafter costs, from the first to the second what the machine's width curve costs, and the second is what the acceptance
    alone allows. None for a method the engine does not run (transformers' peers) or the profile
    cannot speak for."""
    costs = profile.engine_costs(meta.get("dtype"), meta.get("compile"), meta.get("method"), meta.get("options"))
    base = _vanilla_costs(profile, vanilla_meta or meta)
    if costs is None or base is None:
        return None
    free = RoundCosts(costs.prefill, costs.forward, 0.0, 0.0, base.per_round_ms)
    flat = RoundCosts(costs.prefill, lambda width, context: min(costs.forward(width, context), costs.forward(1, context)),
                      0.0, 0.0, base.per_round_ms)
    totals = {name: _totals(records, vanilla, what, base)
              for name, what in (("predicted", costs), ("free_drafting", free), ("flat_verification", flat))}
    if None in totals.values():
        return None
    return {**{name: _ratio(t, "pred") for name, t in totals.items()}, "measured": _ratio(totals["predicted"], "meas"),
            "drafter_profiled_at": profiled_note(costs)}
