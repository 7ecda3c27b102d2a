"""python -m specharness lossless --method NAME: is the method really lossless?

Three checks, each reported with its numbers and seeds; the command exits 1 when one fails.

greedy
    Every selected Spec-Bench prompt (default: the first question of every subtask, every turn;
    each turn's prompt is built from vanilla's earlier answers so both methods see the same ids)
    is decoded by ``vanilla`` and by the method; the outputs must be token-identical. At a
    mismatch the suite reports the question, turn and first divergent position, and runs the
    target once over the vanilla prefix to read its logits there. When the two outputs' tokens
    both sit within the tolerance of the target's top logit, the divergence is a *near-tie*:
    verifying k tokens in one forward may round differently from k one-token forwards, so it is
    reported, not failed. Anything else is a *bug*. The tolerance is 1e-4 in float32. In float16
    and bfloat16 it is calibrated on the model at hand (``calibrate_tolerance``): twice the largest
    disagreement, in units in the last place of the top logit, between one-token and 8-token
    forwards over the same positions (floors 1e-2 and 5e-2); ``--tolerance`` fixes it instead.

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

import json
import math
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .distributions import (chi_square, exact_sequence_distribution, next_token_probs, pool_cells, power,
                            samples_for_power)
from .errors import UsageError
from .runner import Settings, prompt_ids, run_question

TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}  # absolute floors
MANTISSA_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}
CALIBRATION_PROMPT = "Explain how a refrigerator keeps food cold, step by step."  # not a benchmark question


def ulp(x: float, dtype: str) -> float:
    """The spacing of ``dtype``'s numbers at ``x`` (a unit in the last place)."""
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - MANTISSA_BITS.get(dtype, 23))


@dataclass
class Tolerance:
    """How far below the target's top logit a token may sit and still make a near-tie: the larger
    of ``absolute`` and ``ulps`` units in the last place of the top logit in ``dtype``."""

    absolute: float
    ulps: float = 0.0
    dtype: str = "float32"
    noise_ulps: float | None = None  # what calibration measured (None: not calibrated)

    def at(self, top_logit: float) -> float:
        return max(self.absolute, self.ulps * ulp(top_logit, self.dtype))

    def __str__(self) -> str:
        return f"{self.absolute:g}" if not self.ulps else f"max({self.absolute:g}, {self.ulps:g} ulp)"


def kernel_noise_ulps(target, dtype: str, tokens: int = 64) -> float:
    """The largest disagreement of the top-2 logits between one-token forwards and 8-token forwards
    over the same greedy continuation, in ulps of the top logit: how much this model's logits move
    with the width of a forward in this dtype and on these kernels."""
    import torch
    prompt = (target.chat_ids([{"role": "user", "content": CALIBRATION_PROMPT}]) if target.tokenizer is not None
              else [1 + i % (target.vocab_size - 1) for i in range(16)])
    target.expect_widths(8)  # the 8-token forwards run a verification's static graph, as in a run
    with torch.inference_mode():
        cache = target.new_cache(len(prompt) + tokens + 8)
        nxt = int(target.forward(torch.tensor(prompt, device=target.device), cache, 0, head=True,
                                 prefill=True).logits[-1].argmax())
        seq, one = list(prompt), []
        for _ in range(tokens):
            seq.append(nxt)
            logits = target.forward(torch.tensor([nxt], device=target.device), cache, len(seq) - 1, head=True).logits[-1]
            one.append(logits.float())
            nxt = int(logits.argmax())
        cache = target.new_cache(len(seq) + 8)
        target.forward(torch.tensor(prompt, device=target.device), cache, 0, prefill=True)
        wide = []
        for s0 in range(len(prompt), len(seq), 8):
            wide += list(target.forward(torch.tensor(seq[s0:s0 + 8], device=target.device), cache, s0,
                                        head=True).logits.float())
    worst = 0.0
    for a, b in zip(one, wide):
        top = a.topk(2).indices
        worst = max(worst, float((a[top] - b[top]).abs().max()) / ulp(float(a[top[0]]), dtype))
    return worst


def calibrate_tolerance(target, dtype: str, given: float | None = None) -> Tolerance:
    """``--tolerance`` when given; 1e-4 in float32; else twice the measured kernel noise (vanilla's
    and the method's numerics may each sit that far from the certifying forward), at least 1 ulp,
    with the dtype's absolute floor."""
    if given is not None:
        return Tolerance(given)
    if dtype not in ("float16", "bfloat16"):
        return Tolerance(TOLERANCES.get(dtype, 1e-4))
    noise = kernel_noise_ulps(target, dtype)
    return Tolerance(TOLERANCES[dtype], 2 * max(1.0, noise), dtype, noise)
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
    counts.by_position = {}  # type: ignore[attr-defined]  # draft position (1-based) -> [proposed, accepted, rejected]
    it = range(n)
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc=f"sampling {method.name}", unit="seq", leave=False, file=sys.stderr)
    seeds = sample_seeds(seed, n)
    for i in it:
        g = method.generate(prompt, s, seeds[i])
        counts[tuple(g.token_ids[:k])] += 1
        for r in g.rounds:
            counts.drafts[0] += r.drafted  # type: ignore[attr-defined]
            counts.drafts[1] += r.accepted  # type: ignore[attr-defined]
            for i in range(1, r.drafted + 1):
                tally = counts.by_position.setdefault(i, [0, 0, 0])  # type: ignore[attr-defined]
                tally[0] += 1
                tally[1] += i <= r.accepted
                tally[2] += i == r.accepted + 1
    return counts


def sample_seeds(seed: int, n: int) -> list[int]:
    """n well-spread 31-bit seeds from one base seed (numpy's SeedSequence). Consecutive integers
    would do for most generators, but a run of nearby seeds is a needless structure to put under a
    test whose false-alarm rate should be exactly alpha."""
    return [int(x) >> 1 for x in np.random.SeedSequence(seed).generate_state(n)]


def _exercised(counts: Counter) -> dict:
    drafted, accepted = getattr(counts, "drafts", (0, 0))
    by_pos = getattr(counts, "by_position", {})
    return {"drafted": drafted, "accepted": accepted, "rejected_rounds_or_drafts": drafted - accepted,
            "by_position": {i: dict(zip(("proposed", "accepted", "rejected"), t)) for i, t in sorted(by_pos.items())}}


def rejections_from(exercised: dict, position: int) -> int:
    """Rejections at draft position ``position`` (1-based) or later: what level (c) must see."""
    return sum(t["rejected"] for i, t in exercised["by_position"].items() if int(i) >= position)


@dataclass
class Mismatch:
    question_id: Any
    subtask: str
    turn: int
    position: int
    vanilla_token: int | None
    method_token: int | None
    margin: float  # target's top-1 minus top-2 logit at the divergence (vanilla prefix)
    runner_up: int
    kind: str  # "near-tie" | "bug"
    vanilla_gap: float | None = None  # top logit minus vanilla's token's logit there
    method_gap: float | None = None  # top logit minus the method's token's logit there
    tolerance: float | None = None  # the tolerance at this position


@dataclass
class GreedyResult:
    prompts: int = 0
    identical: int = 0
    tokens: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    tolerance: "Tolerance | float" = 1e-4
    not_compared: int = 0  # later turns of a question after a divergence (their prompts differ)

    @property
    def passed(self) -> bool:
        return all(m.kind == "near-tie" for m in self.mismatches)


def next_logits(target, ids: list[int]):
    """The target's float logits for the token after ``ids`` (one eager forward)."""
    import torch
    with torch.inference_mode():
        return target.logits(list(ids))[-1].float()


def top2_margin(target, ids: list[int]) -> tuple[float, int, int]:
    """(top-1 minus top-2 logit, top-1 id, top-2 id) of the target's next token after ``ids``."""
    import torch
    top = torch.topk(next_logits(target, ids), 2)
    return float(top.values[0] - top.values[1]), int(top.indices[0]), int(top.indices[1])


def classify(margin: float, tolerance: float, method_token: int | None, top1: int, top2: int,
             vanilla_token: int | None = None, gaps: dict[int, float] | None = None) -> str:
    """A divergence is a near-tie only when both outputs' tokens sit within ``tolerance`` of the
    target's top logit (which one each took may flip with the kernel; a third token may share the
    tie). ``gaps`` = token -> top logit minus its logit; without it only the top two are known
    (gap 0 and ``margin``). Without ``vanilla_token``, vanilla is taken to have chosen the top-1.
    Any other divergence is a bug."""
    known = gaps if gaps is not None else {top1: 0.0, top2: margin}
    theirs = vanilla_token if vanilla_token is not None else top1
    near = lambda tok: tok is not None and known.get(tok, float("inf")) < tolerance  # noqa: E731
    return "near-tie" if method_token != theirs and near(method_token) and near(theirs) else "bug"


def greedy_check(target, method, vanilla, questions, max_new_tokens: int, tolerance: "Tolerance | float",
                 log=print) -> GreedyResult:
    """Both methods answer every question through the runner, as a benchmark runs them (later turns
    see their own earlier answers); turns are compared token for token. After a divergence the next
    turns' prompts differ, so they are not compared (counted in ``not_compared``)."""
    s = Settings(max_new_tokens=max_new_tokens, temperature=0.0, seed=0, repeats=1, warmup=0)
    res = GreedyResult(tolerance=tolerance)
    for q in questions:
        v, m = run_question(target, vanilla, q, s), run_question(target, method, q, s)
        messages: list[dict] = []
        for t, (gv, gm) in enumerate(zip(v.generations, m.generations)):
            messages.append({"role": "user", "content": q.turns[t]})
            res.prompts += 1
            res.tokens += len(gv.token_ids)
            if gv.token_ids != gm.token_ids:
                res.mismatches.append(_divergence(target, q, t, prompt_ids(target, messages, max_new_tokens)[0],
                                                  gv.token_ids, gm.token_ids, tolerance, log))
                res.not_compared += len(v.generations) - t - 1
                break
            res.identical += 1
            messages.append({"role": "assistant", "content": v.turns[t]})
    return res


def _divergence(target, q, turn: int, ids: list[int], v: list[int], m: list[int], tolerance: "Tolerance | float",
                log) -> Mismatch:
    """Where two greedy outputs part, and whether the target's logits there make it a near-tie."""
    import torch
    pos = next((i for i, (a, b) in enumerate(zip(v, m)) if a != b), min(len(v), len(m)))
    logits = next_logits(target, ids + v[:pos])
    top = torch.topk(logits, 2)
    top1, top2, margin = int(top.indices[0]), int(top.indices[1]), float(top.values[0] - top.values[1])
    mt = m[pos] if pos < len(m) else None
    vt = v[pos] if pos < len(v) else None
    gaps = {t: float(top.values[0] - logits[t]) for t in (vt, mt) if t is not None}
    tol = tolerance.at(float(top.values[0])) if isinstance(tolerance, Tolerance) else tolerance
    mm = Mismatch(q.question_id, q.subtask, turn, pos, vt, mt, margin, top2,
                  classify(margin, tol, mt, top1, top2, vt, gaps={top1: 0.0, top2: margin, **gaps}),
                  gaps.get(vt), gaps.get(mt), tol)
    log(f"  MISMATCH question {q.question_id} ({q.subtask}) turn {turn + 1}: first divergence at generated "
        f"position {pos}: vanilla {vt} (top logit - {mm.vanilla_gap if vt is not None else float('nan'):.3g}), "
        f"method {mt} (top logit - {mm.method_gap if mt is not None else float('nan'):.3g}); "
        f"tolerance {tol:.3g} -> {mm.kind.upper()}")
    return mm


def certify(directory: Path, bench_file: str | None = None, log=print) -> dict:
    """Every greedy result file in ``directory`` against its vanilla baseline, turn by turn, as the
    benchmark ran them: each divergence is certified a near-tie (at the first differing token both
    outputs' tokens sit within the tolerance of the target's top logit; ``calibrate_tolerance``
    measures it once per model and dtype) or called a bug. Turns after a divergent one are not compared (their prompts differ).
    Loads the target in each file's dtype and compile mode; writes ``identity_certified.json``,
    which ``report`` shows in its identity table."""
    from .report.runs import select_runs
    from .model import TargetModel
    from .tasks.specbench import find_question_file, load_questions, sha256_of
    runs = select_runs([directory])
    out, targets, tolerances = {}, {}, {}
    for r in sorted(runs, key=lambda r: r.label):
        if r.is_vanilla or r.baseline is None or r.temperature != 0:
            continue
        meta = r.meta
        key = (meta.get("model_source") or meta["model"], meta.get("dtype", "float32"), meta.get("compile") or "none")
        if key not in targets:  # eager: a margin is read off one forward over the prefix in the run's dtype
            targets[key] = TargetModel.load(key[0], key[1], meta.get("device", "cpu"))
        target = targets[key]
        origin = meta.get("question_source")
        qfile = Path(bench_file or meta["question_file"]) if origin not in ("sample", "spec-bench") else \
            find_question_file(bench=origin).path
        if not qfile.is_file():
            raise UsageError(f"certify needs the questions {r.path.name} ran on: '{qfile}' is missing; pass --bench-file")
        if meta.get("questions_sha256") and sha256_of(qfile) != meta["questions_sha256"]:
            raise UsageError(f"'{qfile}' is not the question file {r.path.name} ran on (sha256 differs); pass the "
                             "right one with --bench-file")
        questions = {q.question_id: q for q in load_questions(qfile)}
        if key not in tolerances:
            tolerances[key] = calibrate_tolerance(target, key[1])
        tol = tolerances[key]
        base = {v.question_id: v for v in r.baseline.records}
        res = {"turns": 0, "identical": 0, "near_tie": 0, "bug": 0, "not_compared": 0, "tolerance": asdict(tol),
               "mismatches": []}
        for rec in r.records:
            v, q = base.get(rec.question_id), questions.get(rec.question_id)
            if v is None or q is None:
                continue
            messages: list[dict] = []
            for t, (a, b) in enumerate(zip(v.token_ids, rec.token_ids)):
                messages.append({"role": "user", "content": q.turns[t]})
                res["turns"] += 1
                if a != b:
                    ids = prompt_ids(target, messages, meta["max_new_tokens"])[0]
                    mm = _divergence(target, q, t, ids, a, b, tol, log)
                    res["near_tie" if mm.kind == "near-tie" else "bug"] += 1
                    res["mismatches"].append(asdict(mm))
                    res["not_compared"] += len(v.token_ids) - t - 1
                    break
                res["identical"] += 1
                messages.append({"role": "assistant", "content": v.turns[t]})
        out[r.label] = res
        log(f"certify {r.label}: tolerance {tol}" + (f" (kernel noise {tol.noise_ulps:.3g} ulp)" if tol.noise_ulps
                                                     is not None else ""))
        log(f"certify {r.label}: {res['identical']}/{res['turns']} turns identical, {res['near_tie']} near-tie(s), "
            f"{res['bug']} bug(s), {res['not_compared']} later turn(s) not compared")
    (directory / "identity_certified.json").write_text(json.dumps(out, indent=1, default=str))
    return out


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
