"""Statistics over questions: bootstrap confidence intervals, a paired test, unstable timings.

The unit of resampling is the *question*: questions are the independent draws from the benchmark,
while a question's timed repeats (and its turns) are folded into one number first:

- a question's time = the median over its timed repeats of the repeat's total time (all turns);
  its tokens = generated tokens of all turns (identical on every repeat: the runner checks that).
- speedup of method M over vanilla V on a set of questions = (sum tok_M / sum t_M) /
  (sum tok_V / sum t_V), the throughput ratio ``metrics.speedup`` defines. Its 95% interval is a
  BCa bootstrap (``scipy.stats.bootstrap``) that resamples questions *paired*: a resampled question
  brings both its M and its V timing, so per-question difficulty cancels.
- an average over subtasks (the paper's "Avg." column) = mean of the per-subtask speedups; its
  interval is a stratified bootstrap (questions resampled within each subtask).
- CR = sum tokens / sum target forwards, with a BCa interval over questions.
- paired test (is A faster than B on these questions?): Wilcoxon signed-rank test on the
  per-question log ratio log(time per token of A / time per token of B). Why this one: timings
  are paired by question, their noise is skewed and heavy-tailed (a background process can
  double one repeat), and a ratio is what matters, so the log ratio is symmetric around 0 under
  "no difference"; the signed-rank test needs no normality, is exact for n <= 50 without ties,
  and is only mildly less powerful than a t-test when the data are normal.
- unstable timing: a question whose repeats have a coefficient of variation (sample std / mean)
  above 10% is flagged; its median is still used, but the summary says how many were flagged.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .records import QuestionRecord

CV_LIMIT = 0.10
MIN_QUESTIONS = 5  # below this a bootstrap interval is printed but called rough
CONFIDENCE = 0.95
N_RESAMPLES = 4999
SEED = 12345  # bootstrap resampling is seeded: the same files always give the same intervals


# ---- per-question folding (a question's tokens, forwards and time: QuestionRecord) --------------
def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample std / mean; 0 for a single value (nothing to vary)."""
    if len(values) < 2:
        return 0.0
    m = float(np.mean(values))
    return float(np.std(values, ddof=1) / m) if m > 0 else float("nan")


def timing_cv(rec: QuestionRecord) -> float:
    return coefficient_of_variation(rec.repeat_times())


@dataclass
class Stability:
    questions: int
    repeats: int  # fewest repeats any question had
    unstable: list = field(default_factory=list)  # question ids with CV > limit
    max_cv: float = 0.0

    @property
    def flagged(self) -> bool:
        return bool(self.unstable)


def unstable_timings(records: Iterable[QuestionRecord], limit: float = CV_LIMIT) -> Stability:
    """Questions whose timed repeats vary by more than ``limit`` (coefficient of variation)."""
    records = list(records)
    cvs = [(r.question_id, timing_cv(r)) for r in records]
    reps = min((len(r.repeat_times()) for r in records), default=0)
    bad = [q for q, cv in cvs if cv > limit]
    return Stability(len(records), reps, bad, max((cv for _, cv in cvs), default=0.0))


# ---- intervals ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    n: int
    method: str = "BCa"  # how the interval was obtained ("BCa", "percentile", "degenerate", "none")

    def covers(self, x: float) -> bool:
        return self.low <= x <= self.high

    def fmt(self, digits: int = 2, suffix: str = "") -> str:
        if not math.isfinite(self.value):
            return "-"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.value:.{digits}f}{suffix}"
        return f"{self.value:.{digits}f}{suffix} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


NAN_ESTIMATE = Estimate(float("nan"), float("nan"), float("nan"), 0, "none")


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """The median of ``values`` with a distribution-free interval: the order statistics whose ranks a
    binomial(n, 1/2) bounds (``scipy.stats.quantile_test``), for repeated timings of one thing on a
    shared machine, whose noise is skewed and heavy-tailed. Fewer than 6 values have no 95% interval
    (nan bounds): the widest, min to max, covers less than that."""
    from scipy.stats import quantile_test
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if not x.size:
        return NAN_ESTIMATE
    med = float(np.median(x))
    ci = quantile_test(x, q=med, p=0.5).confidence_interval(confidence)
    lo, hi = float(ci.low), float(ci.high)
    return Estimate(med, lo, hi, int(x.size), "order statistics" if math.isfinite(lo) and math.isfinite(hi) else "none")


def _bootstrap(samples: tuple[np.ndarray, ...], statistic, value: float, paired: bool,
               confidence: float, n_resamples: int, seed: int) -> Estimate:
    """scipy's BCa bootstrap with the two corner cases it cannot handle answered explicitly:
    every resample giving the same value (identical timings: the interval is that value), and
    too few questions for the jackknife (percentile interval instead; n = 1: no interval)."""
    from scipy.stats import bootstrap
    n = min(len(s) for s in samples)
    if not math.isfinite(value):
        return Estimate(value, float("nan"), float("nan"), n, "none")
    if n < 2:
        return Estimate(value, float("nan"), float("nan"), n, "none")
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bootstrap(samples, statistic, paired=paired, vectorized=True, axis=-1,
                            confidence_level=confidence, n_resamples=n_resamples, method=method,
                            rng=np.random.default_rng(seed))
        dist = np.asarray(res.bootstrap_distribution)
        finite = dist[np.isfinite(dist)]
        if finite.size and np.ptp(finite) <= 1e-12 * max(1.0, abs(value)):
            return Estimate(value, value, value, n, "degenerate")
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return Estimate(value, lo, hi, n, method)
    return Estimate(value, float("nan"), float("nan"), n, "none")


@dataclass(frozen=True)
class Paired:
    """Per-question arrays for one method and its baseline on the questions both ran."""

    ids: list
    tok_m: np.ndarray
    t_m: np.ndarray
    tok_v: np.ndarray
    t_v: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


def pair(method: Iterable[QuestionRecord], baseline: Iterable[QuestionRecord]) -> Paired:
    """Match question records by id (records only one side has are left out)."""
    base = {r.question_id: r for r in baseline}
    m = [r for r in method if r.question_id in base]
    b = [base[r.question_id] for r in m]
    return Paired([r.question_id for r in m],
                  np.array([r.tokens for r in m], float), np.array([r.time for r in m], float),
                  np.array([r.tokens for r in b], float), np.array([r.time for r in b], float))


def ratio_of_throughputs(tok_m, t_m, tok_v, t_v, axis=-1):
    return (np.sum(tok_m, axis) / np.sum(t_m, axis)) / (np.sum(tok_v, axis) / np.sum(t_v, axis))


def speedup_ci(p: Paired, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
               seed: int = SEED) -> Estimate:
    """Speedup of the method over the baseline with a paired BCa bootstrap interval over questions."""
    if len(p) == 0:
        return NAN_ESTIMATE
    value = float(ratio_of_throughputs(p.tok_m, p.t_m, p.tok_v, p.t_v))
    return _bootstrap((p.tok_m, p.t_m, p.tok_v, p.t_v), ratio_of_throughputs, value, True,
                      confidence, n_resamples, seed)


def mean_over_strata_ci(strata: Sequence[tuple[np.ndarray, ...]], statistic, confidence: float = CONFIDENCE,
                        n_resamples: int = N_RESAMPLES, seed: int = SEED) -> Estimate:
    """Mean over strata (subtasks) of ``statistic(*arrays)``, with a stratified BCa bootstrap.

    Each stratum is a tuple of per-question arrays resampled together (paired); strata are
    resampled independently (questions within a subtask), as scipy does for several samples. A
    bootstrap sample here is the array of question indices of one stratum.
    """
    strata = [s for s in strata if len(s[0])]
    if not strata:
        return NAN_ESTIMATE
    value = float(np.mean([statistic(*s) for s in strata]))
    n = sum(len(s[0]) for s in strata)
    if len(strata) == 1:
        est = _bootstrap(strata[0], statistic, value, True, confidence, n_resamples, seed)
        return est
    if min(len(s[0]) for s in strata) < 2:
        return Estimate(value, float("nan"), float("nan"), n, "none")

    def stat(*idx, axis=-1):
        vals = [statistic(*(a[np.asarray(ix).astype(int)] for a in s), axis=-1) for s, ix in zip(strata, idx)]
        return np.mean(vals, axis=0)

    samples = tuple(np.arange(len(s[0]), dtype=float) for s in strata)
    est = _bootstrap(samples, stat, value, False, confidence, n_resamples, seed)
    return Estimate(est.value, est.low, est.high, n, est.method)


def mean_speedup_ci(strata: Sequence[Paired], **kw) -> Estimate:
    """Mean over subtasks of each subtask's speedup (the paper's "Avg."), stratified bootstrap."""
    return mean_over_strata_ci([(s.tok_m, s.t_m, s.tok_v, s.t_v) for s in strata], ratio_of_throughputs, **kw)


def _ratio(a, b, axis=-1):
    return np.sum(a, axis) / np.sum(b, axis)


def ratio_ci(num: Sequence[float], den: Sequence[float], confidence: float = CONFIDENCE,
             n_resamples: int = N_RESAMPLES, seed: int = SEED) -> Estimate:
    """sum(num) / sum(den) with a BCa interval, resampling (num, den) pairs together."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if num.size == 0 or den.sum() <= 0:
        return NAN_ESTIMATE
    return _bootstrap((num, den), _ratio, float(num.sum() / den.sum()), True, confidence, n_resamples, seed)


def cr_ci(records: Iterable[QuestionRecord], **kw) -> Estimate:
    """Compression rate (tokens / target forwards) with a bootstrap interval over questions."""
    records = list(records)
    return ratio_ci([r.tokens for r in records], [r.forwards for r in records], **kw)


def mean_cr_ci(strata: Sequence[Iterable[QuestionRecord]], **kw) -> Estimate:
    """Mean over subtasks of each subtask's CR, stratified bootstrap."""
    arrays = []
    for recs in strata:
        recs = list(recs)
        arrays.append((np.array([r.tokens for r in recs], float), np.array([r.forwards for r in recs], float)))
    return mean_over_strata_ci(arrays, _ratio, **kw)


def throughput_ci(records: Iterable[QuestionRecord], **kw) -> Estimate:
    """Tokens/s (total tokens / total median time) with a bootstrap interval over questions."""
    records = list(records)
    return ratio_ci([r.tokens for r in records], [r.time for r in records], **kw)


# ---- paired test -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairedTest:
    n: int
    median_log_ratio: float  # median of log(time/token of A / time/token of B); < 0: A faster
    statistic: float
    p_two_sided: float
    p_a_faster: float  # one-sided: A's time per token is smaller than B's
    test: str = "Wilcoxon signed-rank on per-question log time-per-token ratios"

    @property
    def a_over_b_speed(self) -> float:
        """A's speed relative to B's at the median question (> 1: A faster)."""
        return math.exp(-self.median_log_ratio) if math.isfinite(self.median_log_ratio) else float("nan")


def paired_test(a: Iterable[QuestionRecord], b: Iterable[QuestionRecord]) -> PairedTest:
    """Is method A faster than method B on the questions both ran? (see the module docstring)"""
    from scipy.stats import wilcoxon
    p = pair(a, b)
    n = len(p)
    if n == 0:
        return PairedTest(0, float("nan"), float("nan"), float("nan"), float("nan"))
    d = np.log((p.t_m / p.tok_m) / (p.t_v / p.tok_v))
    med = float(np.median(d))
    if n < 2 or np.all(d == 0):
        return PairedTest(n, med, 0.0, 1.0, 1.0 if n >= 2 else float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        two = wilcoxon(d, alternative="two-sided", zero_method="wilcox")
        less = wilcoxon(d, alternative="less", zero_method="wilcox")
    return PairedTest(n, med, float(two.statistic), float(two.pvalue), float(less.pvalue))
