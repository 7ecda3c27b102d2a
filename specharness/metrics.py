"""Every metric the harness reports, defined once, computed from result records alone.

- a question's time = median over its timed repeats (``--repeats``) of the repeat's total time
  over all turns; tokens/s of a question = generated tokens of all its turns / that time.
- CR (compression rate, Spec-Bench's "mean accepted tokens") = generated tokens / target forwards.
  Each round (the prefill included) is one target forward, so CR = tokens / rounds; vanilla = 1.
- CTAR(w) = fraction of verification rounds (the prefill excluded) that accepted at least w draft
  tokens. In the paper's notation s_k counts the bonus token and CTAR(w) = mean I(s_k - w > 0);
  s_k = accepted + 1, so I(s_k > w) = I(accepted >= w): the same number.
- mean draft length = mean drafted tokens per verification round.
- speedup = (method tokens/s) / (vanilla tokens/s) on the same questions; per question it is the
  ratio of the two tokens/s, and over a set it is the ratio of total tokens / total time.
  Intervals, the paired test and unstable-timing flags are in ``stats.py``.
- acceptance rate = accepted / drafted tokens; break-even acceptance and the draft cost ratio come
  from the per-round draft/verify/accept timings (see ``break_even_acceptance``).
- loop share of an output (``loop_share``) = the share of its positions i >= n (0-based) whose
  n-gram ending at i (tokens i-n+1..i) already ended at an earlier position of the same output; an
  output *loops* when that share is >= a threshold (``loops``; the report's defaults n = 8, 0.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .records import QuestionRecord

Records = Iterable[QuestionRecord]


def compression_rate(records: Records) -> float:
    records = list(records)
    f = sum(r.forwards for r in records)
    return sum(r.tokens for r in records) / f if f else float("nan")


def ctar(records: Records, w: int) -> float:
    rs = [a for r in records for _, a in r.verification_rounds()]
    return sum(a >= w for a in rs) / len(rs) if rs else float("nan")


def mean_draft_length(records: Records) -> float:
    rs = [d for r in records for d, _ in r.verification_rounds()]
    return sum(rs) / len(rs) if rs else float("nan")


def longest_draft(records: Records) -> int:
    return max((d for r in records for d, _ in r.verification_rounds()), default=0)


def acceptance_by_position(records: Records, max_pos: int) -> list[float]:
    """P(draft i accepted | draft i proposed and drafts < i accepted), i = 1..max_pos."""
    proposed, taken = [0] * max_pos, [0] * max_pos
    for r in records:
        for d, a in r.verification_rounds():
            for i in range(min(d, a + 1, max_pos)):
                proposed[i] += 1
                taken[i] += i < a
    return [t / p if p else float("nan") for t, p in zip(taken, proposed)]


def throughput(records: Records) -> float:
    """Total tokens / total time over a set of questions."""
    records = list(records)
    t = sum(r.time for r in records)
    return sum(r.tokens for r in records) / t if t > 0 else float("nan")


def speedup(method: Records, vanilla: Records) -> float:
    """Throughput ratio on the questions both sets share."""
    v = {r.question_id: r for r in vanilla}
    m = [r for r in method if r.question_id in v]
    if not m:
        return float("nan")
    return throughput(m) / throughput(v[r.question_id] for r in m)


def loop_share(ids: Sequence[int], n: int) -> float:
    """Share of positions i >= n whose n-gram ending at i occurred, ending earlier, in ``ids``.

    Why positions i >= n: the first n-gram (ending at n - 1) has nothing earlier to repeat, so a
    pure one-token loop scores 1 and threshold 1 stays reachable. Overlapping occurrences count
    (``aaaa`` repeats ``aaa``). Fewer than n + 1 tokens: 0, never looping.
    """
    if n < 1:
        raise ValueError(f"n-gram length must be >= 1, got {n}")
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for i in range(n - 1, len(ids)):
        gram = tuple(ids[i - n + 1:i + 1])
        repeated += i >= n and gram in seen
        seen.add(gram)
    return repeated / (len(ids) - n) if len(ids) > n else 0.0


def loops(ids: Sequence[int], n: int = 8, threshold: float = 0.3) -> bool:
    """Whether an output is degenerate (repeats itself): ``loop_share(ids, n) >= threshold``.
    Retrieval drafters win big on such text, so the report also gives speedups without it."""
    if not 0 < threshold <= 1:
        raise ValueError(f"loop threshold must be in (0, 1], got {threshold}")
    return loop_share(ids, n) >= threshold


def ctar_curve(records: Records, max_w: int | None = None) -> list[float]:
    """CTAR(w) for w = 1..max_w (default: the longest draft any round proposed)."""
    records = list(records)
    if max_w is None:
        max_w = longest_draft(records)
    return [ctar(records, w) for w in range(1, max_w + 1)]


def acceptance_rate(records: Records) -> float:
    """Accepted / drafted tokens over all verification rounds (per drafted token)."""
    rs = [dr for r in records for dr in r.verification_rounds()]
    drafted = sum(d for d, _ in rs)
    return sum(a for _, a in rs) / drafted if drafted else float("nan")


def by_source(records: Records) -> dict[str, dict[str, float]]:
    """Per source of a drafter's proposals (``Proposal.source``; "" = a round nothing drafted):
    its share of the verification rounds, drafts and kept drafts per round, and draft seconds per
    round. Empty for files whose rounds name no source."""
    rows: dict[str, list[tuple]] = {}
    for r in records:
        for t in r.rounds:
            if t.source is None:
                continue
            times = t.draft_s[1:] if t.draft_s is not None else [float("nan")] * (len(t.drafted) - 1)
            for src, d, a, s in zip(t.source[1:], t.drafted[1:], t.accepted[1:], times):
                rows.setdefault(src, []).append((d, a, s))
    n = sum(len(v) for v in rows.values())
    return {src: {"rounds": len(v), "share": len(v) / n, "drafted": sum(x[0] for x in v) / len(v),
                  "accepted": sum(x[1] for x in v) / len(v),
                  "acceptance": sum(x[1] for x in v) / max(1, sum(x[0] for x in v)),
                  "draft_s": sum(x[2] for x in v) / len(v)} for src, v in sorted(rows.items())}


def time_breakdown(records: Records) -> dict[str, float]:
    """Seconds spent drafting, verifying and accepting, summed over verification rounds, and
    their per-round and per-drafted-token means (nan where a count is zero)."""
    rt = [x for r in records for x in r.timed_rounds()]
    n, drafted = len(rt), sum(x[0] for x in rt)
    draft, verify, accept = (sum(x[i] for x in rt) for i in (2, 3, 4))
    nan = float("nan")
    return {
        "rounds": n, "drafted": drafted, "draft_s": draft, "verify_s": verify, "accept_s": accept,
        "round_s": (draft + verify + accept) / n if n else nan,
        "draft_s_per_round": draft / n if n else nan,
        "verify_s_per_round": verify / n if n else nan,
        "draft_s_per_token": draft / drafted if drafted else nan,
    }


def vanilla_step_cost(vanilla: Records) -> float:
    """Seconds of one vanilla decoding step: mean (draft + verify + accept) time of its rounds."""
    return time_breakdown(vanilla)["round_s"]


def draft_cost_ratio(records: Records, vanilla: Records) -> float:
    """Time of one draft step (per drafted token) / time of one vanilla step."""
    c_v = vanilla_step_cost(vanilla)
    return time_breakdown(records)["draft_s_per_token"] / c_v if c_v and c_v > 0 else float("nan")


def break_even_acceptance(records: Records, vanilla: Records, full: bool = False) -> float:
    """Acceptance rate per drafted token at which the method only breaks even with vanilla.

    Draft-only (``full=False``, the paper's (l + 1.5)/L-style bound): a drafted token costs
    c_d = draft seconds per drafted token and, when accepted, saves one vanilla step c_v, so it
    pays only if accepted with rate a >= c_d / c_v.

    Full (``full=True``): everything a round costs beyond a vanilla step counts, the longer
    verification forward and the bookkeeping included. A round costs C on average, drafts k on
    average and yields 1 + a k tokens; breaking even needs (1 + a k) c_v >= C, so
    a >= (C / c_v - 1) / k. Both come from the per-round timing breakdown of the result files.
    """
    records, vanilla = list(records), list(vanilla)
    c_v = vanilla_step_cost(vanilla)
    tb = time_breakdown(records)
    if not (c_v and c_v > 0) or not tb["drafted"]:
        return float("nan")
    if not full:
        return tb["draft_s_per_token"] / c_v
    k = tb["drafted"] / tb["rounds"]
    return (tb["round_s"] / c_v - 1) / k


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """A cost line (fixed, per unit) by least squares, with neither part negative: time is never
    negative, and noise on a nearly flat cost would otherwise give a negative fixed cost. When the
    free fit has a negative part, the best line with that part at zero is taken instead; with one
    distinct x the line goes through the origin."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, max(my / mx if mx else 0.0, 0.0)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if slope < 0:
        return max(my, 0.0), 0.0
    if my - slope * mx < 0:
        sx2 = sum(x * x for x in xs)
        return 0.0, max(sum(x * y for x, y in zip(xs, ys)) / sx2, 0.0)
    return my - slope * mx, slope


def cost_model(records: Records, vanilla: Records) -> dict:
    """What the per-step costs and the measured acceptance predict, beside the measured speedup.

    Costs fitted over the method's verification rounds: draft seconds = a + b k (b = one draft
    step, a = per-round fixed cost: the shallow pass of the current token), verify seconds =
    g + h (k + 1) (one forward of the deep layers over k + 1 positions), plus the mean
    bookkeeping (accept) seconds c; a vanilla decoding step costs t_v (its mean round). Predicted
    time of a question = its measured prefill + sum over its rounds of (a + b k + g + h (k+1) + c);
    vanilla's = its prefill + (tokens - 1) t_v. The predicted speedup is the ratio of their sums
    over the questions both ran; the gap = measured / predicted - 1 is time the model does not
    explain (Python overhead between rounds, machine drift between the two runs).
    """
    records, vanilla = list(records), list(vanilla)
    nan = float("nan")
    v = {r.question_id: r for r in vanilla}
    shared = [r for r in records if r.question_id in v]
    rt = [x for r in shared for x in r.timed_rounds()]
    vt = [x for r in vanilla for x in r.timed_rounds()]
    if not rt or not vt or not any(x[0] for x in rt) or not any(x[2] for x in rt):
        return {}
    a, b = fit_line([x[0] for x in rt], [x[2] for x in rt])
    g, h = fit_line([x[0] + 1 for x in rt], [x[3] for x in rt])
    c = sum(x[4] for x in rt) / len(rt)
    t_v = sum(x[2] + x[3] + x[4] for x in vt) / len(vt)
    by_k: dict[int, list[float]] = {}
    for x in rt:
        by_k.setdefault(x[0], []).append(x[3])
    pred_m = sum(r.prefill_s + sum(a + b * k + g + h * (k + 1) + c for k, *_ in r.timed_rounds()) for r in shared)
    pred_v = sum(v[r.question_id].prefill_s + (v[r.question_id].tokens - 1) * t_v for r in shared)
    measured = speedup(shared, vanilla)
    predicted = pred_v / pred_m if pred_m > 0 else nan
    return {
        "draft_fixed_s": a, "draft_step_s": b, "verify_fixed_s": g, "verify_per_position_s": h,
        "bookkeeping_s": c, "vanilla_step_s": t_v,
        "verify_s_by_drafted": {k: (sum(ts) / len(ts), len(ts)) for k, ts in sorted(by_k.items())},
        "draft_step_over_vanilla": b / t_v if t_v else nan,
        "predicted_speedup": predicted, "measured_speedup": measured,
        "gap": measured / predicted - 1 if predicted and predicted == predicted else nan,
    }
