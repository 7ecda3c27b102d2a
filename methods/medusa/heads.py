"""Medusa-1 heads: K residual blocks ``x + SiLU(W x + b)`` on the last hidden state, each with its
own LM head or the target's shared one (github.com/FasterDecoding/Medusa, restated).

The module's ``state_dict`` is the official layout (``{i}.{j}.linear.*``, ``{i}.{layers}.weight``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

RANDOM_SEED = 1234


class ResBlock(nn.Module):
    """x + SiLU(W x + b); W starts at zero so the block starts as the identity."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """K heads; ``own_head`` gives each its own LM head (trained heads), else the target's is used.

    The module's ``state_dict`` is the official layout (``{i}.{j}.linear.*``, ``{i}.{layers}.weight``).
    """

    def __init__(self, hidden: int, vocab: int, n_heads: int, n_layers: int = 1,
                 own_head: bool = True, init_head: torch.Tensor | None = None) -> None:
        super().__init__()
        self.hidden, self.vocab, self.n_layers, self.own_head = hidden, vocab, n_layers, own_head
        heads = []
        for _ in range(n_heads):
            mods: list[nn.Module] = [ResBlock(hidden) for _ in range(n_layers)]
            if own_head:
                lm = nn.Linear(hidden, vocab, bias=False)
                if init_head is not None:
                    with torch.no_grad():
                        lm.weight.copy_(init_head)
                mods.append(lm)
            heads.append(nn.Sequential(*mods))
        self.heads = nn.ModuleList(heads)

    @property
    def n_heads(self) -> int:
        return len(self.heads)

    def state_dict_official(self) -> dict[str, torch.Tensor]:
        return {k.removeprefix("heads."): v for k, v in self.state_dict().items()}

    def load_official(self, sd: dict[str, torch.Tensor]) -> None:
        self.heads.load_state_dict(sd)

    def features(self, h: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """Residual-block outputs of the first ``n`` heads: [n, *h.shape]."""
        out = []
        for head in list(self.heads)[:n]:
            x = h
            for block in list(head)[:self.n_layers]:
                x = block(x)
            out.append(x)
        return torch.stack(out)

    def block_bytes(self) -> int:
        """Bytes of every head's residual blocks (what ``features`` reads; the LM heads apart)."""
        return sum(p.numel() * p.element_size() for head in self.heads for block in list(head)[:self.n_layers]
                   for p in block.parameters())

    def head_weights(self, target, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each head's LM-head weight (its own, or the target's shared one), restricted to the draft
        vocabulary's ``rows`` (token ids) when given: gathered once, by whoever drafts with them."""
        if not self.own_head:
            return [target.head_weight if rows is None else target.head_rows(rows)] * self.n_heads
        return [head[-1].weight if rows is None else head[-1].weight[rows].contiguous() for head in self.heads]

    def logits(self, h: torch.Tensor, target, n: int | None = None,
               weights: list[torch.Tensor] | None = None) -> torch.Tensor:
        """[n, *h.shape[:-1], V]: head k's logits for the token k+1 positions after h's own, over the
        rows of ``weights`` (``head_weights``; default: every token)."""
        weights = weights or self.head_weights(target)
        return project(self.features(h, n), weights, all(w is weights[0] for w in weights))

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class DraftStep(nn.Module):
    """Every head's logits over its (draft-vocabulary) rows from one hidden state: what a round drafts
    with, as one module the target's backend compiles (``run_module``). Always every head, so its one
    input shape gives one graph; a round near the answer's end slices the heads it can use."""

    def __init__(self, heads: MedusaHeads, weights: list[torch.Tensor]) -> None:
        super().__init__()
        self.heads = heads
        self.shared = all(w is weights[0] for w in weights)  # one LM head for every head: one matmul
        for i, w in enumerate(weights[:1] if self.shared else weights):  # buffers, not copies: frozen into the graph
            self.register_buffer(f"w{i}", w, persistent=False)
        self.names = ["w0" if self.shared else f"w{i}" for i in range(len(weights))]  # head i's buffer

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[n heads, V'] from one hidden state [H] (as a row: inductor's CPU linear fusion fails on a 1-D input)."""
        x = self.heads.features(h.view(1, -1))
        return project(x, [getattr(self, name) for name in self.names], self.shared)[:, 0]


def project(x: torch.Tensor, weights: list[torch.Tensor], shared: bool) -> torch.Tensor:
    """[n, ..., V']: head i's features ``x[i]`` through its LM-head rows ``weights[i]``; ``shared``
    (every head on one LM head): one matmul for all of them."""
    if shared:
        return F.linear(x, weights[0])
    return torch.stack([F.linear(x[i], weights[i]) for i in range(x.shape[0])])


def random_heads(target, n_heads: int, n_layers: int = 1, seed: int = RANDOM_SEED) -> MedusaHeads:
    """Seeded untrained heads: random residual blocks on the target's shared head (no copy)."""
    heads = MedusaHeads(target.hidden_size, target.vocab_size, n_heads, n_layers, own_head=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 / p.shape[-1] ** 0.5)
    return heads.to(dtype=target.dtype, device=target.device).eval().requires_grad_(False)
