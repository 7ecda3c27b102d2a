"""The EAGLE draft head (Li et al., arXiv:2401.15077): one decoder layer over [token ; feature].

At position t it reads the embedding of token x_{t+1} and the target's feature f_t (its final
hidden state after the final norm, the state the LM head reads) through a linear layer
(2H -> H), then one decoder layer of the target's shape (``specharness.model.decoder_layer``, the target's own layer code: attention with the
target's head layout and rotary embedding, its own one-layer KV cache, SwiGLU feed-forward) and an RMSNorm (started
from the target's final norm, since the features it predicts are normed), and predicts f_{t+1}; the
target's own LM head (shared, never copied; optionally restricted to a draft vocabulary) turns
that into the draft distribution of x_{t+2}. Drafting deeper feeds the head its own predictions.
"""

from __future__ import annotations

import torch
from torch import nn

from specharness.model import AttentionWeights, HeadShape, LayerWeights, TargetModel, decoder_layer, rms_norm


class EagleHead(nn.Module):
    METHOD = "eagle"  # the method (and trainer) whose checkpoints hold this head
    capture: tuple[int, ...] = ()  # target layers whose outputs the head reads (EAGLE: none, the final state)

    def __init__(self, hidden: int, n_heads: int, n_kv: int, head_dim: int, inner: int, eps: float) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * hidden, hidden)
        self.ln1 = nn.Parameter(torch.ones(hidden))
        self.wqkv = nn.Parameter(torch.empty((n_heads + 2 * n_kv) * head_dim, hidden))
        self.wo = nn.Parameter(torch.empty(hidden, n_heads * head_dim))
        self.ln2 = nn.Parameter(torch.ones(hidden))
        self.w_gate_up = nn.Parameter(torch.empty(2 * inner, hidden))
        self.w_down = nn.Parameter(torch.empty(hidden, inner))
        self.out_norm = nn.Parameter(torch.ones(hidden))  # features are post-norm: predict them through a norm
        self.shape = dict(hidden=hidden, n_heads=n_heads, n_kv=n_kv, head_dim=head_dim, inner=inner, eps=eps)
        self.eps = eps

    @classmethod
    def from_config(cls, cfg: dict) -> "EagleHead":
        """A head of the shape a checkpoint's config.json records."""
        return cls(cfg["hidden"], cfg["n_heads"], cfg["n_kv"], cfg["head_dim"], cfg["inner"], cfg["eps"])

    def feature_source(self, hidden: torch.Tensor, captured: dict[int, torch.Tensor] | None) -> torch.Tensor:
        """What the head keeps of the target's states at committed positions (``hidden``: final, before the
        norm; ``captured``: the layers ``capture`` names) until it turns them into features."""
        return hidden

    def target_feature(self, target: TargetModel, source: torch.Tensor) -> torch.Tensor:
        """The feature the head reads at a committed position: EAGLE's is the target's normed final state."""
        return target.norm(source)

    @classmethod
    def for_target(cls, target: TargetModel) -> "EagleHead":
        """A head shaped for ``target``, started from the target itself: its last decoder layer, and a
        linear layer that adds the token embedding to the feature (so, untrained, it already passes
        the target's last state through that layer once more)."""
        inner = getattr(target.config, "intermediate_size", 4 * target.hidden_size)
        head = cls(target.hidden_size, target.n_heads, target.n_kv_heads, target.head_dim, inner, target.eps)
        last = target.layers_w[-1]
        H = target.hidden_size
        with torch.no_grad():
            head.fc.weight.copy_(torch.cat([torch.eye(H), torch.eye(H)], dim=1))
            head.fc.bias.zero_()
            head.ln1.copy_(last.ln1.float())
            head.wqkv.copy_(last.attn.wqkv.float())
            head.wo.copy_(last.attn.wo.float())
            head.ln2.copy_(last.ln2.float())
            head.w_gate_up.copy_(last.w_gate_up.float())
            head.w_down.copy_(last.w_down.float())
            head.out_norm.copy_(target.norm_weight.float())
        return head.to(device=target.device, dtype=target.dtype)

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def layer_weights(self, detach: bool = False) -> LayerWeights:
        """The draft layer's tensors (detached: for a frozen inference stack)."""
        f = (lambda t: t.detach()) if detach else (lambda t: t)  # noqa: E731
        return LayerWeights(f(self.ln1), AttentionWeights(f(self.wqkv), None, f(self.wo)), f(self.ln2),
                            f(self.w_gate_up), f(self.w_down))

    def add_to(self, target: TargetModel, name: str, head_rows: torch.Tensor | None, max_width: int) -> str:
        """This head as a stack of the target's (``TargetModel.add_stack``): [embedding ; feature] ->
        fc -> decoder layer -> out_norm -> the LM head's rows (``head_rows``, None = the whole head),
        so a draft step runs through the target's backend, compiled with it."""
        shape = HeadShape(self.shape["n_heads"], self.shape["n_kv"], self.shape["head_dim"])
        return target.add_stack(name, [self.layer_weights(detach=True)], self.out_norm.detach(),
                                target.head_weight if head_rows is None else head_rows,
                                in_proj=(self.fc.weight.detach(), self.fc.bias.detach()), shape=shape,
                                max_width=max_width)

    def feature(self, h: torch.Tensor) -> torch.Tensor:
        """The predicted feature from the stack's hidden output (its out_norm, as ``forward`` ends)."""
        return rms_norm(h, self.out_norm, self.eps)

    def forward(self, target: TargetModel, emb: torch.Tensor, feat: torch.Tensor, positions: torch.Tensor,
                slots: torch.Tensor, mask: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Predicted features [N, H] for N inputs (token embeddings and features [N, H]) at
        ``positions``, written to slots of a one-layer cache's ``keys``/``values`` (``KVCache.keys``),
        attending where ``mask`` [N, slots] allows (training; drafting runs the stack of ``add_to``)."""
        layer = self.layer_weights()
        cos, sin = target.rope_at(positions)
        shape = HeadShape(self.shape["n_heads"], self.shape["n_kv"], self.shape["head_dim"])  # the head's own layout
        x = self.fc(torch.cat([emb, feat], dim=-1))
        h = target.run_with_fallback(lambda: decoder_layer(x, layer, shape, self.eps, cos, sin, keys, values, 0,
                                                           slots, mask, target.attention))  # SDPA if our kernel fails
        return self.feature(h)
