"""Kangaroo's adapter: RMSNorm -> one attention block (the target's head layout) -> RMSNorm.

Parameter names are the authors' (``layers.0.self_attn.{q,k,v,o}_proj.weight``,
``layers.0.input_layernorm.weight``, ``norm.weight``), so their checkpoints load unchanged. The
block runs through ``TargetModel.attention_block`` with its own one-layer cache: the target's rotary
embedding and attention code, never a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from specharness.model import AttentionWeights, LayerWeights, TargetModel, rms_norm


class _Linear(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))


class _Norm(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


class _Attn(nn.Module):
    def __init__(self, hidden: int, n_heads: int, n_kv: int, head_dim: int) -> None:
        super().__init__()
        self.q_proj = _Linear(hidden, n_heads * head_dim)
        self.k_proj = _Linear(hidden, n_kv * head_dim)
        self.v_proj = _Linear(hidden, n_kv * head_dim)
        self.o_proj = _Linear(n_heads * head_dim, hidden)


class _MLP(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = _Linear(hidden, inner)
        self.up_proj = _Linear(hidden, inner)
        self.down_proj = _Linear(inner, hidden)


class _Layer(nn.Module):
    def __init__(self, hidden: int, n_heads: int, n_kv: int, head_dim: int, ffn_dim: int = 0) -> None:
        super().__init__()
        self.self_attn = _Attn(hidden, n_heads, n_kv, head_dim)
        self.input_layernorm = _Norm(hidden)
        if ffn_dim:  # Table 2 ablation only: the paper's adapter has no feed-forward block
            self.mlp = _MLP(hidden, ffn_dim)
            self.post_attention_layernorm = _Norm(hidden)


@dataclass
class AdapterWeights:
    """Fused tensors for one inference pass (training passes ``None`` and fuses per step)."""

    attn: AttentionWeights
    mlp: tuple[torch.Tensor, torch.Tensor] | None


class Adapter(nn.Module):
    """RMSNorm -> attention (target layout) -> residual -> RMSNorm; runs through target.attention_block.

    Two ablation variants (paper Table 2), both off in the method as published: ``ffn_dim`` adds
    a SwiGLU feed-forward block after the attention (through ``target.mlp``), ``head_rows`` gives
    the adapter its own LM head over the draft vocabulary instead of sharing the target's.
    """

    def __init__(self, hidden: int, n_heads: int, n_kv: int, head_dim: int, eps: float,
                 ffn_dim: int = 0, head_rows: int = 0) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Layer(hidden, n_heads, n_kv, head_dim, ffn_dim)])
        self.norm = _Norm(hidden)
        if head_rows:
            self.lm_head = _Linear(hidden, head_rows)
        self.eps = eps

    @property
    def ffn(self) -> bool:
        return hasattr(self.layers[0], "mlp")

    @property
    def own_head_rows(self) -> int:
        return self.lm_head.weight.shape[0] if hasattr(self, "lm_head") else 0

    @classmethod
    def _empty(cls, target: TargetModel, ffn: bool, head_rows: int) -> "Adapter":
        inner = getattr(target.config, "intermediate_size", 4 * target.hidden_size) if ffn else 0
        return cls(target.hidden_size, target.n_heads, target.n_kv_heads, target.head_dim, target.eps, inner, head_rows)

    @classmethod
    def for_target(cls, target: TargetModel, seed: int = 0, std: float = 0.02, ffn: bool = False,
                   head_rows: torch.Tensor | None = None) -> "Adapter":
        """A random block with unit norms (an own head, if asked, starts from the target's rows)."""
        a = cls._empty(target, ffn, cls._n_rows(target, head_rows))
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in a.named_parameters():
                if name.endswith("proj.weight"):
                    p.copy_(torch.randn(p.shape, generator=g) * std)
            cls._init_head(a, target, head_rows)
        return a.to(device=target.device, dtype=target.dtype)

    @staticmethod
    def _n_rows(target: TargetModel, head_rows: torch.Tensor | None) -> int:
        return 0 if head_rows is None else (head_rows.numel() or target.vocab_size)

    @staticmethod
    def _init_head(a: "Adapter", target: TargetModel, head_rows: torch.Tensor | None) -> None:
        if head_rows is not None:
            src = target.head_weight if not head_rows.numel() else target.head_weight[head_rows.to(target.device)]
            a.lm_head.weight.copy_(src)

    @classmethod
    def from_target_layer(cls, target: TargetModel, layer: int, ffn: bool = False,
                          head_rows: torch.Tensor | None = None) -> "Adapter":
        """Start from the target itself: layer ``layer``'s attention and input norm, the final norm.

        Untrained, this drafter is then the target's own next attention block followed by its
        final norm and head: a better starting point than a random block (which is a raw early
        exit through a unit norm). The FFN variant also copies that layer's feed-forward block; an
        own head starts as a copy of the target's head (``head_rows``: its token ids, empty = all).
        """
        if target.layers_w[layer].attn.bqkv is not None:  # Qwen2 attention has biases the Kangaroo layout lacks
            return cls.for_target(target, ffn=ffn, head_rows=head_rows)
        a = cls._empty(target, ffn, cls._n_rows(target, head_rows))
        w = target.layers_w[layer]
        q, k, v = w.attn.wqkv.split([target.n_heads * target.head_dim, target.n_kv_heads * target.head_dim,
                                     target.n_kv_heads * target.head_dim])
        with torch.no_grad():
            L0 = a.layers[0]
            attn = L0.self_attn
            for lin, src in ((attn.q_proj, q), (attn.k_proj, k), (attn.v_proj, v), (attn.o_proj, w.attn.wo)):
                lin.weight.copy_(src)
            L0.input_layernorm.weight.copy_(w.ln1)
            if ffn:
                gate, up = w.w_gate_up.chunk(2)
                L0.mlp.gate_proj.weight.copy_(gate)
                L0.mlp.up_proj.weight.copy_(up)
                L0.mlp.down_proj.weight.copy_(w.w_down)
                L0.post_attention_layernorm.weight.copy_(w.ln2)
            a.norm.weight.copy_(target.norm_weight)
            cls._init_head(a, target, head_rows)
        return a.to(device=target.device, dtype=target.dtype)

    def weights(self) -> AdapterWeights:
        a = self.layers[0].self_attn
        attn = AttentionWeights(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), None, a.o_proj.weight)
        mlp = None
        if self.ffn:
            m = self.layers[0].mlp
            mlp = (torch.cat([m.gate_proj.weight, m.up_proj.weight]), m.down_proj.weight)
        return AdapterWeights(attn, mlp)

    def layer_weights(self) -> LayerWeights:
        """The block as one decoder layer of the target's layout, for ``TargetModel.add_stack`` (no
        feed-forward block: empty tensors, and its forwards skip the MLP)."""
        w, L0 = self.weights(), self.layers[0]
        none = torch.empty(0, dtype=L0.input_layernorm.weight.dtype, device=L0.input_layernorm.weight.device)
        gate_up, down = w.mlp if w.mlp is not None else (none, none)
        ln2 = L0.post_attention_layernorm.weight if self.ffn else none
        attn = AttentionWeights(w.attn.wqkv.detach(), None, w.attn.wo.detach())
        return LayerWeights(L0.input_layernorm.weight.detach(), attn, ln2.detach(), gate_up.detach(), down.detach())

    def forward(self, target: TargetModel, x: torch.Tensor, cache, start: int,
                w: AdapterWeights | None = None) -> torch.Tensor:
        """Adapter output (normed, ready for the LM head) for positions [start, start + len(x))."""
        w = w or self.weights()
        L0 = self.layers[0]
        h = x + target.attention_block(rms_norm(x, L0.input_layernorm.weight, self.eps), w.attn, cache, 0, start,
                                 target.rope(start, x.shape[0]))
        if w.mlp is not None:
            h = h + target.mlp(rms_norm(h, L0.post_attention_layernorm.weight, self.eps), *w.mlp)
        return rms_norm(h, self.norm.weight, self.eps)

    def logits(self, target: TargetModel, hn: torch.Tensor, subset: torch.Tensor | None) -> torch.Tensor:
        """Draft logits: the adapter's own head if it has one, else the target's shared head
        (``subset``: its draft-vocabulary rows from ``target.head_rows``)."""
        if self.own_head_rows:
            return torch.nn.functional.linear(hn, self.lm_head.weight)
        return target.head(hn, subset)

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
