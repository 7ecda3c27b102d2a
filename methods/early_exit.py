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

Greedy drafts are the argmax (q = None, a point mass); sampled drafts are drawn from the draft
distribution at the run's temperature and handed over as q, so speculative sampling in
``specharness.verify`` keeps the target's distribution exactly.
"""

from __future__ import annotations

import torch

from specharness.api import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.hookspecs import DrafterSpec, OptionSpec, hookimpl
from specharness.model import argmax

OPTIONS = [
    OptionSpec("exit_layer", "int", 2, "draft from target layers [0, exit_layer) (1 .. layers-1)", min=1),
    OptionSpec("gamma", "int", 6, "draft tokens per round", min=1),
    OptionSpec("eta", "float", 0.0,
               "stop drafting at the first token with top-1 draft probability <= eta (0: never stop early)",
               min=0.0, max=1.0),
]


class EarlyExitDrafter:
    """Draft through the target's shallow layers and shared head; hand over the layer-l states."""

    def __init__(self, target, exit_layer: int, gamma: int, eta: float) -> None:
        if not 1 <= exit_layer <= target.n_layers - 1:
            raise UsageError(f"option early_exit.exit_layer={exit_layer} is outside 1..{target.n_layers - 1} "
                             f"(the target has {target.n_layers} layers)")
        if gamma < 1:
            raise UsageError(f"option early_exit.gamma={gamma} must be at least 1")
        if not 0.0 <= eta <= 1.0:
            raise UsageError(f"option early_exit.eta={eta} is outside [0, 1]")
        self.target, self.exit_layer, self.gamma, self.eta = target, exit_layer, gamma, eta
        self.max_width = gamma + 1  # the widest verification forward (compiled before timing)

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        pass  # the engine's prefill already wrote layers [0, l) of the prompt

    def propose(self, state: DecodeState) -> Proposal:
        t, l = self.target, self.exit_layer
        k_max = min(self.gamma, state.max_draft)
        if k_max <= 0:
            return Proposal()
        sampling = state.temperature > 0
        pos = state.pos
        h = t.layers(t.embed(torch.tensor([state.ids[-1]], device=t.device)), pos, 0, l, state.cache)
        hidden, tokens, qs = [h], [], []
        while len(tokens) < k_max:
            logits = t.head(t.norm(h))[0]
            if sampling or self.eta > 0:
                probs = torch.softmax(logits.float() / (state.temperature if sampling else 1.0), dim=-1)
            if sampling:
                tok = int(torch.multinomial(probs, 1, generator=state.generator))
                qs.append(probs)
            else:
                tok = int(argmax(logits))
            tokens.append(tok)
            h = t.layers(t.embed(torch.tensor([tok], device=t.device)), pos + len(tokens), 0, l, state.cache)
            hidden.append(h)
            if tok in t.eos_ids or (self.eta > 0 and float(probs.max()) <= self.eta):
                break
        return Proposal(tokens, torch.stack(qs) if qs else None, torch.cat(hidden), l)

    def commit(self, state: DecodeState, accepted: int) -> None:
        pass  # the cache was cut back to the accepted prefix; nothing else is kept between rounds


def build(target, options: dict) -> EarlyExitDrafter:
    return EarlyExitDrafter(target, options["exit_layer"], options["gamma"], options["eta"])


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("early_exit", build, OPTIONS, params=lambda target, options: 0,
                        help="draft gamma tokens from target layers [0, l) through the shared head "
                             "(no adapter; the Kangaroo paper's fixed-step early-exit baseline)")]
