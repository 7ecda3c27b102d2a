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

import argparse
import json
import math
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .model import engine_choice
from .distributions import (chi_square, exact_sequence_distribution, next_token_probs, pool_cells, power,
                            samples_for_power)
from .errors import UsageError
from .runner import Settings, build_method, prompt_ids, run_question

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
    with the width of a forward in this dtype and on these engine_choice."""
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


# ---- command line ------------------------------------------------------------------------------------
def add_lossless_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "lossless", help="check a method is lossless: greedy identity, sampled distributions",
        description="Greedy: token-identical to vanilla on Spec-Bench prompts (near-ties told from bugs by the "
                    "target's top-2 margin). Sampling: chi-square of sampled sequences against the exact "
                    "distribution, (a) on a tiny model, first k tokens enumerated; (c) the same with longer "
                    "generations, so rejections happen at the 2nd draft of a round or later; (b) on the real "
                    "model, first token and second given first. Exits 1 on a failure.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--method", default=None, help="method to check (see 'specharness list')")
    p.add_argument("--certify", default=None, metavar="RESULT_DIR",
                   help="instead: certify every greedy divergence in a benchmark's result files (near-tie or "
                        "bug, by the target's top-2 margin) and write identity_certified.json for the report")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE", help="method option")
    p.add_argument("--tiny-option", action="append", default=[], metavar="KEY=VALUE",
                   help="method option for levels (a) and (c) only, on the tiny model; the method's own tiny "
                        "defaults (e.g. a random adapter) apply first")
    p.add_argument("--verifier", default=None,
                   help="acceptance rule(s), comma-separated: each applies to the levels of its kind "
                        "(greedy or sampling); default greedy / speculative-sampling")
    p.add_argument("--levels", default="greedy,a,b,c", help="which checks: greedy, a, b, c")
    p.add_argument("--model", default="smollm2", help="target for the greedy and (b) checks")
    p.add_argument("--dtype", default="float32", help="target dtype (float32: strict identity; lower: near-ties certified)")
    p.add_argument("--compile", default="none", choices=("none", "default", "max-autotune"),
                   help="run the target compiled, as a benchmark at that setting does")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py")
    p.add_argument("--bench", default=None, choices=("sample", "spec-bench"),
                   help="question set for the greedy check (as in 'run')")
    p.add_argument("--bench-file", default=None, help="question.jsonl for the greedy check (as in 'run')")
    p.add_argument("--subtasks", default=None, help="comma-separated subtasks for the greedy check (default all)")
    p.add_argument("--limit", type=int, default=1, help="questions per subtask for the greedy check")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per turn in the greedy check")
    p.add_argument("--tolerance", type=float, default=None,
                   help="how far below the top logit both diverging tokens may sit for a near-tie (default "
                        "1e-4 in float32; in float16/bfloat16 calibrated on the model's kernel noise)")
    p.add_argument("--temperature", type=float, default=1.3, help="sampling temperature of (a), (b), (c)")
    p.add_argument("--tiny-vocab", type=int, default=8, help="vocabulary of the tiny model in (a)")
    p.add_argument("--k", type=int, default=3, help="tokens whose joint distribution (a) enumerates")
    p.add_argument("--tiny-vocab-c", type=int, default=4, help="vocabulary of the tiny model in (c)")
    p.add_argument("--k-c", type=int, default=5, help="tokens whose joint distribution (c) enumerates (>= 4)")
    p.add_argument("--samples-a", type=int, default=None, help="N for (a) (default: chosen for power)")
    p.add_argument("--samples-b", type=int, default=None, help="N for (b) (default: chosen for power, capped)")
    p.add_argument("--samples-c", type=int, default=None, help="N for (c) (default: chosen for power)")
    p.add_argument("--max-samples-b", type=int, default=B_MAX_SAMPLES,
                   help="cap on the N (b) chooses for power; the power at the cap is reported")
    p.add_argument("--effect-a", type=float, default=0.1, help="effect size w (a) must detect with power 0.9")
    p.add_argument("--effect-b", type=float, default=0.2, help="effect size w (b) must detect with power 0.9")
    p.add_argument("--effect-c", type=float, default=0.15, help="effect size w (c) must detect with power 0.9")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of each level")
    p.add_argument("--seed", type=int, default=1234, help="first seed of the sampled sequences")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the full report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _say_exercised(r: dict, method: str) -> None:
    e = r["exercised"]
    if e["drafted"]:
        rejected = ", ".join(f"{t['rejected']} at draft {i}" for i, t in e["by_position"].items() if t["rejected"])
        print(f"  speculative path exercised: {e['drafted']} drafts proposed, {e['accepted']} accepted; "
              f"rejections: {rejected or 'none'}")
    elif method != "vanilla":
        print(f"  note: {method} proposed no drafts here, so only plain sampling was tested")


def _split_verifiers(registry, text: str | None) -> dict[bool, str | None]:
    out: dict[bool, str | None] = {False: None, True: None}
    for name in [v.strip() for v in (text or "").split(",") if v.strip()]:
        out[registry.verifier(name).sampling] = name
    return out


def _check_args(args) -> list[str]:
    levels = [x.strip() for x in args.levels.split(",") if x.strip()]
    bad = [x for x in levels if x not in ("greedy", "a", "b", "c")]
    if bad or not levels:
        raise UsageError(f"--levels takes greedy, a, b, c (comma-separated), got '{args.levels}'")
    if args.temperature <= 0:
        raise UsageError("--temperature must be > 0: levels (a), (b) and (c) test sampling")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.k < 2 or args.tiny_vocab < 2 or args.tiny_vocab ** args.k > 200_000:
        raise UsageError("--k >= 2 and --tiny-vocab >= 2 with tiny_vocab**k <= 200000 cells")
    if args.k_c < 4 or args.tiny_vocab_c < 2 or args.tiny_vocab_c ** args.k_c > 200_000:
        raise UsageError("--k-c >= 4 (so a round can hold 2+ drafts) and --tiny-vocab-c >= 2 with "
                         "tiny_vocab_c**k_c <= 200000 cells")
    for name in ("samples_a", "samples_b", "samples_c", "max_samples_b"):
        if getattr(args, name) is not None and getattr(args, name) < 10:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 10")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    return levels


def _tiny_level(args, registry, level: str, verifier: str | None, progress: bool) -> dict:
    """Level (a) or (c) on a tiny random llama, the method built with its tiny defaults."""
    import torch

    from .model import TargetModel
    vocab, k = (args.tiny_vocab, args.k) if level == "a" else (args.tiny_vocab_c, args.k_c)
    n, w = (args.samples_a, args.effect_a) if level == "a" else (args.samples_c, args.effect_c)
    tiny = TargetModel.tiny("llama", vocab_size=vocab, n_layers=4, hidden_size=32, n_heads=4, n_kv_heads=2, seed=0)
    spec = registry.method(args.method)
    defaults = [f"{key}={value}" for key, value in getattr(spec, "tiny_options", {}).items()]
    try:
        method = build_method(registry, args.method, defaults + args.option + args.tiny_option, tiny, args.temperature,
                        verifier)
    except UsageError as exc:
        raise UsageError(f"level ({level}) cannot build '{args.method}' on the tiny model ({exc}); pass options "
                         f"for it with --tiny-option, or leave it out with --levels") from None
    prompt = [1, 2, 3, 4, 5][: max(1, vocab - 1)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's ops are too small to share; threads only add overhead
    try:
        run = level_a if level == "a" else level_c
        r = run(method, tiny, prompt, k, args.temperature, n, w, args.alpha, args.seed, progress)
    finally:
        torch.set_num_threads(threads)
    r["verifier"], r["options"] = method.verifier, method.options
    t = r["test"]
    print(f"sampling ({level}): tiny llama, vocab {vocab}, first {k} tokens at T={args.temperature:g}: "
          f"N={r['samples']} (seeds from SeedSequence({args.seed}); power {r['power']:.2f} against w={w:g} at "
          f"alpha={args.alpha:g}), {r['cells']} cells pooled to {t['cells']}: chi2={t['statistic']:.1f}, "
          f"df={t['df']}, p={t['p_value']:.3g} -> {'PASS' if r['passed'] else 'FAIL'}")
    _say_exercised(r, args.method)
    if level == "c" and not r["late_exercised"]:
        print(f"  FAIL: no draft at position {r['late_position']} or later was rejected, so later positions "
              "were not tested; let the method draft longer on the tiny model (--tiny-option)")
    return r


def cmd_lossless(args) -> int:
    import torch
    if args.certify:
        if not Path(args.certify).is_dir():
            raise UsageError(f"--certify: '{args.certify}' is not a directory of result files")
        if args.threads:
            torch.set_num_threads(args.threads)
        results = certify(Path(args.certify), args.bench_file)
        bugs = sum(r["bug"] for r in results.values())
        print(f"certify: {len(results)} file(s), {bugs} bug(s) -> {'FAIL' if bugs else 'PASS'}")
        return 1 if bugs else 0
    if not args.method:
        raise UsageError("lossless needs --method NAME (or --certify RESULT_DIR)")

    from .plugins import build_registry
    from .model import TargetModel
    levels = _check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    registry = build_registry(args.plugin)
    registry.method(args.method)
    verifiers = _split_verifiers(registry, args.verifier)
    report: dict[str, Any] = {"method": args.method, "options": args.option, "verifiers": verifiers,
                              "levels": {}, "command": "python -m specharness " + " ".join(sys.argv[1:])}
    failed = False
    progress = not args.quiet and sys.stderr.isatty()

    target = None
    if "greedy" in levels or "b" in levels:
        target = TargetModel.load(args.model, args.dtype, args.device)
        mode, why = engine_choice.apply(target, args.compile)
        if why:
            print(f"note: cannot compile here ({why}); checking eagerly", file=sys.stderr)

    if "greedy" in levels:
        from .tasks.specbench import describe_selection, find_question_file, load_questions, parse_subtasks, select
        tol = calibrate_tolerance(target, args.dtype, args.tolerance)
        source = find_question_file(args.bench_file, args.bench)
        available, subtasks = load_questions(source.path), parse_subtasks(args.subtasks)
        qs = select(available, subtasks, args.limit)
        method = build_method(registry, args.method, args.option, target, 0.0, verifiers[False])
        vanilla = build_method(registry, "vanilla", [], target, 0.0, None)
        for line in describe_selection(source, available, subtasks, args.limit):
            print(line, file=sys.stderr)
        print(f"greedy: {args.method} (verifier {method.verifier}) vs vanilla on {len(qs)} questions, "
              f"{args.max_new_tokens} tokens per turn, {target.name} {args.dtype}")
        g = greedy_check(target, method, vanilla, qs, args.max_new_tokens, tol)
        ties = sum(m.kind == "near-tie" for m in g.mismatches)
        bugs = sum(m.kind == "bug" for m in g.mismatches)
        print(f"greedy: {g.identical}/{g.prompts} prompts identical ({g.tokens} vanilla tokens); "
              f"{ties} near-tie(s), {bugs} bug(s) -> {'PASS' if g.passed else 'FAIL'}")
        report["levels"]["greedy"] = {"prompts": g.prompts, "identical": g.identical, "tokens": g.tokens,
                                      "tolerance": asdict(tol), "mismatches": [asdict(m) for m in g.mismatches],
                                      "passed": g.passed}
        failed |= not g.passed

    for level in ("a", "c"):
        if level in levels:
            r = _tiny_level(args, registry, level, verifiers[True], progress)
            report["levels"][level] = r
            failed |= not r["passed"]

    if "b" in levels:
        method = build_method(registry, args.method, args.option, target, args.temperature, verifiers[True])
        if target.tokenizer is not None:
            prompt = target.tokenizer(B_PROMPT, add_special_tokens=False)["input_ids"]
        else:
            prompt = [1, 2, 3]
        r = level_b(method, target, prompt, args.temperature, args.samples_b, args.effect_b, args.alpha,
                    args.seed, progress, max_samples=args.max_samples_b)
        r["verifier"] = method.verifier
        r["prompt_text"] = B_PROMPT
        t1, t2 = r["first_token"], r["second_given_first"]
        capped = (f"; capped from {r['samples_for_power']} (--max-samples-b), so this is the power at the cap"
                  if r["capped"] else "")
        print(f"sampling (b): {target.name}, prompt {B_PROMPT!r}, T={args.temperature:g}: N={r['samples']} (seeds "
              f"from SeedSequence({args.seed}); power {r['power_first_token']:.2f} against "
              f"w={args.effect_b:g} at alpha/2{capped}); first token chi2={t1['statistic']:.1f}, df={t1['df']}, "
              f"p={t1['p_value']:.3g}; second given first chi2={t2['statistic']:.1f}, df={t2['df']}, "
              f"p={t2['p_value']:.3g} -> {'PASS' if r['passed'] else 'FAIL'}")
        _say_exercised(r, args.method)
        report["levels"]["b"] = r
        failed |= not r["passed"]

    report["passed"] = not failed
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    print(f"lossless {args.method}: {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0
