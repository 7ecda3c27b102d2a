"""Fixed-gamma early exit: draft from the target's first ``l`` layers, no adapter.

The Kangaroo paper's ablation baseline ("without the adapter"): the draft model is target layers
[0, l) followed by the target's own final norm and its shared LM head (never a copy). It drafts
``gamma`` tokens autoregressively (default 6) and, with ``eta`` > 0, stops at the first token
whose top-1 draft probability is <= eta (that token is still proposed); ``eta`` = 0, the default,
is the paper's fixed-step setting with no confidence stop.

A round on current token c at position p:

    shallow(c) -> head -> d1, shallow(d1) -> head -> d2, ..., shallow(d_{k-1}) -> head -> dk, shallow(dk)

The k+1 shallow passes write layers [0, l) of the shared KV cache and their outputs, the states
entering layer l for c, d1..dk, go to the engine, which verifies with layers [l, L) only. The last
draft's shallow pass is needed for that hand-over (not to draft). After the engine cuts the cache
back, positions p..p+n hold accepted tokens whose shallow K/V are already right, so the drafter
keeps no state of its own: the next round starts with the shallow pass of the new current token.

A draft step (embedding -> layers [0, l) -> final norm -> head) is one compiled graph: a drafter
stack over the target's own first layers (``TargetModel.add_stack``, writing the target's cache),
whose head is the target's LM head restricted to the ``draft_vocab`` tokens the target writes most
often (``specharness.draft_vocab``; the full head with ``draft_vocab=0``).

Greedy drafts are the argmax (q = None, a point mass); sampled drafts are drawn from the draft
distribution at the run's temperature and handed over as q (zero outside the draft vocabulary), so
speculative sampling in ``specharness.verify`` keeps the target's distribution exactly.
"""

from __future__ import annotations

import torch

from specharness import draft_vocab
from specharness.api import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.hookspecs import DrafterSpec, OptionSpec, hookimpl
from specharness.model import TargetModel, stack_name

# measured (results/smollm2-cpu-epyc-draft-vocab): 1024-4096 rows 0.47x against 0.33x for the full head and
# 0.43x at 8192; 4096 keeps the full head's CR (1.064)
DEFAULT_DRAFT_VOCAB = 4096
OPTIONS = [
    OptionSpec("exit_layer", "int", 2, "draft from target layers [0, exit_layer) (1 .. layers-1)", min=1),
    OptionSpec("gamma", "int", 6, "draft tokens per round", min=1),
    OptionSpec("eta", "float", 0.0,
               "stop drafting at the first token with top-1 draft probability <= eta (0: never stop early)",
               min=0.0, max=1.0),
    draft_vocab.option(DEFAULT_DRAFT_VOCAB),
]


class EarlyExitDrafter:
    """Draft through the target's shallow layers and shared head; hand over the layer-l states."""

    def __init__(self, target: TargetModel, exit_layer: int, gamma: int, eta: float,
                 rows: torch.Tensor | None = None) -> None:
        if not 1 <= exit_layer <= target.n_layers - 1:
            raise UsageError(f"option early_exit.exit_layer={exit_layer} is outside 1..{target.n_layers - 1} "
                             f"(the target has {target.n_layers} layers)")
        if gamma < 1:
            raise UsageError(f"option early_exit.gamma={gamma} must be at least 1")
        if not 0.0 <= eta <= 1.0:
            raise UsageError(f"option early_exit.eta={eta} is outside [0, 1]")
        self.target, self.exit_layer, self.gamma, self.eta, self.rows = target, exit_layer, gamma, eta, rows
        self.max_width = gamma + 1  # the widest verification forward (compiled before timing)
        head = target.head_weight if rows is None else target.head_rows(rows)
        source = draft_vocab.ranking_path(target) if rows is not None else "full-head"  # a Path: named with its mtime
        self.stack = target.add_stack(stack_name("early_exit", source, exit_layer, None if rows is None else rows.numel()),
                                      target.layers_w[:exit_layer], target.norm_weight, head,
                                      cache_layers=target.n_layers)
        self.draft_bytes = target.backend.stacks[self.stack].read_bytes()  # a draft token: one pass of the stack

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        pass  # the engine's prefill already wrote layers [0, l) of the prompt

    def _shallow(self, token: int, pos: int, state: DecodeState, head: bool = True):
        t = self.target
        return t.forward(torch.tensor([token], device=t.device), state.cache, pos, 0, self.exit_layer, head=head,
                         stack=self.stack)

    def propose(self, state: DecodeState) -> Proposal:
        t = self.target
        k_max = min(self.gamma, state.max_draft, state.budget)
        if k_max <= 0:
            return Proposal()
        pos = state.pos
        out = self._shallow(state.ids[-1], pos, state)
        hidden, tokens, qs = [out.hidden], [], []
        while True:
            d = draft_vocab.draw(out.logits[0], self.rows, t.vocab_size, state.temperature, state.generator,
                                 confidence=self.eta > 0)
            tokens.append(d.token)
            if d.q is not None:
                qs.append(d.q)
            stop = len(tokens) == k_max or d.token in t.eos_ids or (self.eta > 0 and d.confidence <= self.eta)
            # the last draft's pass only hands its layer-l state over: no head
            out = self._shallow(d.token, pos + len(tokens), state, head=not stop)
            hidden.append(out.hidden)
            if stop:
                break
        return Proposal(tokens, torch.stack(qs) if qs else None, torch.cat(hidden), self.exit_layer)

    def commit(self, state: DecodeState, accepted: int) -> None:
        pass  # the cache was cut back to the accepted prefix; nothing else is kept between rounds


def _rows(target: TargetModel, options: dict) -> torch.Tensor | None:
    return draft_vocab.rows(target, "early_exit", options["draft_vocab"], DEFAULT_DRAFT_VOCAB)


def build(target: TargetModel, options: dict) -> EarlyExitDrafter:
    return EarlyExitDrafter(target, options["exit_layer"], options["gamma"], options["eta"], _rows(target, options))


def info(target: TargetModel, options: dict) -> dict:
    return draft_vocab.describe(target, _rows(target, options))


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("early_exit", build, OPTIONS, sizable=True, params=lambda target, options: 0, info=info,
                        help="draft gamma tokens from target layers [0, l) through the shared head "
                             "(no adapter; the Kangaroo paper's fixed-step early-exit baseline)")]
