"""The one draft -> verify -> accept loop every method goes through.

Positions: after the prefill, ``state.ids[-1]`` is the *current* token: chosen by the target but
not yet run through it. A round is

    drafter.propose(state)  -> drafts (a chain, or a tree by parent indices), their q when sampling,
                               and optionally the hidden states entering layer l for every node
    target layers [l, L) on the current token + drafts, one forward, shared cache   -> logits
    verifier(logits, drafts, q, ...)  -> the accepted path and the target's own next token
    cache keeps the accepted path (moved into place for a tree); drafter.commit(state, verified)

so every round costs exactly one target forward and adds the accepted drafts + 1 tokens. Vanilla
decoding is the drafter that proposes nothing. ``commit`` receives the target's final hidden
states (before the final norm) and logits at the accepted positions, and the hidden states of the
layers the drafter names in ``capture_layers`` (feature-level drafters like EAGLE need them).
"""

from __future__ import annotations

from typing import Callable

import torch

from .api import DecodeState, Drafter, Verified
from .budget import FixedSize, Sizer, trim
from .model import TargetModel, bucket
from .records import Generation, Round
from .timing import RoundTimer
from .tree import Tree

CACHE_ROOM = 128  # slots past prompt + answer: drafts of the last round and compiled widths' padding


Accept = Callable[..., object]
Observer = Callable[[Round], None]


@torch.inference_mode()
def generate(target: TargetModel, drafter: Drafter, accept: Accept, prompt_ids: list[int],
             max_new_tokens: int, temperature: float = 0.0, seed: int = 0,
             on_round: Observer | None = None, sizer: Sizer | FixedSize | None = None) -> Generation:
    """Decode one prompt with ``drafter`` proposing and ``accept`` deciding; returns ids and rounds.
    A ``sizer`` (``budget=auto``) sets each round's draft size from the rounds before it."""
    timer = RoundTimer(target.device)
    n_prompt = len(prompt_ids)
    gen = torch.Generator(device=target.device).manual_seed(seed)
    # room past prompt + answer for the last round's drafts, padded to their width bucket
    room = max(CACHE_ROOM, bucket(int(getattr(drafter, "max_width", 1))))
    cache = target.session_cache(n_prompt + max_new_tokens + room)
    state = DecodeState(target, cache, list(prompt_ids), n_prompt, max_new_tokens, temperature, gen)
    l, capture = drafter.exit_layer, tuple(getattr(drafter, "capture_layers", ()))
    rounds: list[Round] = []

    # prefill: the whole prompt in one full forward (the graph every method shares); a drafter with
    # an exit layer gets the states entering it back as a captured layer, one with capture layers those
    ids = torch.tensor(prompt_ids, device=target.device)
    out = target.forward(ids, cache, 0, head=True, capture=tuple(sorted({*capture, *((l - 1,) if l else ())})),
                         prefill=True, last=True)
    h_exit = out.captured[l - 1] if l else None
    timer.mark()  # verified
    acc = accept(out.logits, [], None, temperature, gen)  # the prompt's last position only (last=True)
    state.ids.append(acc.next_token)
    state.final_hidden = out.hidden[-1]
    state.prompt_hidden, state.prompt_captured = out.hidden, out.captured
    drafter.begin(state, h_exit)
    state.prompt_hidden = state.prompt_captured = None
    untimed = getattr(drafter, "untimed_s", 0.0)
    timer.mark()  # accepted
    draft_s, verify_s, accept_s = timer.split(prefill=True)
    rounds.append(Round(0, 0, draft_s, verify_s, accept_s - untimed, width=n_prompt))
    if on_round:
        on_round(rounds[-1])

    eos = target.eos_ids
    stop = "eos" if acc.next_token in eos else "length"
    while stop != "eos" and len(state.ids) - n_prompt < max_new_tokens:
        timer.start()
        if sizer:  # room for the largest size any source gets, then the size of the source that proposed
            state.budget = sizer.room()
        prop = drafter.propose(state)
        if sizer:
            state.budget = min(state.budget, sizer.next(prop.source))
            prop = trim(prop, state.budget)
        timer.mark()  # drafted
        drafts, pos, current = prop.tokens, state.pos, state.ids[-1]
        k = len(drafts)
        tree = Tree.from_drafts(prop.parents, k)
        if max(tree.depths) > state.max_draft:
            raise RuntimeError(f"drafter proposed a path of {max(tree.depths)} tokens with room for {state.max_draft}")
        if pos + target.backend.width(k + 1) > cache.max_len:
            raise RuntimeError(f"drafter proposed {k} drafts at position {pos}, past the cache's {cache.max_len} slots; "
                               "a drafter that proposes wide trees must declare its max_width")
        x = prop.hidden if prop.hidden is not None else torch.tensor([state.ids[-1], *drafts], device=target.device)
        out = target.forward(x, cache, pos, prop.layer, tree=tree, head=True, capture=capture)
        timer.mark()  # verified
        extra = {} if tree.is_chain else {"parents": prop.parents}
        acc = accept(out.logits, drafts, prop.q, temperature, gen, **extra)
        if getattr(acc, "path", None) is not None:
            path = tuple(acc.path)
        elif tree.is_chain:
            path = tuple(range(1, acc.accepted + 1))
        else:  # a tree's kept nodes are not 1..n: guessing them would keep the wrong drafts
            raise RuntimeError("the verifier returned no path for a tree proposal; a tree verifier must say which "
                               "nodes it kept (Acceptance.path)")
        new = [drafts[i - 1] for i in path] + [acc.next_token]
        for i, tok in enumerate(new):
            if tok in eos:
                new, stop = new[:i + 1], "eos"
                break
        state.ids.extend(new)
        nodes = [0, *path]
        cache.compact(pos, nodes)
        cache.crop(pos + len(nodes))
        state.final_hidden = out.hidden[nodes[-1]]
        # the kept rows: a view when they are the first ones (a chain, a tree's first branch), one gather otherwise
        rows = slice(0, len(nodes)) if nodes[-1] == len(path) else torch.tensor(nodes, device=out.hidden.device)
        drafter.commit(state, Verified(pos, len(path), path, out.hidden[rows], out.logits[rows],
                                       {layer: h[rows] for layer, h in (out.captured or {}).items()},
                                       [current, *drafts], out.logits))
        if sizer:
            sizer.observe(state.budget, k, path, prop.source)
        timer.mark()  # accepted
        draft_s, verify_s, accept_s = timer.split()
        kept = min(len(path), len(new))
        rounds.append(Round(k, kept, draft_s, verify_s, accept_s, width=k + 1,
                            rejected_at=kept + 1 if kept == len(path) and tree.children[nodes[-1]] else 0,
                            budget=state.budget if sizer else 0, source=prop.source))
        if on_round:
            on_round(rounds[-1])
    out_ids = state.ids[n_prompt:n_prompt + max_new_tokens]
    return Generation(out_ids, rounds, timer.total() - untimed, stop)
