"""The one draft -> verify -> accept loop every method goes through.

Positions: after the prefill, ``state.ids[-1]`` is the *current* token: chosen by the target but
not yet run through it. A round is

    drafter.propose(state)            -> drafts d1..dk (+ their q when sampling, and optionally the
                                         hidden states entering layer l for current, d1..dk)
    target layers [l, L) on those k+1 positions, from the shared cache   -> logits [k+1, V]
    verifier(logits, drafts, q)       -> n accepted, plus the target's own next token
    cache.crop(pos + n + 1); drafter.commit(state, n)

so every round costs exactly one target forward and adds n + 1 tokens. Vanilla decoding is the
drafter that proposes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from .records import Generation, Round
from .target import KVCache, TargetModel
from .timing import clock_for


@dataclass
class Proposal:
    """What a drafter hands the engine; it never verifies or touches the acceptance maths."""

    tokens: list[int] = field(default_factory=list)
    q: torch.Tensor | None = None  # [k, V] draft distributions (sampling); None = deterministic drafts
    hidden: torch.Tensor | None = None  # [k+1, H] states entering layer `layer` for current, d1..dk
    layer: int = 0


@dataclass
class DecodeState:
    """What a drafter may read: the target, the shared cache, the sequence so far and the budget."""

    target: TargetModel
    cache: KVCache
    ids: list[int]
    prompt_len: int
    max_new_tokens: int
    temperature: float
    generator: torch.Generator
    last_hidden: torch.Tensor | None = None  # normed final hidden state that chose ids[-1]

    @property
    def pos(self) -> int:
        """Position of the current token (the first position the next forward computes)."""
        return len(self.ids) - 1

    @property
    def max_draft(self) -> int:
        """Drafts beyond this could not be kept: every round also adds the target's own token."""
        return self.max_new_tokens - (len(self.ids) - self.prompt_len) - 1


class Drafter(Protocol):
    exit_layer: int  # layer whose hidden states the drafter hands over (0: it hands over none)

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        """Called after the prefill; ``prefill_hidden`` = prompt states entering ``exit_layer``."""

    def propose(self, state: DecodeState) -> Proposal: ...

    def commit(self, state: DecodeState, accepted: int) -> None:
        """Called after the cache was cut back to the accepted length."""

    # optional: seconds of ``begin`` that are no cost of the method (an oracle's look-ahead); the
    # engine leaves them out of the prefill round and of the wall time
    untimed_s: float


Accept = Callable[[torch.Tensor, list[int], torch.Tensor | None, float, torch.Generator | None], object]
Observer = Callable[[Round], None]


@torch.inference_mode()
def generate(target: TargetModel, drafter: Drafter, accept: Accept, prompt_ids: list[int],
             max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
             on_round: Observer | None = None) -> Generation:
    """Decode one prompt with ``drafter`` proposing and ``accept`` deciding; returns ids and rounds."""
    perf_counter = clock_for(target.device)
    started = perf_counter()
    n_prompt = len(prompt_ids)
    gen = torch.Generator(device=target.device).manual_seed(seed)
    cache = target.new_cache(n_prompt + max_new_tokens)
    state = DecodeState(target, cache, list(prompt_ids), n_prompt, max_new_tokens, temperature, gen)
    L, l = target.n_layers, drafter.exit_layer
    rounds: list[Round] = []

    # prefill: the whole prompt, split at the drafter's exit layer so it can keep those states
    h = target.embed(torch.tensor(prompt_ids, device=target.device))
    h_exit = target.layers(h, 0, 0, l, cache) if l else None
    h = target.layers(h_exit if l else h, 0, l, L, cache)
    hn = target.norm(h[-1:])
    t_verified = perf_counter()
    acc = accept(target.head(hn), [], None, temperature, gen)
    state.ids.append(acc.next_token)
    state.last_hidden = hn[0]
    drafter.begin(state, h_exit)
    untimed = getattr(drafter, "untimed_s", 0.0)
    t_done = perf_counter()
    rounds.append(Round(0, 0, 0.0, t_verified - started, t_done - t_verified - untimed))
    if on_round:
        on_round(rounds[-1])

    eos = target.eos_ids
    stop = "eos" if acc.next_token in eos else "length"
    while stop != "eos" and len(state.ids) - n_prompt < max_new_tokens:
        t0 = perf_counter()
        prop = drafter.propose(state)
        t1 = perf_counter()
        drafts, pos = prop.tokens, state.pos
        k = len(drafts)
        if k > state.max_draft:
            raise RuntimeError(f"drafter proposed {k} tokens with room for {state.max_draft}")
        if prop.hidden is not None:
            h, a = prop.hidden, prop.layer
        else:
            h, a = target.embed(torch.tensor([state.ids[-1], *drafts], device=target.device)), 0
        hn = target.norm(target.layers(h, pos, a, L, cache))
        logits = target.head(hn)
        t2 = perf_counter()
        acc = accept(logits, drafts, prop.q, temperature, gen)
        n = acc.accepted
        new = drafts[:n] + [acc.next_token]
        for i, tok in enumerate(new):
            if tok in eos:
                new, stop = new[:i + 1], "eos"
                break
        state.ids.extend(new)
        cache.crop(pos + n + 1)
        state.last_hidden = hn[n]
        drafter.commit(state, n)
        t3 = perf_counter()
        rounds.append(Round(k, min(n, len(new)), t1 - t0, t2 - t1, t3 - t2))  # drafts kept, not past an eos
        if on_round:
            on_round(rounds[-1])
    out = state.ids[n_prompt:n_prompt + max_new_tokens]
    return Generation(out, rounds, perf_counter() - started - untimed, stop)
