"""python -m specharness lossless --method NAME: is the method really lossless?

Three checks, each reported with its numbers and seeds; the command exits 1 when one fails.

greedy
    Every selected Spec-Bench prompt (default: the first question of every subtask, every turn;
    each turn's prompt is built from vanilla's earlier answers so both methods see the same ids)
    is decoded by ``vanilla`` and by the method, whole turns compared token for token with a
    resync at each divergence; a divergence passes only as a near-tie certified against an
    independent float32 reference and a bound the engine cannot widen (``specharness.identity``).

sampling (a), exact
    A tiny random model (4 layers, so exit layers 1-3 fit) with a small vocabulary (default 8
    tokens), where the exact distribution of the first k generated tokens (default k = 3) is
    enumerated by forwarding the target on every prefix. k = 3 because the engine's first token comes from the prefill, before any drafting:
    with k = 2 the round that produces token 2 has no room for a draft, so nothing speculative would
    be tested; with k = 3 that round drafts one token and both the accept path (draft + bonus) and
    the reject path (residual resample) shape tokens 2 and 3. N sequences are sampled through the
    method (its drafter and verifier; seeds spread from --seed by numpy's SeedSequence) and
    compared with a chi-square goodness-of-fit test, cells with expected count < 5 pooled.

sampling (b), the real model
    The method's first token and its second token given the first, on the target (default
    SmolLM2) and a short open-ended prompt, against the target's exact next-token distributions
    (one forward for the first token, one per frequent first token for the second); the tail of
    each distribution is pooled into one cell so every expected count is >= 5. Generation stops at
    3 tokens so the round that makes token 2 may draft one token. Two tests (first token; second
    given first, the sum of per-first-token chi-squares), each at alpha / 2.

Choosing N: unless given, N is the smallest sample size for which the chi-square test at level
alpha has power >= 0.9 against a deviation of Cohen's effect size w (w = sqrt(sum (p1 - p0)^2 /
p0); default w = 0.1 for (a), 0.2 for (b)), computed from the noncentral chi-square with the
pooled number of cells. An always-accepting verifier with a random drafter moves w far above 1.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import numpy as np

from .distributions import (chi_square, exact_sequence_distribution, next_token_probs, pool_cells, power,
                            samples_for_power)
from .runner import Settings

LATE_POSITION = 2  # level (c): rejections of the 2nd draft of a round or later must occur
B_MAX_SAMPLES = 20_000  # level (b)'s cap: flat distributions would otherwise ask for millions
B_PROMPT = "My favourite colour is"  # open-ended: many next tokens with mass, not one


# ---- running a method ------------------------------------------------------------------------------
def sample(method, prompt: list[int], k: int, n: int, temperature: float, seed: int,
           progress: bool = False, generate_tokens: int | None = None) -> Counter:
    """First k tokens of n generations of ``generate_tokens`` (default k) tokens; generation i uses
    seed ``sample_seeds(seed, n)[i]``."""
    s = Settings(max_new_tokens=generate_tokens or k, temperature=temperature, seed=seed, repeats=1, warmup=0)
    counts: Counter = Counter()
    counts.drafts = [0, 0]  # type: ignore[attr-defined]  # drafted, accepted over all rounds
    counts.flow = [0, 0]  # type: ignore[attr-defined]  # speculative rounds, generations ended by an EOS
    counts.by_position = {}  # type: ignore[attr-defined]  # depth on the taken path (1-based) -> [reached, accepted, rejected]
    it = range(n)
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc=f"sampling {method.name}", unit="seq", leave=False, file=sys.stderr)
    seeds = sample_seeds(seed, n)
    for i in it:
        g = method.generate(prompt, s, seeds[i])
        counts[tuple(g.token_ids[:k])] += 1
        counts.flow[0] += sum(r.drafted > 0 for r in g.rounds)  # type: ignore[attr-defined]
        counts.flow[1] += g.stop == "eos"  # type: ignore[attr-defined]
        for r in g.rounds:
            counts.drafts[0] += r.drafted  # type: ignore[attr-defined]
            counts.drafts[1] += r.accepted  # type: ignore[attr-defined]
            # by depth along the path the round took: its kept drafts, then the one rejected there (a
            # tree's rejected siblings elsewhere are not on it; a chain's drafts past a rejection neither)
            for i in range(1, r.accepted + 1 + (r.rejected_at > 0)):
                tally = counts.by_position.setdefault(i, [0, 0, 0])  # type: ignore[attr-defined]
                tally[0] += 1
                tally[1] += i <= r.accepted
                tally[2] += i == r.rejected_at
    return counts


def sample_seeds(seed: int, n: int) -> list[int]:
    """n well-spread 31-bit seeds from one base seed (numpy's SeedSequence). Consecutive integers
    would do for most generators, but a run of nearby seeds is a needless structure to put under a
    test whose false-alarm rate should be exactly alpha."""
    return [int(x) >> 1 for x in np.random.SeedSequence(seed).generate_state(n)]


def _exercised(counts: Counter) -> dict:
    drafted, accepted = getattr(counts, "drafts", (0, 0))
    by_pos = getattr(counts, "by_position", {})
    rounds, eos_stops = getattr(counts, "flow", (0, 0))
    return {"drafted": drafted, "accepted": accepted, "rejected_rounds_or_drafts": drafted - accepted,
            "speculative_rounds": rounds, "eos_stops": eos_stops,
            "by_position": {i: dict(zip(("proposed", "accepted", "rejected"), t)) for i, t in sorted(by_pos.items())}}


def rejections_from(exercised: dict, position: int) -> int:
    """Rejections at draft position ``position`` (1-based) or later: what level (c) must see."""
    return sum(t["rejected"] for i, t in exercised["by_position"].items() if int(i) >= position)


# ---- the levels ------------------------------------------------------------------------------------
def level_a(method, target, prompt: list[int], k: int, temperature: float, n: int | None, w: float,
            alpha: float, seed: int, progress: bool = False, level: str = "a") -> dict:
    """The first ``k`` generated tokens against their exact joint distribution (levels a and c)."""
    exact = exact_sequence_distribution(target, prompt, k, temperature)
    if n is None:
        n, df, pw = samples_for_power(exact, w, alpha)
    else:
        df = len(pool_cells(exact, n)) - 1
        pw = power(n, df, w, alpha)
    started = time.perf_counter()
    counts = sample(method, prompt, k, n, temperature, seed, progress)
    test = chi_square(counts, exact)
    exercised = _exercised(counts)
    return {"level": level, "vocab": target.vocab_size, "k": k, "temperature": temperature, "prompt": prompt,
            "samples": n, "seeds": f"numpy SeedSequence({seed}).generate_state({n}) >> 1",
            "effect_size_w": w, "alpha": alpha,
            "power": pw, "cells": len(exact), "test": test.as_dict(), "passed": test.p_value >= alpha,
            "seconds": time.perf_counter() - started, "exercised": exercised}


def level_c(method, target, prompt: list[int], k: int, temperature: float, n: int | None, w: float,
            alpha: float, seed: int, progress: bool = False, position: int = LATE_POSITION) -> dict:
    """Level (a) with generations long enough that one round holds several drafts, so drafts at
    ``position`` and later are proposed and rejected; it fails when none was rejected there
    (a check that did not check must not pass), unless the method proposes no drafts at all."""
    r = level_a(method, target, prompt, k, temperature, n, w, alpha, seed, progress, level="c")
    late = rejections_from(r["exercised"], position)
    r["late_position"], r["late_rejections"] = position, late
    r["late_exercised"] = late > 0 or r["exercised"]["drafted"] == 0
    r["passed"] = r["passed"] and r["late_exercised"]
    return r


def level_b(method, target, prompt: list[int], temperature: float, n: int | None, w: float, alpha: float,
            seed: int, progress: bool = False, min_expected: float = 5.0, max_samples: int = B_MAX_SAMPLES) -> dict:
    p1 = next_token_probs(target, prompt, temperature)
    order = np.argsort(-p1)

    def head(p: np.ndarray, n_: int, mass: float = 1.0) -> dict:
        """Cells expected >= min_expected; the rest stays out (chi_square adds the tail cell)."""
        idx = np.argsort(-p)
        keep = idx[n_ * mass * p[idx] >= min_expected]
        return {int(i): float(p[i]) for i in keep}

    # the frequent first tokens and their exact next-token distributions (one forward each)
    cand = [int(t) for t in order[:32] if p1[t] >= 0.005 and int(t) not in target.eos_ids]
    cond_all = {t: next_token_probs(target, prompt + [t], temperature) for t in cand}
    if n is None:
        # N for power on both tests: the first token, and the first two tokens jointly (which is
        # what the second-given-first test sees, cell by cell, once the first is known)
        n1, _, _ = samples_for_power({int(i): float(p1[i]) for i in order[:2000]} | {"tail": float(
            1 - p1[order[:2000]].sum())}, w, alpha / 2)
        joint = {(t, int(u)): float(p1[t] * cond_all[t][u]) for t in cand for u in np.argsort(-cond_all[t])[:200]}
        joint["tail"] = max(0.0, 1.0 - sum(joint.values()))
        n2, _, _ = samples_for_power(joint, w, alpha / 2)
        wanted = max(n1, n2)
        n = min(wanted, max_samples)  # flat distributions ask for millions: capped, the power said below
    else:
        wanted = n
    df = len(head(p1, n)) or 1
    pw = power(n, df, w, alpha / 2)
    firsts = [t for t in head(p1, n) if t not in target.eos_ids]
    cond = {t: cond_all.get(t) if t in cond_all else next_token_probs(target, prompt + [t], temperature)
            for t in firsts}
    started = time.perf_counter()
    counts = sample(method, prompt, 2, n, temperature, seed, progress, generate_tokens=3)
    exercised = _exercised(counts)
    c1 = Counter()
    for seq, c in counts.items():
        c1[seq[0]] += c
    t1 = chi_square(c1, head(p1, n), min_expected, other="other")
    stat, dof, per_first = 0.0, 0, {}
    for t in firsts:
        sub = Counter()
        for seq, c in counts.items():
            if seq[0] == t and len(seq) > 1:
                sub[seq[1]] += c
        m = sum(sub.values())
        if m < 2 * min_expected:
            continue
        r = chi_square(sub, head(cond[t], m), min_expected, other="other")
        stat += r.statistic
        dof += r.df
        per_first[t] = {"n": m, "statistic": r.statistic, "df": r.df, "p_value": r.p_value}
    from scipy.stats import chi2
    p2 = float(chi2.sf(stat, dof)) if dof else 1.0
    return {"level": "b", "model": target.name, "prompt": prompt, "temperature": temperature, "samples": n,
            "seeds": f"numpy SeedSequence({seed}).generate_state({n}) >> 1", "effect_size_w": w, "alpha": alpha,
            "power_first_token": pw, "samples_for_power": wanted, "capped": wanted > n,
            "first_token": t1.as_dict(),
            "second_given_first": {"statistic": stat, "df": dof, "p_value": p2, "by_first_token": per_first},
            "passed": t1.p_value >= alpha / 2 and p2 >= alpha / 2, "seconds": time.perf_counter() - started,
            "exercised": exercised}
