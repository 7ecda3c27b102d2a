"""Every metric the harness reports, defined once, computed from result records alone.

- tokens/s of a question = generated tokens of all its turns / their summed wall time.
- CR (compression rate, Spec-Bench's "mean accepted tokens") = generated tokens / target forwards.
  Each round (the prefill included) is one target forward, so CR = tokens / rounds; vanilla = 1.
- CTAR(w) = fraction of verification rounds (the prefill excluded) that accepted at least w draft
  tokens. In the paper's notation s_k counts the bonus token and CTAR(w) = mean I(s_k - w > 0);
  s_k = accepted + 1, so I(s_k > w) = I(accepted >= w): the same number.
- mean draft length = mean drafted tokens per verification round.
- speedup = (method tokens/s) / (vanilla tokens/s) on the same questions; per question it is the
  ratio of the two tokens/s, and over a set it is the ratio of total tokens / total time.
"""

from __future__ import annotations

from collections.abc import Iterable


def _choice(rec: dict) -> dict:
    return rec["choices"][0]


def tokens(rec: dict) -> int:
    return sum(_choice(rec)["new_tokens"])


def wall_time(rec: dict) -> float:
    return sum(_choice(rec)["wall_time"])


def tokens_per_s(rec: dict) -> float:
    t = wall_time(rec)
    return tokens(rec) / t if t > 0 else float("nan")


def rounds(rec: dict) -> list[tuple[int, int]]:
    """(drafted, accepted) of every verification round of every turn (prefill excluded)."""
    out = []
    for turn in _choice(rec)["rounds"]:
        out.extend(zip(turn["drafted"][1:], turn["accepted"][1:]))
    return out


def forwards(rec: dict) -> int:
    return sum(len(turn["drafted"]) for turn in _choice(rec)["rounds"])


def compression_rate(records: Iterable[dict]) -> float:
    records = list(records)
    f = sum(forwards(r) for r in records)
    return sum(tokens(r) for r in records) / f if f else float("nan")


def ctar(records: Iterable[dict], w: int) -> float:
    rs = [a for r in records for _, a in rounds(r)]
    return sum(a >= w for a in rs) / len(rs) if rs else float("nan")


def mean_draft_length(records: Iterable[dict]) -> float:
    rs = [d for r in records for d, _ in rounds(r)]
    return sum(rs) / len(rs) if rs else float("nan")


def acceptance_by_position(records: Iterable[dict], max_pos: int) -> list[float]:
    """P(draft i accepted | draft i proposed and drafts < i accepted), i = 1..max_pos."""
    proposed, taken = [0] * max_pos, [0] * max_pos
    for r in records:
        for d, a in rounds(r):
            for i in range(min(d, a + 1, max_pos)):
                proposed[i] += 1
                taken[i] += i < a
    return [t / p if p else float("nan") for t, p in zip(taken, proposed)]


def throughput(records: Iterable[dict]) -> float:
    """Total tokens / total time over a set of questions."""
    records = list(records)
    t = sum(wall_time(r) for r in records)
    return sum(tokens(r) for r in records) / t if t > 0 else float("nan")


def speedup(method: Iterable[dict], vanilla: Iterable[dict]) -> float:
    """Throughput ratio on the questions both sets share."""
    v = {r["question_id"]: r for r in vanilla}
    m = [r for r in method if r["question_id"] in v]
    if not m:
        return float("nan")
    return throughput(m) / throughput(v[r["question_id"]] for r in m)
