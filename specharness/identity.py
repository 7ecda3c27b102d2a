"""Greedy identity: a method's greedy output must be vanilla's, token for token.

In float32 any divergence is a bug unless the target's top two logits there lie within 1e-4
(``TOLERANCES``). In bfloat16 or float16 a forward over 8 positions rounds differently from 8
one-position forwards, so vanilla and a speculative method may part at a near-tie. A divergence
is *certified* a near-tie only against a bound the code under test cannot widen:

- the logits come from an independent reference: transformers' own forward of the same weights in
  float32 (``Reference``), never from the engine's kernels;
- the bound is the larger of two things the engine cannot move. A fixed function of the dtype, the
  top logit and the depth: each of vanilla's and the method's logits may sit up to
  ``rounding_ulps(L)`` units in the last place (of the top logit, in the run's dtype) away from the
  float32 truth, the rounding of L layers adding like a random walk (``0.5 * sqrt(L)`` ulps) with a
  hard cap of ``CAP_ULPS``, so twice that between two runs. And ``reference_noise``: the largest
  shift transformers' own forward in the run's dtype puts on a token's gap to the top logit,
  against its float32 forward, on non-benchmark text. The first alone failed bfloat16 itself:
  transformers' own bfloat16 forward moves gaps by up to ~0.6 logits on SmolLM2, nearly whatever
  the top logit, where the ulp model allows 0.05-0.09 at a top logit of 2-4. Both diverging tokens
  must sit within the bound of the reference's top logit.

Whole turns are compared (``compare_turn``): at each divergence both runs restart from the same
forced token (vanilla's), so every later token is still compared (teacher-forced resync). Later
turns are built from vanilla's answers, so they are compared too. ``certify`` judges the
divergences of committed benchmark files with the same bound; there nothing can be rerun, so a
turn is compared up to its first divergence, and the tokens compared say so.

``self_calibrated_tolerance`` is the rule this replaced (twice the engine's own 1-vs-8-position
noise, no cap): kept so a report can say which divergences it certified that the bound does not.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError
from .runner import Settings, prompt_ids

TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}  # absolute floors
MANTISSA_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}
CAP_ULPS = 3.0  # the most one run's logits may sit from the float32 reference, whatever the depth
CALIBRATION_PROMPT = "Explain how a refrigerator keeps food cold, step by step."  # not a benchmark question
CALIBRATION_PROMPTS = (CALIBRATION_PROMPT,  # none from Spec-Bench: what reference_noise decodes
                       "Write a short story about a lighthouse keeper who finds a message in a bottle.",
                       "What are the pros and cons of electric cars? Answer in a list.",
                       "Write a Python function that checks whether a string is a palindrome, and test it.")


def ulp(x: float, dtype: str) -> float:
    """The spacing of ``dtype``'s numbers at ``x`` (a unit in the last place)."""
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - MANTISSA_BITS.get(dtype, 23))


def rounding_ulps(n_layers: int) -> float:
    """How far (in ulps of the top logit) one reduced-precision run's logits may sit from the
    float32 reference: half an ulp per layer's residual rounding, adding like a random walk, capped."""
    return min(CAP_ULPS, 0.5 * math.sqrt(max(1, n_layers)))


@dataclass
class Tolerance:
    """How far below the reference's top logit a token may sit and still make a near-tie: the
    largest of ``absolute``, ``ulps`` units in the last place of the top logit in ``dtype``, and
    ``reference_noise`` (transformers' own rounding in ``dtype``, over ``reference_positions``)."""

    absolute: float
    ulps: float = 0.0
    dtype: str = "float32"
    basis: str = ""  # how it was set, for the report
    noise_ulps: float | None = None  # the self-calibrated rule's measurement (None: not measured)
    reference_noise: float = 0.0  # transformers' own reduced-precision forward's largest gap shift
    reference_positions: int = 0  # the positions that shift was measured over

    def fixed_at(self, top_logit: float) -> float:
        """The bound without the measured term: the absolute floor or the ulp model."""
        return max(self.absolute, self.ulps * ulp(top_logit, self.dtype))

    def at(self, top_logit: float) -> float:
        return max(self.fixed_at(top_logit), self.reference_noise)

    def __str__(self) -> str:
        parts = [f"{self.absolute:g}"]
        if self.ulps:
            parts.append(f"{self.ulps:g} ulp")
        if self.reference_noise:
            parts.append(f"{self.reference_noise:.3g}")
        return parts[0] if len(parts) == 1 else f"max({', '.join(parts)})"


def tolerance_for(n_layers: int, dtype: str, given: float | None = None) -> Tolerance:
    """``--tolerance`` when given; 1e-4 in float32; else twice ``rounding_ulps``, with the dtype's
    absolute floor. Nothing here is measured on the code under test."""
    if given is not None:
        return Tolerance(given, basis="--tolerance")
    if dtype not in ("float16", "bfloat16"):
        return Tolerance(TOLERANCES.get(dtype, 1e-4), basis="float32: 1e-4")
    r = rounding_ulps(n_layers)
    return Tolerance(TOLERANCES[dtype], 2 * r, dtype,
                     f"2 x min({CAP_ULPS:g}, sqrt({n_layers})/2) = {2 * r:.3g} ulp of the float32 reference's top logit")


def calibration_logits(target, ref: "Reference", dtype: str, tokens: int = 128):
    """(float32 logits, ``dtype`` logits) from transformers' own forward, [tokens, vocab] each, over each
    of ``CALIBRATION_PROMPTS``' float32 greedy continuations (``tokens`` each, end tokens included, so
    the count is fixed; greedy by hand, so no generation config's penalties or end tokens apply)."""
    import torch
    from transformers import DynamicCache
    low = target.hf if target.dtype == getattr(torch, dtype) else copy.deepcopy(ref.hf).to(getattr(torch, dtype))
    prompts = ([target.chat_ids([{"role": "user", "content": p}]) for p in CALIBRATION_PROMPTS]
               if target.tokenizer is not None else [[1 + (i * 7 + k) % (target.vocab_size - 1) for i in range(16)]
                                                     for k in range(len(CALIBRATION_PROMPTS))])
    for ids in prompts:
        with torch.inference_mode():  # left before each yield: the caller's code runs in its own mode
            seq, cache = torch.tensor(ids, device=ref.device), DynamicCache()
            out = ref.hf(seq[None], cache=cache, use_cache=True, logits_to_keep=1)
            for _ in range(tokens):
                nxt = out.logits[0, -1].argmax().reshape(1)
                seq = torch.cat([seq, nxt])
                out = ref.hf(nxt[None], cache=cache, use_cache=True)
            pair = (ref.hf(seq[None]).logits[0, len(ids) - 1:-1].float(),
                    low(seq[None]).logits[0, len(ids) - 1:-1].float())
        yield pair


def gap_shifts(exact, rounded, top: int = 8):
    """[positions, top]: how far ``rounded`` moves each of the ``top`` tokens' gap to the top logit of
    ``exact`` (its argmax first, so the first column is 0)."""
    best = exact.topk(min(top, exact.shape[-1]), dim=-1).indices
    gap = lambda logits: logits.gather(1, best[:, :1]) - logits.gather(1, best)  # noqa: E731
    return (gap(rounded) - gap(exact)).abs()


def reference_noise(target, ref: "Reference", dtype: str, tokens: int = 128, top: int = 8) -> tuple[float, int]:
    """How far transformers' own forward in ``dtype`` moves a token's gap to the top logit, against
    its float32 forward of the same weights (``ref``): the largest ``gap_shifts`` over
    ``calibration_logits``, and the number of positions. The engine's kernels, graphs and caches never
    run here, so a broken engine cannot widen it. One run's shift bounds a token's own gap: a token
    wins a run only if that run lifts it past the top. It is a maximum over a sample, not a proof: a
    bfloat16-only error smaller than it passes here, which is why the engine's kernels are also tested
    against float32 sums."""
    worst, positions = 0.0, 0
    for exact, rounded in calibration_logits(target, ref, dtype, tokens):
        worst = max(worst, float(gap_shifts(exact, rounded, top).max()))
        positions += exact.shape[0]
    return worst, positions


def bound_for(target, ref: "Reference", dtype: str, given: float | None = None) -> Tolerance:
    """The bound a check uses: ``tolerance_for``, widened in reduced precision to ``reference_noise``."""
    tol = tolerance_for(target.n_layers, dtype, given)
    if given is None and dtype in ("float16", "bfloat16"):
        tol.reference_noise, tol.reference_positions = reference_noise(target, ref, dtype)
        tol.basis = (f"max({tol.basis}, transformers' own {dtype} forward's largest gap shift "
                     f"{tol.reference_noise:.3g} over {tol.reference_positions} positions)")
    return tol


def kernel_noise_ulps(target, dtype: str, tokens: int = 64) -> float:
    """The largest disagreement of the top-2 logits between one-token forwards and 8-token forwards
    over the same greedy continuation, in ulps of the top logit (what the self-calibrated rule
    measured: the code under test's own noise)."""
    import torch
    prompt = (target.chat_ids([{"role": "user", "content": CALIBRATION_PROMPT}]) if target.tokenizer is not None
              else [1 + i % (target.vocab_size - 1) for i in range(16)])
    target.expect_widths(8)
    with torch.inference_mode():
        cache = target.new_cache(len(prompt) + tokens + 8)
        nxt = int(target.forward(torch.tensor(prompt, device=target.device), cache, 0, head=True,
                                 prefill=True, last=True).logits[-1].argmax())
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


def self_calibrated_tolerance(target, dtype: str) -> Tolerance:
    """The rule before the reference bound: twice the engine's own measured kernel noise, at least
    1 ulp, no cap. A broken wide path inflates the noise it measures, so it certifies the
    divergences that path causes: kept only to report what it would have certified."""
    if dtype not in ("float16", "bfloat16"):
        return Tolerance(TOLERANCES.get(dtype, 1e-4), basis="float32: 1e-4")
    noise = kernel_noise_ulps(target, dtype)
    return Tolerance(TOLERANCES[dtype], 2 * max(1.0, noise), dtype, "self-calibrated (old rule)", noise)


class Reference:
    """Next-token logits of the target's weights from transformers' own float32 forward: code the
    engine's kernels, dtype and compile mode never touch."""

    def __init__(self, target) -> None:
        import torch
        self.hf = target.hf if target.dtype == torch.float32 else copy.deepcopy(target.hf).float()
        self.device = target.device

    def logits(self, ids: list[int]):
        import torch
        with torch.inference_mode():
            return self.hf(torch.tensor([list(ids)], device=self.device)).logits[0, -1].float()


@dataclass
class Divergence:
    """Where vanilla and the method part, judged against the reference."""

    question_id: Any
    subtask: str
    turn: int
    position: int  # generated position in the turn
    vanilla_token: int | None  # None: that output had ended (EOS or its budget)
    method_token: int | None
    vanilla_gap: float | None  # reference top logit minus that token's logit
    method_gap: float | None
    tolerance: float  # the bound at this position
    kind: str  # "near-tie" (certified) | "bug"
    top_token: int = -1  # the reference's argmax
    legacy_kind: str | None = None  # what the self-calibrated rule said, where it was asked
    fixed_tolerance: float | None = None  # the ulp model's bound alone here (None: the same as ``tolerance``)

    @property
    def rounding_only(self) -> bool:
        """A near-tie only transformers' own rounding certifies: a token sits past the ulp model's bound."""
        gaps = [g for g in (self.vanilla_gap, self.method_gap) if g is not None]
        return self.kind == "near-tie" and self.fixed_tolerance is not None and max(gaps) > self.fixed_tolerance

    @property
    def vanilla_only(self) -> bool:
        """An uncertified divergence where only vanilla's token sits past the bound (the method's is
        within it): the verdict stands, but a reader should know which run the reference disagrees with."""
        return (self.kind == "bug" and self.method_gap is not None and self.method_gap <= self.tolerance
                and self.vanilla_gap is not None and self.vanilla_gap > self.tolerance)


@dataclass
class IdentityResult:
    """One method's greedy identity over a set of questions."""

    tolerance: Tolerance
    turns: int = 0
    identical_turns: int = 0
    tokens_compared: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    not_compared_tokens: int = 0  # tokens of a turn after a divergence that could not be resynced (certify)

    @property
    def certified(self) -> int:
        return sum(d.kind == "near-tie" for d in self.divergences)

    @property
    def uncertified(self) -> int:
        return len(self.divergences) - self.certified

    @property
    def largest_gap(self) -> float:
        """The largest reference gap of a diverging token, over every divergence (0: none)."""
        return max((g for d in self.divergences for g in (d.vanilla_gap, d.method_gap) if g is not None), default=0.0)

    @property
    def vanilla_only(self) -> int:
        """Uncertified divergences where only vanilla's token is past the bound (``Divergence.vanilla_only``)."""
        return sum(d.vanilla_only for d in self.divergences)

    @property
    def rounding_only(self) -> int:
        """Near-ties only transformers' own rounding certifies (``Divergence.rounding_only``)."""
        return sum(d.rounding_only for d in self.divergences)

    @property
    def passed(self) -> bool:
        return self.uncertified == 0

    def as_dict(self) -> dict:
        return {"turns": self.turns, "identical": self.identical_turns, "tokens_compared": self.tokens_compared,
                "not_compared_tokens": self.not_compared_tokens, "divergences": len(self.divergences),
                "near_tie": self.certified, "bug": self.uncertified, "bug_vanilla_only": self.vanilla_only,
                "near_tie_rounding_only": self.rounding_only,
                "largest_gap": self.largest_gap,
                "tolerance": asdict(self.tolerance), "mismatches": [asdict(d) for d in self.divergences]}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two outputs differ (one ending earlier counts), or None."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def judge(ref: Reference, prefix: list[int], vt: int | None, mt: int | None, tol: Tolerance, where: dict,
          legacy: tuple | None = None) -> Divergence:
    """A divergence after ``prefix``: a near-tie when both tokens sit within the bound of the
    reference's top logit; anything else (a token far below it, one output ending early) a bug.
    ``legacy`` = (target, Tolerance) also judges it as the self-calibrated rule did (the target's
    own logits in its dtype)."""
    logits = ref.logits(prefix)
    top = float(logits.max())
    gaps = {t: top - float(logits[t]) for t in (vt, mt) if t is not None}
    bound = tol.at(top)
    fixed = tol.fixed_at(top)
    near = vt is not None and mt is not None and vt != mt and gaps[vt] <= bound and gaps[mt] <= bound
    d = Divergence(**where, vanilla_token=vt, method_token=mt, vanilla_gap=gaps.get(vt), method_gap=gaps.get(mt),
                   tolerance=bound, kind="near-tie" if near else "bug", top_token=int(logits.argmax()),
                   fixed_tolerance=fixed if fixed < bound else None)
    if legacy is not None:
        target, old = legacy
        own = next_logits(target, prefix)
        own_top = float(own.max())
        ok = vt is not None and mt is not None and all(own_top - float(own[t]) < old.at(own_top) for t in (vt, mt))
        d.legacy_kind = "near-tie" if ok else "bug"
    return d


def compare_turn(method, vanilla, ids: list[int], max_new_tokens: int, ref: Reference, tol: Tolerance, where: dict,
                 eos: frozenset, result: IdentityResult, log=print, legacy: tuple | None = None) -> list[int]:
    """One turn, whole: decode with both; at each divergence judge it, then restart both from the
    prefix plus vanilla's token there, until the budget or an end token. Returns vanilla's first
    (unforced) answer, which the next turn's prompt is built from."""
    prefix, budget = list(ids), max_new_tokens
    first_answer: list[int] | None = None
    clean = True
    while budget > 0:
        s = Settings(max_new_tokens=budget, temperature=0.0, seed=0, repeats=1, warmup=0)
        v, m = vanilla.generate(prefix, s, 0).token_ids, method.generate(prefix, s, 0).token_ids
        first_answer = v if first_answer is None else first_answer
        p = first_divergence(v, m)
        if p is None:
            result.tokens_compared += len(v)
            break
        clean = False
        result.tokens_compared += p + 1
        vt, mt = (v[p] if p < len(v) else None), (m[p] if p < len(m) else None)
        d = judge(ref, prefix + v[:p], vt, mt, tol, {**where, "position": len(prefix) - len(ids) + p}, legacy)
        result.divergences.append(d)
        log(f"  {divergence_line(d)}")
        if vt is None or vt in eos:
            break
        prefix += v[:p + 1]
        budget -= p + 1
    result.turns += 1
    result.identical_turns += clean
    return first_answer or []


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


VANILLA_ONLY = "with only vanilla's token past the bound"  # of the uncertified
ROUNDING_ONLY = "only by transformers' own rounding"  # of the certified


def aside(count: int, what: str) -> str:
    """What a summary adds after a count where ``count`` of them are ``what`` (nothing when none are)."""
    return f" ({count} {what})" if count else ""


def divergence_line(d: Divergence) -> str:
    """One divergence, where and how far each token sits below the reference's top, and the verdict."""
    verdict = "certified near-tie" if d.kind == "near-tie" else "BUG"
    note = (" (only vanilla's token is past the bound)" if d.vanilla_only else
            f" (by transformers' own rounding: the ulp model's bound is {d.fixed_tolerance:.3g})" if d.rounding_only else "")
    return (f"divergence: question {d.question_id} ({d.subtask}) turn {d.turn + 1} position {d.position}: vanilla "
            f"{d.vanilla_token} (gap {_fmt(d.vanilla_gap)}), method {d.method_token} (gap {_fmt(d.method_gap)}); "
            f"bound {d.tolerance:.3g} -> {verdict}{note}")


def greedy_check(target, method, vanilla, questions, max_new_tokens: int, tol: Tolerance, log=print,
                 ref: Reference | None = None, legacy: Tolerance | None = None) -> IdentityResult:
    """Every turn of every question, whole (``compare_turn``); each turn's prompt is built from
    vanilla's earlier answers, so both methods see the same ids and no turn goes uncompared.
    ``legacy``: also judge each divergence by that (self-calibrated) tolerance on the target's own logits."""
    ref = ref or Reference(target)
    res = IdentityResult(tol)
    for q in questions:
        messages: list[dict] = []
        for t, text in enumerate(q.turns):
            messages.append({"role": "user", "content": text})
            ids = prompt_ids(target, messages, max_new_tokens)[0]
            answer = compare_turn(method, vanilla, ids, max_new_tokens, ref, tol,
                                  {"question_id": q.question_id, "subtask": q.subtask, "turn": t}, target.eos_ids, res,
                                  log, (target, legacy) if legacy is not None else None)
            messages.append({"role": "assistant", "content": target.decode(answer)})
    return res


def next_logits(target, ids: list[int]):
    """The target's own float logits for the token after ``ids`` (one eager forward)."""
    import torch
    with torch.inference_mode():
        return target.logits(list(ids), last=True)[-1].float()


def top2_margin(target, ids: list[int]) -> tuple[float, int, int]:
    """(top-1 minus top-2 logit, top-1 id, top-2 id) of the target's next token after ``ids``."""
    import torch
    top = torch.topk(next_logits(target, ids), 2)
    return float(top.values[0] - top.values[1]), int(top.indices[0]), int(top.indices[1])


def classify(margin: float, tolerance: float, method_token: int | None, top1: int, top2: int,
             vanilla_token: int | None = None, gaps: dict[int, float] | None = None) -> str:
    """A divergence is a near-tie only when both outputs' tokens sit within ``tolerance`` of the
    top logit. ``gaps`` = token -> top logit minus its logit; without it only the top two are known
    (gap 0 and ``margin``). Without ``vanilla_token``, vanilla is taken to have chosen the top-1.
    Any other divergence is a bug."""
    known = gaps if gaps is not None else {top1: 0.0, top2: margin}
    theirs = vanilla_token if vanilla_token is not None else top1
    near = lambda tok: tok is not None and known.get(tok, float("inf")) < tolerance  # noqa: E731
    return "near-tie" if method_token != theirs and near(method_token) and near(theirs) else "bug"


def _check_certifiable(directory: Path, runs: list) -> None:
    """One line when no file in ``directory`` can be certified, saying what it holds instead: a
    PASS over zero files would read as a certified benchmark."""
    if any(not r.is_vanilla and r.baseline is not None and r.temperature == 0 for r in runs):
        return
    kinds = {"vanilla": sum(r.is_vanilla for r in runs),
             "sampled (temperature > 0)": sum(not r.is_vanilla and r.temperature != 0 for r in runs),
             "greedy without a vanilla file beside it": sum(not r.is_vanilla and r.temperature == 0 for r in runs)}
    held = ", ".join(f"{n} {k}" for k, n in kinds.items() if n) or "no result file"
    raise UsageError(f"--certify: nothing to certify in '{directory}' ({held}); it checks greedy method files "
                     "against vanilla's on the same questions: run vanilla into that folder too")


def certify(directory: Path, bench_file: str | None = None, log=print, legacy: bool = True) -> dict:
    """Every greedy result file in ``directory`` against its vanilla baseline, turn by turn, as the
    benchmark ran them: each turn up to its first divergence, which is certified a near-tie by the
    reference bound or called a bug (nothing is rerun, so the rest of that turn and the question's
    later turns, whose prompts differ, are counted as not compared). With ``legacy`` each divergence
    also says what the self-calibrated rule said. Writes ``identity_certified.json`` for ``report``."""
    from .model import TargetModel
    from .report.runs import select_runs
    from .tasks.specbench import find_question_file, load_questions, sha256_of
    runs = select_runs([directory])
    _check_certifiable(directory, runs)
    out, targets = {}, {}
    for r in sorted(runs, key=lambda r: r.label):
        if r.is_vanilla or r.baseline is None or r.temperature != 0:
            continue
        meta = r.meta
        key = (meta.get("model_source") or meta["model"], meta.get("dtype", "float32"), meta.get("device", "cpu"))
        if key not in targets:  # eager, in the run's dtype: the reference is its weights in float32
            target = TargetModel.load(key[0], key[1], key[2])
            ref = Reference(target)
            targets[key] = (target, ref, bound_for(target, ref, key[1]),
                            self_calibrated_tolerance(target, key[1]) if legacy else None)
        target, ref, tol, old = targets[key]
        origin = meta.get("question_source")
        qfile = Path(bench_file or meta["question_file"]) if origin not in ("sample", "spec-bench") else \
            find_question_file(bench=origin).path
        if not qfile.is_file():
            raise UsageError(f"certify needs the questions {r.path.name} ran on: '{qfile}' is missing; pass --bench-file")
        if meta.get("questions_sha256") and sha256_of(qfile) != meta["questions_sha256"]:
            raise UsageError(f"'{qfile}' is not the question file {r.path.name} ran on (sha256 differs); pass the "
                             "right one with --bench-file")
        questions = {q.question_id: q for q in load_questions(qfile)}
        base = {v.question_id: v for v in r.baseline.records}
        res = IdentityResult(tol)
        for rec in r.records:
            v, q = base.get(rec.question_id), questions.get(rec.question_id)
            if v is None or q is None:
                continue
            messages: list[dict] = []
            for t, (a, b) in enumerate(zip(v.token_ids, rec.token_ids)):
                messages.append({"role": "user", "content": q.turns[t]})
                res.turns += 1
                p = first_divergence(a, b)
                if p is not None:
                    ids = prompt_ids(target, messages, meta["max_new_tokens"])[0]
                    res.tokens_compared += p + 1
                    res.not_compared_tokens += len(a) - p - 1 + sum(len(x) for x in v.token_ids[t + 1:])
                    d = judge(ref, ids + a[:p], a[p] if p < len(a) else None, b[p] if p < len(b) else None, tol,
                              {"question_id": q.question_id, "subtask": q.subtask, "turn": t, "position": p},
                              (target, old) if old is not None else None)
                    res.divergences.append(d)
                    if d.kind == "bug" or d.rounding_only:  # named in the log: where to look, without the JSON
                        log(f"{r.label}: {divergence_line(d)}")
                    break
                res.tokens_compared += len(a)
                res.identical_turns += 1
                messages.append({"role": "assistant", "content": v.turns[t]})
        out[r.label] = {**res.as_dict(), "file": r.path.name}  # the report finds it by file, labels change
        if old is not None:
            out[r.label]["legacy_tolerance"] = asdict(old)
            out[r.label]["legacy_only_certified"] = sum(d.legacy_kind == "near-tie" and d.kind == "bug"
                                                        for d in res.divergences)
        log(f"certify {r.label}: {res.tokens_compared} tokens compared ({res.not_compared_tokens} not, after a "
            f"divergence), {res.identical_turns}/{res.turns} turns identical, {res.certified} certified near-tie(s)"
            f"{aside(res.rounding_only, ROUNDING_ONLY)}, {res.uncertified} uncertified{aside(res.vanilla_only, VANILLA_ONLY)}; largest gap {res.largest_gap:.3g}; "
            f"bound {tol.basis or tol}")
    (directory / "identity_certified.json").write_text(json.dumps(out, indent=1, default=str))
    return out
