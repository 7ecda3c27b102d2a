"""The EAGLE-3 draft head (Li et al., arXiv:2503.01840): EAGLE's one decoder layer, reading a fusion of
the target's low, middle and high layers instead of its final state.

At a committed position t the head's feature is g_t = fuse([low_t ; mid_t ; high_t]): the target's
states entering three of its layers, each RMS-normed (its own weights), through one linear layer
(3H -> H). A drafted position reads the head's own output instead (its normed hidden state, as
EAGLE's does), and nothing asks that output to equal any target state: there is no feature
regression, only the tokens it predicts (training-time test, ``train.py``). Everything else is
EAGLE's head (``methods/eagle/head.py``): [token ; feature] -> linear -> the target's decoder-layer
code -> norm -> the target's LM head rows, run through the target's backend when drafting.

The default layers scale the authors' choice for LLaMA (entering layers 2, L/2 and L-3) to the
target's depth L: 2, 15 and 27 on SmolLM2's 30.
"""

from __future__ import annotations

import torch
from torch import nn

from specharness.errors import UsageError
from specharness.model import TargetModel

from ..eagle.head import EagleHead


def default_layers(n_layers: int) -> tuple[int, int, int]:
    """Entering layers 2, L/2 and L-3; a target of 3-5 layers fuses entering 1, 2 and 3."""
    if n_layers < 3:
        raise UsageError(f"EAGLE-3 fuses three of the target's layers; this target has {n_layers}")
    return (2, n_layers // 2, n_layers - 3) if n_layers >= 6 else (1, 2, 3)


def parse_layers(text: str, n_layers: int) -> tuple[int, ...]:
    """``-o layers=LOW,MID,HIGH`` (the states entering those layers; ``L`` = the last layer's output);
    empty = ``default_layers``."""
    if not text.strip():
        return default_layers(n_layers)
    try:
        layers = tuple(int(x) for x in text.replace("+", ",").split(","))
    except ValueError:
        raise UsageError(f"option layers={text}: give three layer numbers, e.g. layers=2,15,27") from None
    if len(layers) != 3 or len(set(layers)) != 3 or not all(1 <= x <= n_layers for x in layers):
        raise UsageError(f"option layers={text}: give three different layers in [1, {n_layers}] (the states "
                         f"entering them; {n_layers} = the last layer's output), e.g. "
                         f"layers={','.join(map(str, default_layers(n_layers)))}")
    return tuple(sorted(layers))


class Eagle3Head(EagleHead):
    METHOD = "eagle3"

    def __init__(self, hidden: int, n_heads: int, n_kv: int, head_dim: int, inner: int, eps: float,
                 layers: tuple[int, ...] = (2, 15, 27)) -> None:
        super().__init__(hidden, n_heads, n_kv, head_dim, inner, eps)
        self.layers = tuple(int(x) for x in layers)
        self.fuse_norm = nn.Parameter(torch.ones(len(self.layers), hidden))
        self.fuse = nn.Linear(len(self.layers) * hidden, hidden, bias=False)
        self.shape["layers"] = list(self.layers)

    @property
    def capture(self) -> tuple[int, ...]:
        """The target layers whose outputs are the states entering ``layers``."""
        return tuple(x - 1 for x in self.layers)

    @classmethod
    def from_config(cls, cfg: dict) -> "Eagle3Head":
        return cls(cfg["hidden"], cfg["n_heads"], cfg["n_kv"], cfg["head_dim"], cfg["inner"], cfg["eps"],
                   tuple(cfg["layers"]))

    @classmethod
    def for_target(cls, target: TargetModel, layers: tuple[int, ...] | None = None) -> "Eagle3Head":
        """EAGLE's start (the target's last layer), with a fusion that starts as the high layer alone."""
        base = EagleHead.for_target(target).float()
        head = cls(*(base.shape[k] for k in ("hidden", "n_heads", "n_kv", "head_dim", "inner", "eps")),
                   layers or default_layers(target.n_layers))
        H = target.hidden_size
        with torch.no_grad():
            head.load_state_dict(base.state_dict(), strict=False)
            head.fuse.weight.zero_()
            head.fuse.weight[:, -H:] = torch.eye(H)
        return head.to(device=target.device, dtype=target.dtype)

    def feature_source(self, hidden: torch.Tensor, captured: dict[int, torch.Tensor] | None) -> torch.Tensor:
        """The captured layers side by side [N, 3H] (a copy: it outlives the verification's buffers)."""
        return torch.cat([captured[x] for x in self.capture], dim=-1)

    def target_feature(self, target: TargetModel, source: torch.Tensor) -> torch.Tensor:
        """g = fuse([norm(low) ; norm(mid) ; norm(high)]), statistics in float32."""
        n, H = source.shape[0], self.shape["hidden"]
        x = source.float().view(n, len(self.layers), H)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.fuse_norm.float()
        return self.fuse(x.reshape(n, -1).to(self.fuse.weight.dtype))
