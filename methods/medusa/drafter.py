"""Medusa-1: K parallel heads on the target's last hidden state, verified as a tree (by default) or one sequence.

Head k (k = 1..K) reads the normed final hidden state h_t that chose the current token x_{t+1}
(``state.last_hidden``) and predicts x_{t+1+k}: the token k+1 positions after h_t's own. Each
head is residual block(s) ``x + SiLU(W x + b)`` (W zero-initialised, so an untrained block is the
identity) followed by its own LM head, initialised from the target's: the Medusa-1 architecture of
github.com/FasterDecoding/Medusa, restated here. ``tree=chain`` (the Kangaroo paper's comparison):
the K top-1 tokens (greedy) or K tokens each sampled from its head's own distribution (sampling,
handed over as q) form one draft sequence. ``tree=mc_sim_7b_63`` (the authors' default) or
``tree=sized`` (the option's default: its most likely paths, as many as the width curve makes cheap): node
(depth d, rank r) is head d's r-th token, and the engine verifies the whole tree in one forward
(``specharness.verify``: lossless speculative sampling over the tree; Medusa's own typical
acceptance is not lossless and is not offered). The drafter keeps no state between rounds. Each
head's LM head can be restricted to the ``draft_vocab`` tokens the target writes most often
(``specharness.draft_vocab``, FR-Spec): drafts are then taken from those tokens only.

Heads come from ``-o heads_path=...``:
  * a directory (or file) in the official Medusa-1 layout: ``medusa_lm_head.pt`` (a state dict of
    an ``nn.ModuleList`` of ``nn.Sequential(ResBlock * layers, Linear(hidden, vocab))``, keys
    ``{head}.{block}.linear.weight|bias`` and ``{head}.{layers}.weight``) beside a ``config.json``
    with ``medusa_num_heads`` and ``medusa_num_layers``; ``medusa_lm_head.safetensors`` is read
    too. A legacy checkpoint without the ``{head}.{layers}.weight`` keys uses the target's own LM
    head. Loaded with ``torch.load(weights_only=True)``: no pickled code runs.
  * ``random``: seeded untrained heads (random residual blocks, the target's shared LM head), for
    losslessness tests: the output must not depend on the heads.
  * empty (default): with ``lm_head=shared`` (the default), the residual heads shipped in
    ``methods/medusa/heads/<model>/`` (SmolLM2's, with their card); otherwise, or for a model with
    none shipped, the heads ``python -m specharness train medusa`` cached for this target under
    ``specharness.paths.cache_root()/medusa/<model>[-shared]``; if there are none, the run stops
    with a one-line message that says how to train them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from specharness import draft_vocab
from specharness.api import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.model import argmax, topk_indices
from specharness.options import OptionSpec
from specharness.training import checkpoint_summary

from .checkpoint import _find_checkpoint, has_checkpoint, heads_dir_for, load_heads, shipped_heads_dir
from .heads import DraftStep, MedusaHeads, random_heads
from .trees import TREES, paths, structure

# the shipped heads on a 2-core EPYC, sized tree (results/smollm2-cpu-epyc-defaults): 4096 rows 1.196x and
# 8192 rows 1.179x at CR 1.42-1.43 (stage 2, a tie within its intervals); the full head 0.959x at CR 1.40
# (stage 1): it reads 57 MB a round
DEFAULT_DRAFT_VOCAB = 4096
OPTIONS = [
    OptionSpec("heads", "int", 4, "Medusa heads used (head k drafts the k-th token after the current one)", min=1),
    OptionSpec("tree", "str", "sized", "'sized' (the first tree_size paths of the authors' tree: 1.21x against "
               "the chain's 1.08x over the same 4096 rows, results/smollm2-cpu-epyc-n10-v4), 'chain' (one "
               "sequence: each head's top token, as the Kangaroo paper compares) or 'mc_sim_7b_63' (the authors' "
               "63-node tree)",
               choices=TREES),
    OptionSpec("lm_head", "str", "shared", "which heads an empty heads_path means: 'shared' (residual blocks on "
               "the target's head: the shipped ones, else those 'train medusa -o lm_head=shared' cached) or "
               "'own' (Medusa-1: an LM head per head, as 'train medusa' cached them)",
               choices=("own", "shared")),
    OptionSpec("tree_size", "int", 7, "nodes of the 'sized' tree (the width curve's cheap widths: 7 + the current "
               "token = 8 positions)", min=1, max=63),
    OptionSpec("heads_path", "str", "",
               "official Medusa-1 checkpoint (dir with medusa_lm_head.pt + config.json), 'random' for "
               "untrained seeded heads, or empty for the shipped (lm_head=shared) or cached heads of this model",
               locates_weights=True),
    draft_vocab.option(DEFAULT_DRAFT_VOCAB),
]


def heads_source(target, options: dict) -> Path | None:
    """The checkpoint ``heads_path`` names (for an empty one, ``heads_dir_for``); None for random heads."""
    raw = (options.get("heads_path") or "").strip()
    if raw == "random":
        return None
    path = Path(raw).expanduser() if raw else heads_dir_for(target, options.get("lm_head", "shared"))
    if not raw and not has_checkpoint(path):
        raise UsageError(f"no Medusa heads for '{target.name}' (looked in {path}); train them with "
                         "'python -m specharness train medusa', or pass -o heads_path=DIR (official "
                         "Medusa-1 layout) or -o heads_path=random (untrained)")
    return path


def resolve_heads(target, options: dict) -> MedusaHeads:
    n = options["heads"]
    if n < 1:
        raise UsageError(f"option medusa.heads={n} must be at least 1")
    path = heads_source(target, options)
    if path is None:
        key: tuple = ("medusa-heads", "random", n)
    else:
        file = _find_checkpoint(path)
        key = ("medusa-heads", str(file.resolve()), file.stat().st_mtime_ns, n)
    if key not in target.memo:  # loaded once per target: build and params both ask for them
        target.memo[key] = random_heads(target, n) if path is None else load_heads(path, target, n)
    return target.memo[key]


class MedusaDrafter:
    exit_layer = 0  # drafts are verified by a full target forward from the embeddings

    def __init__(self, target, heads: MedusaHeads, tree: str = "chain", tree_size: int = 7,
                 rows: torch.Tensor | None = None) -> None:
        self.target, self.heads, self.rows = target, heads, rows
        self.head_w = heads.head_weights(target, rows)  # each head's LM-head rows, gathered once
        self.step = DraftStep(heads, self.head_w).eval()  # compiled by the target's backend, as its stacks are
        # a draft token's share of one drafting step: every head's blocks and head rows (a shared head once)
        head_bytes = sum({id(w): w.numel() * w.element_size() for w in self.head_w}.values())
        self.draft_bytes = (heads.block_bytes() + head_bytes) // heads.n_heads
        self.chain = tree == "chain"
        # a rank past the (draft) vocabulary names no token (a tiny model under mc_sim_7b_63): those paths go;
        # a path's prefixes rank no higher, so what is left is still a tree
        n_vocab = target.vocab_size if rows is None else rows.numel()
        kept = [p for p in paths(tree, heads.n_heads, tree_size) if max(p, default=0) < n_vocab]
        self.parents, self.picks = structure(kept)
        self.depth_of = [d for d, _ in self.picks]
        self.top = max(r for _, r in self.picks) + 1
        self.max_width = len(self.picks) + 1  # the widest verification forward (compiled before timing)

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        pass

    def propose(self, state: DecodeState) -> Proposal:
        k = min(self.heads.n_heads, state.max_draft)
        if k <= 0:
            return Proposal()
        logits = self.target.backend.run_module(self.step, state.last_hidden)[:k]  # [k, V']: head d drafts depth d + 1
        if self.chain:  # one sequence: sampled from each head's q when sampling, else each head's top token
            if state.temperature > 0:
                q = torch.softmax(logits.float() / state.temperature, dim=-1)
                j = torch.multinomial(q, 1, generator=state.generator)[:, 0]
                q = draft_vocab.to_vocab(q, self.rows, self.target.vocab_size)
            else:
                q, j = None, argmax(logits)
            tokens = draft_vocab.tokens(j, self.rows).tolist()
            eos = self.target.eos_ids
            for i, tok in enumerate(tokens):
                if tok in eos:  # nothing after an end of sequence can be kept
                    tokens, q = tokens[:i + 1], (q[:i + 1] if q is not None else None)
                    break
            return Proposal(tokens, q)
        # a tree: node (depth d, rank r) takes head d's r-th most likely token; chosen deterministically,
        # so sampling verifies them as point masses (Medusa's typical acceptance is not lossless)
        ranked = draft_vocab.tokens(topk_indices(logits, min(self.top, logits.shape[-1])), self.rows).tolist()
        keep = [i for i, d in enumerate(self.depth_of) if d < k]  # paths the remaining budget allows
        where = {i: j for j, i in enumerate(keep)}
        tokens = [ranked[self.depth_of[i]][self.picks[i][1]] for i in keep]
        parents = [0 if self.parents[i] == 0 else where[self.parents[i] - 1] + 1 for i in keep]
        return Proposal(tokens, None, parents=parents)

    def commit(self, state: DecodeState, verified) -> None:
        pass


def _rows(target, options: dict) -> torch.Tensor | None:
    return draft_vocab.rows(target, "medusa", options["draft_vocab"], DEFAULT_DRAFT_VOCAB)


def build(target, options: dict) -> MedusaDrafter:
    return MedusaDrafter(target, resolve_heads(target, options), options["tree"], options["tree_size"],
                         _rows(target, options))


def extra_params(target, options: dict) -> int:
    return resolve_heads(target, options).n_parameters


def heads_info(target, options: dict) -> dict:
    """The variant, for the report: own LM heads (Medusa-1) or the target's shared one, and the tree."""
    heads, path = resolve_heads(target, options), heads_source(target, options)
    shipped = path is not None and path == shipped_heads_dir(target)
    trained = checkpoint_summary(path.parent if path is not None and path.is_file() else path)
    return {"lm_head": "own" if heads.own_head else "shared", "tree": options["tree"] if options["tree"] != "sized"
            else f"sized ({options['tree_size']})",
            "heads": "random" if path is None else (f"shipped ({path.name})" if shipped else str(path)),
            **({"training": trained} if trained else {}), **draft_vocab.describe(target, _rows(target, options))}
