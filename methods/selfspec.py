"""``self-spec``: layer-skipping self-speculative decoding (Draft & Verify, Zhang et al.,
arXiv:2309.08168; SWIFT, Xia et al., arXiv:2410.06916): the target with some of its attention and
MLP sublayers left out is the drafter. No training, no extra weights.

**Which sublayers to skip** is searched once per model and recipe, offline as Draft & Verify does,
with Bayesian optimisation (a Gaussian process over skip masks, Hamming-distance kernel, upper
confidence bound over mutations of the best masks and fresh random ones). A mask leaves out
``round(skip_ratio x 2L)`` of the 2L sublayers (never the first or last layer's). Its score is
SWIFT's *matchness*: over the answer tokens of a few conversations the target wrote itself (the
shared self-distillation recipe, never Spec-Bench), the share of positions where the skipping
model's argmax, teacher-forced in one parallel forward, equals the token the target chose. The
result is cached (``$SPECHARNESS_CACHE/self-spec``) with its history; ``-o skip=a3,m7,...`` gives a
mask by hand instead (``aI``: layer I's attention, ``mI``: its MLP).

**Drafting** runs the skipping model token by token on the target's own KV cache (its kept
attention layers write the draft slots; verification rewrites every layer from the current token),
and stops after a draft whose top-1 probability is at most ``eta`` or after ``gamma`` drafts.
Greedy drafts are argmaxes; sampled drafts come from the skipping model's distribution at the
decoding temperature, handed over as q (speculative sampling keeps it lossless). The draft head is
the target's LM head restricted to the ``draft_vocab`` tokens the target writes most often
(``specharness.draft_vocab``, FR-Spec; ``draft_vocab=0``: the full head, inside the compiled graph).
"""

from __future__ import annotations

import hashlib
import json
import random
import time

import torch

from specharness import draft_vocab
from specharness import selfdistill as sd
from specharness.api import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.hookspecs import DrafterSpec, hookimpl
from specharness.options import OptionSpec
from specharness.paths import cache_root, model_slug, write_text_atomic
from specharness.model import Skip, TargetModel, argmax, read_bytes

# measured (results/smollm2-cpu-epyc-draft-vocab): a subset head costs more acceptance than it saves here
# (CR 2.08 full, 1.71 at 4096 rows; 0.75x against 0.73x), so the full head, inside the compiled graph
DEFAULT_DRAFT_VOCAB = 0
OPTIONS = [
    OptionSpec("skip", "str", "search", "'search' = the cached Bayesian-optimisation search's mask, or a list "
               "like a3,a4,m10 (aI / mI: layer I's attention / MLP)"),
    OptionSpec("skip_ratio", "float", 0.2, "share of the 2L sublayers the search leaves out (SmolLM2-135M, 24 trials: "
               "matchness 0.67 at 0.1, 0.52 at 0.2, 0.27 at 0.4)", min=0.0, max=0.9),
    OptionSpec("trials", "int", 48, "masks the search scores (the first 8 at random)", min=1),
    OptionSpec("calibration", "int", 8, "self-written conversations the search scores on", min=8),
    OptionSpec("eta", "float", 0.6, "stop drafting after a draft whose top-1 probability is <= eta", min=0.0, max=1.0),
    OptionSpec("gamma", "int", 7, "most drafts per round (7: the current token + 7 = 8 positions, one compiled "
               "width bucket)", min=1),
    draft_vocab.option(DEFAULT_DRAFT_VOCAB),
]
N_RANDOM = 8  # masks drawn at random before the Gaussian process proposes


def parse_skip(text: str, n_layers: int) -> Skip:
    """``a3,m7`` -> ((3,), (7,)); a one-line error for anything else."""
    attn, mlp = set(), set()
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, num = part[:1], part[1:]
        if kind not in ("a", "m") or not num.isdigit() or not 0 <= int(num) < n_layers:
            raise UsageError(f"option self-spec.skip: '{part}' is not aI or mI with I in [0, {n_layers - 1}] "
                             "(e.g. -o skip=a3,a4,m10, or skip=search)")
        (attn if kind == "a" else mlp).add(int(num))
    return tuple(sorted(attn)), tuple(sorted(mlp))


def format_skip(skip: Skip) -> str:
    return ",".join([f"a{i}" for i in skip[0]] + [f"m{i}" for i in skip[1]])


def _mask_to_skip(bits: tuple[int, ...], layers: list[int]) -> Skip:
    n = len(layers)
    return (tuple(layers[i] for i in range(n) if bits[i]), tuple(layers[i] for i in range(n) if bits[n + i]))


@torch.inference_mode()
def matchness(target: TargetModel, sequences: list[tuple[torch.Tensor, torch.Tensor]], skip: Skip) -> float:
    """Share of trained positions (``loss_mask``) where the skipping model's teacher-forced argmax
    is the next token the target wrote (greedy answers: the target's own argmax)."""
    hits = total = 0
    with target.eager():
        for ids, mask in sequences:
            cache = target.new_cache(len(ids))
            pred = argmax(target.forward(ids.to(target.device), cache, 0, head=True, skip=skip).logits).cpu()
            sel = mask[:-1]
            hits += int((pred[:-1][sel] == ids[1:][sel]).sum())
            total += int(sel.sum())
    return hits / max(total, 1)


def bayes_search(score, n_bits: int, n_on: int, trials: int, seed: int = 0, progress: bool = True) -> list[dict]:
    """Maximise ``score(bits)`` over 0/1 masks of ``n_bits`` with ``n_on`` ones: ``N_RANDOM`` random
    masks, then each trial scores the candidate with the highest upper confidence bound under a
    Gaussian process (kernel exp(-hamming / n_on), noise 1e-4) among 2-swap mutations of the 5 best
    masks and fresh random ones. Returns every trial {bits, score}, in order."""
    import numpy as np
    from tqdm import tqdm
    rng = random.Random(seed)

    def random_mask() -> tuple[int, ...]:
        on = set(rng.sample(range(n_bits), n_on))
        return tuple(int(i in on) for i in range(n_bits))

    def mutate(bits: tuple[int, ...]) -> tuple[int, ...]:
        b = list(bits)
        ones, zeros = [i for i, x in enumerate(b) if x], [i for i, x in enumerate(b) if not x]
        for _ in range(rng.choice((1, 2))):
            if ones and zeros:
                i, j = rng.choice(ones), rng.choice(zeros)
                b[i], b[j] = 0, 1
                ones.remove(i), zeros.remove(j)
                ones.append(j), zeros.append(i)
        return tuple(b)

    history: list[dict] = []
    seen: set[tuple[int, ...]] = set()
    ell = max(n_on, 1)
    bar = tqdm(range(trials), desc="self-spec search", unit="mask", disable=not progress)
    for t in bar:
        if t < N_RANDOM or n_on == 0 or n_on == n_bits:
            cands = [random_mask() for _ in range(64)]
        else:
            X = np.array([h["bits"] for h in history], dtype=float)
            y = np.array([h["score"] for h in history])
            mu0, sd0 = y.mean(), y.std() + 1e-9
            K = np.exp(-np.abs(X[:, None, :] - X[None, :, :]).sum(-1) / ell) + 1e-4 * np.eye(len(X))
            L = np.linalg.cholesky(K)
            alpha = np.linalg.solve(L.T, np.linalg.solve(L, (y - mu0) / sd0))
            best = [history[i]["bits"] for i in np.argsort(-y)[:5]]
            cands = [mutate(rng.choice(best)) for _ in range(192)] + [random_mask() for _ in range(64)]
            cands = [c for c in dict.fromkeys(cands) if c not in seen] or [random_mask()]
            C = np.array(cands, dtype=float)
            Ks = np.exp(-np.abs(C[:, None, :] - X[None, :, :]).sum(-1) / ell)
            mean = Ks @ alpha
            v = np.linalg.solve(L, Ks.T)
            std = np.sqrt(np.clip(1.0 - (v * v).sum(0), 1e-12, None))
            cands = [cands[int(np.argmax(mean + 2.0 * std))]]
        bits = next((c for c in cands if c not in seen), cands[0])
        seen.add(bits)
        history.append({"bits": bits, "score": score(bits)})
        bar.set_postfix(best=f"{max(h['score'] for h in history):.3f}")
    bar.close()
    return history


def searched_skip(target: TargetModel, options: dict, progress: bool = True) -> dict:
    """The search's result for this model and these options, from the cache or computed now."""
    key = {k: options[k] for k in ("skip_ratio", "trials", "calibration")}
    tag = hashlib.sha1(json.dumps({"model": target.name, "dtype": str(target.dtype), **key},
                                  sort_keys=True).encode()).hexdigest()[:10]
    path = cache_root() / "self-spec" / f"{model_slug(target.name)}-{tag}.json"
    if path.is_file():
        return json.loads(path.read_text())
    started = time.perf_counter()
    settings = sd.recipe({"conversations": options["calibration"], "max_answer_tokens": 128, "seed": 0,
                          "gen_batch": options["calibration"]})
    ds, _, _ = sd.load_or_generate(target, settings, sd.default_dir(target, settings), progress)
    sequences = list(sd.examples(ds))
    L = target.n_layers
    layers = list(range(1, L - 1))  # the first and last layers always run
    n_on = round(options["skip_ratio"] * 2 * L)
    if n_on > 2 * len(layers):
        raise UsageError(f"option self-spec.skip_ratio={options['skip_ratio']} leaves out more sublayers than "
                         f"the {2 * len(layers)} that may be skipped")
    history = bayes_search(lambda bits: matchness(target, sequences, _mask_to_skip(bits, layers)),
                           2 * len(layers), n_on, options["trials"], progress=progress)
    best = max(history, key=lambda h: h["score"])
    result = {"skip": format_skip(_mask_to_skip(best["bits"], layers)), "matchness": best["score"],
              "full_model_matchness": matchness(target, sequences, ((), ())),
              "search": "Bayesian optimisation (GP, Hamming kernel, UCB)", "options": key,
              "calibration_positions": sum(int(m[:-1].sum()) for _, m in sequences),
              "wall_s": time.perf_counter() - started,
              "history": [{"skip": format_skip(_mask_to_skip(h["bits"], layers)), "matchness": h["score"]}
                          for h in history]}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result, indent=1))
    return result


class SelfSpeculative:
    exit_layer = 0

    def __init__(self, target: TargetModel, skip: Skip, eta: float, gamma: int,
                 rows: torch.Tensor | None = None) -> None:
        self.t, self.skip, self.eta, self.gamma, self.rows = target, skip, eta, gamma, rows
        self.head_w = target.head_rows(rows) if rows is not None else None  # gathered once
        self.draft_bytes = read_bytes(target.layers_w, target.norm_weight,
                                      target.head_weight if rows is None else self.head_w, skip=skip)
        self.max_width = gamma + 1

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        pass

    def _logits(self, token: int, pos: int, cache) -> torch.Tensor:
        t, full = self.t, self.rows is None
        out = t.forward(torch.tensor([token], device=t.device), cache, pos, head=full, skip=self.skip)
        return out.logits[-1] if full else t.head(t.norm(out.hidden[-1]), self.head_w)

    def propose(self, state: DecodeState) -> Proposal:
        t, pos = self.t, state.pos
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        tok = state.ids[-1]
        for i in range(min(self.gamma, state.max_draft, state.budget)):
            d = draft_vocab.draw(self._logits(tok, pos + i, state.cache), self.rows, t.vocab_size,
                                 state.temperature, state.generator)
            tok = d.token
            tokens.append(tok)
            if d.q is not None:
                qs.append(d.q)
            if d.confidence <= self.eta:
                break
        return Proposal(tokens, torch.stack(qs) if qs else None)

    def commit(self, state: DecodeState, verified) -> None:
        pass


def _skip(target: TargetModel, options: dict) -> tuple[Skip, dict | None]:
    """The mask, and the search's result when it came from the search."""
    if options["skip"].strip() == "search":
        found = searched_skip(target, options)
        return parse_skip(found["skip"], target.n_layers), found
    return parse_skip(options["skip"], target.n_layers), None


def _rows(target: TargetModel, options: dict) -> torch.Tensor | None:
    return draft_vocab.rows(target, "self-spec", options["draft_vocab"], DEFAULT_DRAFT_VOCAB)


def build(target: TargetModel, options: dict) -> SelfSpeculative:
    return SelfSpeculative(target, _skip(target, options)[0], options["eta"], options["gamma"], _rows(target, options))


def info(target: TargetModel, options: dict) -> dict:
    skip, found = _skip(target, options)
    out = {"skip": format_skip(skip), "skipped_sublayers": len(skip[0]) + len(skip[1]),
           "sublayers": 2 * target.n_layers, **draft_vocab.describe(target, _rows(target, options))}
    if found is not None:
        out.update(matchness=found["matchness"], full_model_matchness=found["full_model_matchness"],
                   search=found["search"])
    return out


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("self-spec", build, OPTIONS, sizable=True, params=lambda target, options: 0, info=info,
                        tiny_options={"skip": "a1"},
                        help="layer-skipping self-speculation (Draft & Verify / SWIFT): the target with a "
                             "searched set of sublayers left out drafts; no training")]
