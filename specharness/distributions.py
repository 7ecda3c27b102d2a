"""Exact distributions of a target's output and the goodness-of-fit test sampled outputs must pass.

One implementation for the ``lossless`` command and the tests: the exact distribution of the first
k generated tokens is enumerated by forwarding the target on every prefix (tiny vocabularies), and
sampled counts are compared with it by a chi-square test whose sparse cells are pooled so every
expected count is at least 5; ``samples_for_power`` picks N for a stated power.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Iterable

import numpy as np


@dataclass
class ChiSquare:
    statistic: float
    df: int
    p_value: float
    cells: int  # after pooling
    n: int
    pooled_cells: int  # how many original cells were merged into the pooled cell

    def as_dict(self) -> dict:
        return asdict(self)


def pool_cells(probs: dict[Any, float], n: int, min_expected: float = 5.0) -> list[list[Any]]:
    """Group cells so every group's expected count n * p is >= ``min_expected``.

    Cells that pass on their own stay alone; the rest (smallest first) form one pooled cell; if
    that pooled cell is still too small it absorbs the smallest remaining cell until it is not.
    """
    items = sorted(probs.items(), key=lambda kv: kv[1], reverse=True)
    alone = [[k] for k, p in items if n * p >= min_expected]
    rest = [k for k, p in items if n * p < min_expected]
    if rest:
        mass = sum(probs[k] for k in rest)
        while n * mass < min_expected and alone:
            extra = alone.pop()  # the smallest cell that stood alone
            rest.extend(extra)
            mass += sum(probs[k] for k in extra)
        groups = alone + [rest]
    else:
        groups = alone
    return groups


def chi_square(counts: Counter, probs: dict[Any, float], min_expected: float = 5.0,
               other: Any = None) -> ChiSquare:
    """Goodness of fit of observed ``counts`` to the exact ``probs`` (cells pooled as above).

    ``probs`` may leave out a tail; its mass (1 - sum) becomes the cell ``other``, into which every
    observed key absent from ``probs`` is counted.
    """
    from scipy.stats import chi2
    n = sum(counts.values())
    probs = dict(probs)
    tail = 1.0 - sum(probs.values())
    if tail > 1e-12 or other in probs:
        probs[other] = probs.get(other, 0.0) + max(tail, 0.0)
    obs = Counter()
    for k, c in counts.items():
        obs[k if k in probs else other] += c
    groups = pool_cells(probs, n, min_expected)
    exp = np.array([n * sum(probs[k] for k in g) for g in groups])
    got = np.array([sum(obs[k] for k in g) for g in groups], float)
    if len(groups) < 2:
        return ChiSquare(0.0, 0, 1.0, len(groups), n, 0)
    stat = float(np.sum((got - exp) ** 2 / np.where(exp > 0, exp, np.inf)))
    df = len(groups) - 1
    return ChiSquare(stat, df, float(chi2.sf(stat, df)), len(groups), n, len(groups[-1]) if len(groups[-1]) > 1 else 0)


def power(n: int, df: int, w: float, alpha: float) -> float:
    """Power of the chi-square test with ``df`` degrees of freedom against effect size w."""
    from scipy.stats import chi2, ncx2
    if df < 1:
        return 0.0
    return float(ncx2.sf(chi2.ppf(1 - alpha, df), df, n * w * w))


POWER_GOAL = 0.9  # the power a sampling check's N is chosen for against its effect size


def samples_for_power(probs: dict[Any, float], w: float, alpha: float, target: float = POWER_GOAL,
                      n_min: int = 200, n_max: int = 200_000) -> tuple[int, int, float]:
    """Smallest N (pooling included) with power >= target; returns (N, df, power)."""
    n = n_min
    for _ in range(60):
        df = len(pool_cells(probs, n)) - 1
        if df >= 1 and power(n, df, w, alpha) >= target:
            # shrink back to the smallest N at this df
            lo, hi = n // 2, n
            while hi - lo > max(1, n // 100):
                mid = (lo + hi) // 2
                d = len(pool_cells(probs, mid)) - 1
                if d >= 1 and power(mid, d, w, alpha) >= target:
                    hi = mid
                else:
                    lo = mid
            d = len(pool_cells(probs, hi)) - 1
            return hi, d, power(hi, d, w, alpha)
        if n >= n_max:
            break
        n = min(n_max, int(n * 1.5))
    df = len(pool_cells(probs, n)) - 1
    return n, df, power(n, df, w, alpha)


def next_token_probs(target, ids: list[int], temperature: float) -> np.ndarray:
    """The target's exact sampling distribution after ``ids`` (float64)."""
    import torch
    with torch.inference_mode():
        logits = target.logits(list(ids), last=True)[-1].double()
    return torch.softmax(logits / temperature, dim=-1).cpu().numpy()


def exact_sequence_distribution(target, prompt: list[int], k: int, temperature: float) -> dict[tuple, float]:
    """P(first k generated tokens), every prefix forwarded; sequences end early at an eos."""
    eos = target.eos_ids
    out: dict[tuple, float] = {}
    frontier = [((), 1.0)]
    for _ in range(k):
        nxt = []
        for prefix, mass in frontier:
            p = next_token_probs(target, prompt + list(prefix), temperature)
            for tok in range(len(p)):
                seq, m = prefix + (tok,), mass * float(p[tok])
                if tok in eos:
                    out[seq] = m
                else:
                    nxt.append((seq, m))
        frontier = nxt
    out.update(dict(frontier))
    return out


def marginal(joint: dict[tuple, float], positions: Iterable[int] | int) -> dict[Any, float]:
    """The distribution of the tokens at ``positions`` (one index: that token alone) of a joint."""
    out: Counter = Counter()
    single = isinstance(positions, int)
    idx = [positions] if single else list(positions)
    for seq, p in joint.items():
        key = tuple(seq[i] for i in idx if i < len(seq))
        out[key[0] if single and key else key] += p
    return dict(out)
