"""Predicting a result file's speedup from an engine profile and the file's own rounds.

The profile (``python -m specharness profile``) is measured separately, so agreement is evidence
(the old fitted model explained each file by its own round timings, which only shows they add up).
A question's predicted time, per turn: the prefill at its prompt length, then for every round the
drafter's cost (fixed + per drafted token, as profiled), the target forward at the round's width and
context (profiled at two contexts, interpolated), and the engine's bookkeeping per round. Vanilla's:
the same with no drafts. The predicted speedup is the ratio of those sums over the questions both
files hold; files without widths (older engine) or whose drafter or configuration the profile does
not hold are left out.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from .records import QuestionRecord

DEFAULT_BUCKETS = (1, 8, 16, 32, 64)  # a profile that does not say which buckets it ran with


@dataclass
class Profile:
    data: dict

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        return cls(json.loads(Path(path).read_text()))

    def config(self, dtype: str, compile_mode: str) -> dict | None:
        return next((c for c in self.data["configs"] if c["dtype"] == dtype and c["compile"] == (compile_mode or "none")),
                    None)

    @staticmethod
    def _by_width(row: dict[str, float], width: int, padded: bool, buckets=DEFAULT_BUCKETS) -> float:
        """ms at ``width``: a compiled engine pads to its bucket, so every width of a bucket costs the
        same (the median of the bucket's measured widths); eager, linear between measured widths."""
        ws = sorted(int(w) for w in row)
        if padded and width <= buckets[-1]:
            bucket = next(b for b in buckets if b >= width)
            lower = max([b for b in buckets if b < bucket], default=0)
            same = [row[str(w)] for w in ws if lower < w <= bucket]
            if same:
                return statistics.median(same)
        if width in ws:
            return row[str(width)]
        i = bisect_left(ws, width)
        if i == len(ws):  # past the widest measured: linear from the last two
            (w0, w1) = ws[-2:]
            return row[str(w1)] + (row[str(w1)] - row[str(w0)]) * (width - w1) / (w1 - w0)
        if i == 0:
            return row[str(ws[0])]
        w0, w1 = ws[i - 1], ws[i]
        return row[str(w0)] + (row[str(w1)] - row[str(w0)]) * (width - w0) / (w1 - w0)

    def forward_ms(self, cfg: dict, width: int, context: int) -> float:
        """ms of one forward over ``width`` positions after ``context`` cached ones."""
        padded = cfg["compile"] != "none"
        ctxs = sorted(int(c) for c in cfg["by_width"])
        buckets = tuple(self.data.get("width_buckets") or DEFAULT_BUCKETS)
        vals = [self._by_width(cfg["by_width"][str(c)], width, padded, buckets) for c in ctxs]
        if len(ctxs) == 1:
            return vals[0]
        (c0, c1), (v0, v1) = ctxs[:2], vals[:2]
        return v0 + (v1 - v0) * (context - c0) / (c1 - c0)

    def prefill_ms(self, cfg: dict, length: int) -> float:
        pts = sorted((int(n), v) for n, v in cfg["prefill_ms"].items())
        (n0, v0), (n1, v1) = pts[0], pts[-1]
        return v0 + (v1 - v0) * (length - n0) / (n1 - n0)


def question_ms(rec: QuestionRecord, profile: Profile, cfg: dict, drafter: dict) -> float | None:
    """Predicted ms of one question under the profile (None: the record lacks forward widths)."""
    total = 0.0
    for turn in rec.rounds:
        if turn.width is None or not turn.width:
            return None
        ctx = turn.width[0]  # the prefill's width is the prompt's length
        total += profile.prefill_ms(cfg, ctx)
        for k, a, w in zip(turn.drafted[1:], turn.accepted[1:], turn.width[1:]):
            total += (drafter["draft_fixed_ms"] + drafter["draft_per_token_ms"] * k if k else 0.0)
            total += profile.forward_ms(cfg, w, ctx) + drafter["bookkeeping_ms"]
            ctx += a + 1
    return total


def predict(records: list[QuestionRecord], meta: dict, vanilla: list[QuestionRecord], profile: Profile) -> dict | None:
    """Predicted and measured speedup of a file over its vanilla file, or None when the profile
    cannot speak for it (another configuration, an unprofiled drafter, no widths recorded)."""
    cfg = profile.config(meta.get("dtype"), meta.get("compile"))
    drafters = profile.data.get("drafters") or {}
    if cfg is None or meta.get("method") not in drafters or "vanilla" not in drafters:
        return None
    by_id = {r.question_id: r for r in vanilla}
    pred_m = pred_v = meas_m = meas_v = 0.0
    tok_m = tok_v = 0
    for r in records:
        v = by_id.get(r.question_id)
        if v is None:
            continue
        pm = question_ms(r, profile, cfg, drafters[meta["method"]])
        pv = question_ms(v, profile, cfg, drafters["vanilla"])
        if pm is None or pv is None:
            return None
        pred_m, pred_v = pred_m + pm, pred_v + pv
        meas_m, meas_v = meas_m + r.time, meas_v + v.time
        tok_m, tok_v = tok_m + r.tokens, tok_v + v.tokens
    if not pred_m or not meas_m:
        return None
    predicted = (tok_m / pred_m) / (tok_v / pred_v)
    measured = (tok_m / meas_m) / (tok_v / meas_v)
    return {"predicted_speedup": predicted, "measured_speedup": measured, "gap": measured / predicted - 1,
            "predicted_vanilla_ms_per_token": pred_v / tok_v, "measured_vanilla_ms_per_token": 1e3 * meas_v / tok_v,
            "config": f"{cfg['dtype']}/{cfg['compile']}"}
