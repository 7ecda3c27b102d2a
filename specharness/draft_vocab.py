"""Frequency-ranked draft vocabularies (FR-Spec, Zhao et al., arXiv:2502.14856), and how a draft
token is drawn from a draft head's logits.

A draft that ends in the LM head spends most of its bytes there: SmolLM2-135M's head is 49,152 x 576
(57 MB in bfloat16), its first two decoder layers 7 MB. Restricting the draft head to the N tokens
the target writes most often cuts that by V / N. Drafting stays lossless, because verification is
exact: a greedy draft is the argmax over the subset; a sampled draft comes from the subset's softmax,
handed over as q with zeros outside the subset, and speculative sampling keeps the target's
distribution for any q.

Where the ranking comes from: a trained drafter stores its own training answers' ranking (Kangaroo's
adapter, EAGLE's head). The others (early exit, self-spec, Medusa, recycling's successors) read the
model's ranking: the one ``python -m specharness train draft-vocab`` built in the cache, else the one
shipped in ``specharness/draft_vocabs/<model>.safetensors``. A model with neither drafts over the full
head.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import UsageError
from .hookspecs import TrainerSpec, hookimpl
from .model.layers import argmax
from .options import OptionSpec
from .paths import cache_root, model_slug

KEY = "draft_vocab.token_ids"  # token ids by descending frequency (the key trained drafters store it under)
COUNTS_KEY = "draft_vocab.counts"
SHIPPED_DIR = Path(__file__).parent / "draft_vocabs"


def rank(counts: torch.Tensor) -> torch.Tensor:
    """Token ids by descending count; ties (unseen tokens among them) by ascending id."""
    return torch.argsort(-counts.double() + torch.arange(counts.numel()) * 1e-9)


def built_path(target) -> Path:
    """Where ``train draft-vocab`` writes this model's ranking."""
    return cache_root() / "draft-vocab" / f"{model_slug(target.name)}.safetensors"


def shipped_path(target) -> Path:
    return SHIPPED_DIR / f"{model_slug(target.name)}.safetensors"


def ranking_path(target) -> Path | None:
    """The ranking a run reads for this model: the one built in the cache, else the shipped one."""
    return next((p for p in (built_path(target), shipped_path(target)) if p.is_file()), None)


def save(path: Path, order: torch.Tensor, counts: torch.Tensor | None, meta: dict) -> None:
    """A ranking file: ``KEY`` (and ``COUNTS_KEY``) with ``meta`` (model, vocab size, data) as metadata."""
    from safetensors.torch import save_file
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {KEY: order.to(torch.int64).contiguous().cpu()}
    if counts is not None:
        tensors[COUNTS_KEY] = counts.to(torch.int64).contiguous().cpu()
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"specharness": json.dumps(meta, default=str)})
    tmp.replace(path)


def model_ranking(target) -> torch.Tensor | None:
    """This model's token ids by frequency, or None when no ranking exists for it (memoised)."""
    path = ranking_path(target)
    key = ("draft-vocab", str(path), path.stat().st_mtime_ns if path else 0)
    if key not in target.memo:
        target.memo[key] = None if path is None else _read(path, target)
    return target.memo[key]


def _read(path: Path, target) -> torch.Tensor:
    from safetensors import safe_open
    try:
        with safe_open(str(path), "pt") as f:
            meta = json.loads((f.metadata() or {}).get("specharness", "{}"))
            order = f.get_tensor(KEY)
    except Exception as exc:  # a truncated or foreign file
        raise UsageError(f"draft vocabulary '{path}' cannot be read ({type(exc).__name__}); rebuild it with "
                         "'python -m specharness train draft-vocab'") from None
    if meta.get("vocab_size") not in (None, target.vocab_size) or order.numel() > target.vocab_size \
            or (order.numel() and (order.min() < 0 or order.max() >= target.vocab_size)):
        raise UsageError(f"draft vocabulary '{path}' does not fit '{target.name}' ({target.vocab_size} tokens); "
                         "rebuild it with 'python -m specharness train draft-vocab'")
    return order.to(torch.long)


def option(default: int) -> OptionSpec:
    """The ``draft_vocab`` option of a drafter that reads the model's ranking; ``default`` is its
    measured default size (used where the model has a ranking)."""
    return OptionSpec("draft_vocab", "int", -1, "draft head rows: 0 = the full LM head, N = the N tokens the target "
                      "writes most often (the model's ranking, 'train draft-vocab'), -1 = "
                      + (f"{default} where the model has a ranking, else the full head" if default else "the full head"),
                      min=-1)


def select(ranking: torch.Tensor | None, n: int, default: int, vocab_size: int, method: str,
           missing: str) -> torch.Tensor | None:
    """The first ``n`` token ids of ``ranking`` for ``-o draft_vocab=n`` (None = the full head); -1 =
    ``default`` where there is a ranking, else the full head. ``missing`` ends the error for a size
    asked of no ranking (what to do instead)."""
    if n == -1:
        n = default if ranking is not None else 0
    if n == 0 or n >= vocab_size:
        return None
    if ranking is None:
        raise UsageError(f"option {method}.draft_vocab={n}: {missing}")
    if n > ranking.numel():
        raise UsageError(f"option {method}.draft_vocab={n} exceeds the {ranking.numel()} tokens ranked; use a "
                         "smaller value or 0 (full head)")
    return ranking[:n].contiguous()


def rows(target, method: str, n: int, default: int) -> torch.Tensor | None:
    """The draft head's token ids from the model's ranking for ``-o draft_vocab=n`` (None = the full head)."""
    picked = select(model_ranking(target), n, default, target.vocab_size, method,
                    f"there is no token ranking for '{target.name}'; build one with 'python -m specharness train "
                    "draft-vocab', or use draft_vocab=0 (full head)")
    return None if picked is None else picked.to(target.device)


def describe(target, token_ids: torch.Tensor | None) -> dict:
    """What a header records: the draft head's size and where its ranking came from."""
    if token_ids is None:
        return {"draft_vocab": target.vocab_size, "draft_vocab_source": "full LM head"}
    return {"draft_vocab": int(token_ids.numel()), "draft_vocab_source": str(ranking_path(target))}


def tokens(j: torch.Tensor, token_ids: torch.Tensor | None) -> torch.Tensor:
    """Token ids of draft-head rows ``j`` (any shape): the draft vocabulary's mapping, one gather."""
    return j if token_ids is None else token_ids[j]


def to_vocab(q: torch.Tensor, token_ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """A draft distribution over ``token_ids`` (last dim) as one over the whole vocabulary: zero elsewhere."""
    if token_ids is None:
        return q
    return q.new_zeros(*q.shape[:-1], vocab_size).index_copy_(q.dim() - 1, token_ids, q)


@dataclass
class Draw:
    token: int
    q: torch.Tensor | None  # the draft distribution over the whole vocabulary when sampling, else None
    confidence: float  # the draw's distribution's top-1 probability (an early-exit test reads it)


def draw(logits: torch.Tensor, token_ids: torch.Tensor | None, vocab_size: int, temperature: float,
         generator: torch.Generator | None, confidence: bool = True) -> Draw:
    """One draft token from a draft head's logits over ``token_ids`` (None = every token): the first
    argmax (greedy), or a sample at ``temperature`` whose q, zero outside the subset, goes to
    verification. ``confidence``: the top-1 probability at the decoding temperature (1 when greedy),
    NaN when not asked for. Host reads of single values, not extra tensor ops: on a CPU a tensor op
    costs 3-10 us and a read ~1 (4096 bfloat16 logits: 8 us without the confidence, 34 with it)."""
    if temperature > 0:
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        j = int(torch.multinomial(probs, 1, generator=generator))
        conf, q = float(probs.max()), to_vocab(probs, token_ids, vocab_size)
    else:
        j = int(argmax(logits))
        conf = float(torch.softmax(logits, dim=-1, dtype=torch.float32)[j]) if confidence else float("nan")
        q = None
    return Draw(j if token_ids is None else int(token_ids[j]), q, conf)  # a Python int: no tensor op


# ---- building a model's ranking ------------------------------------------------------------------

def _train_options() -> list[OptionSpec]:
    from . import selfdistill as sd
    return [o for o in sd.RECIPE_OPTIONS if o.name != "train_conversations"]


def train(target, options: dict, out_dir: Path | None, resume: bool = False) -> dict:
    """Count the answer tokens of the shared self-distillation data (its training rows: the held-out
    ones stay unseen, as for the trained drafters) and write the ranking."""
    from . import selfdistill as sd
    started = time.perf_counter()
    settings = sd.recipe({**options, "train_conversations": 0})
    ds, _, _ = sd.load_or_generate(target, settings, sd.data_dir(target, options, settings))
    train_rows, _ = sd.split_rows(len(ds), {**options, "train_conversations": 0})
    counts = sd.token_frequencies(ds.select(train_rows), target.vocab_size)
    order = rank(counts)
    out = (out_dir / f"{model_slug(target.name)}.safetensors") if out_dir else built_path(target)
    total = int(counts.sum())
    cover = {n: round(float(counts[order[:n]].sum()) / max(total, 1), 4) for n in (1024, 2048, 4096, 8192, 16384)
             if n < target.vocab_size}
    meta = {"model": target.name, "vocab_size": target.vocab_size, "conversations": len(train_rows),
            "answer_tokens": total, "distinct_tokens": int((counts > 0).sum()), "coverage": cover,
            "recipe": {k: options[k] for k in ("conversations", "max_answer_tokens", "seed", "held_out")},
            "wall_s": round(time.perf_counter() - started, 1)}
    save(out, order, counts, meta)
    return {"out": str(out), **meta}


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("draft-vocab", train, _train_options(),
                        help="rank the model's tokens by how often it writes them in its self-distillation answers "
                             "(the draft vocabulary of early exit, self-spec and Medusa)")]
