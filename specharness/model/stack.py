"""The decoder's layers as one module over the target's own tensors, the unit a backend compiles.

A drafter's head of the target's layout (Kangaroo's adapter block, EAGLE's draft layer) is a
``DecoderStack`` too, over the drafter's own tensors: it runs through the same backend as the
target (``TargetModel.add_stack``), so it is compiled with the target's dtype, mode and widths."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Collection
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .layers import Attention, AttentionWeights, Gemm, HeadShape, LayerWeights, decoder_layer, read_bytes, rms_norm

_UNNAMED = itertools.count()

Skip = tuple[Collection[int], Collection[int]]  # (layers whose attention, layers whose MLP a forward leaves out)


class DecoderStack(nn.Module):
    """The decoder's layers as one module over the target's own tensors (no copies), so the whole
    range [a, b) can be compiled into one graph with frozen, prepacked weights. Its ``attention``
    kernels are chosen once, when the stack is built (``layers.Attention.choose``)."""

    def __init__(self, layers: list[LayerWeights], embed_weight: torch.Tensor, norm_weight: torch.Tensor,
                 head_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float, shape: HeadShape,
                 attention: Attention, in_proj: tuple[torch.Tensor, torch.Tensor | None] | None = None,
                 max_width: int = 1, cache_layers: int | None = None) -> None:
        super().__init__()
        P = lambda x: nn.Parameter(x, requires_grad=False)  # noqa: E731  (shares the tensor's storage)
        self.wqkv = nn.ParameterList([P(w.attn.wqkv) for w in layers])
        # a stack mixing the target's layers with a drafter's (Kangaroo's: Qwen2's layers have q/k/v biases, its
        # adapter none) gives the bias-free ones zeros: one layout for every layer
        biased = [w.attn.bqkv for w in layers if w.attn.bqkv is not None]
        self.bqkv = nn.ParameterList([P(w.attn.bqkv if w.attn.bqkv is not None else torch.zeros_like(biased[0]))
                                      for w in layers]) if biased else None
        self.wo = nn.ParameterList([P(w.attn.wo) for w in layers])
        self.ln1 = nn.ParameterList([P(w.ln1) for w in layers])
        self.ln2 = nn.ParameterList([P(w.ln2) for w in layers])
        self.w_gate_up = nn.ParameterList([P(w.w_gate_up) for w in layers])
        self.w_down = nn.ParameterList([P(w.w_down) for w in layers])
        self.norm_weight = P(norm_weight)
        self.embed_weight = P(embed_weight)
        self.head_weight = self.embed_weight if head_weight is embed_weight else P(head_weight)  # tied: one tensor
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.eps, self.shape = eps, shape
        self.attention = attention  # graphs specialise on its kernel path (a frozen dataclass of a str)
        self.gemm = Gemm()  # the linear layers' kernel per static width: the compiled backend sets it
        # a drafter head's input projection (EAGLE's [token embedding ; feature] -> hidden), applied to
        # hidden-state inputs before the first layer
        self.in_w = P(in_proj[0]) if in_proj is not None else None
        self.in_b = P(in_proj[1]) if in_proj is not None and in_proj[1] is not None else None
        self.max_width = max_width  # a drafter stack's widest call (warm-up compiles its buckets up to it)
        # layers in the caches it writes: its own (a drafter head's cache), or the target's when the stack
        # is the target's own first layers (early exit's draft); warm-up's caches must match, as graphs
        # specialise on it
        self.cache_layers = cache_layers or len(layers)

    @property
    def input_size(self) -> int:
        """Width of a hidden-state input row (the projection's input when the stack has one)."""
        return self.in_w.shape[1] if self.in_w is not None else self.norm_weight.shape[0]

    def read_bytes(self, skip: Skip = ((), ())) -> int:
        """Bytes of weights one position's forward with the head reads (``layers.read_bytes``): its
        layers but ``skip``'s sublayers, its input projection, final norm and head rows."""
        return read_bytes([self.layer(i) for i in range(self.n_layers)], self.in_w, self.in_b, self.norm_weight,
                          self.head_weight, skip=skip)

    @property
    def n_layers(self) -> int:
        return len(self.wqkv)

    def layer(self, i: int) -> LayerWeights:
        """Layer ``i``'s tensors, read from this module's parameters (so compiled graphs freeze them)."""
        return LayerWeights(self.ln1[i], AttentionWeights(self.wqkv[i], self.bqkv[i] if self.bqkv is not None else None,
                                                         self.wo[i]), self.ln2[i], self.w_gate_up[i], self.w_down[i])

    def forward(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, bias: torch.Tensor,
                keys: torch.Tensor, values: torch.Tensor, a: int, b: int, head: bool | str,
                capture: Collection[int] = (), skip: Skip = ((), ()), wide: bool = False) -> tuple:
        """Layers [a, b) on token ids or hidden states; (hidden, logits or None, captured states).
        ``head`` "last": the logits at the last position only (a prompt's next token).
        ``keys``/``values``: a whole ``KVCache``'s tensors, layer i of the stack in layer i of the cache.
        ``wide``: the dynamic-width graph, which keeps SDPA (a width test on our kernel's limits there
        would guard it on one side, and a prefill on the other would recompile it while timing)."""
        if x.dtype == torch.long:
            h = F.embedding(x, self.embed_weight)
        else:
            h = x if self.in_w is None else self.gemm(x, self.in_w, self.in_b, wide)
        cos, sin = self.cos[positions], self.sin[positions]
        captured = []
        skip_attn, skip_mlp = skip
        for i in range(a, b):
            h = decoder_layer(h, self.layer(i), self.shape, self.eps, cos, sin, keys, values, i, slots, bias,
                              self.attention, skip_attn=i in skip_attn, skip_mlp=i in skip_mlp, wide=wide,
                              gemm=self.gemm)
            if i in capture:
                captured.append(h)
        top = h[-1:] if head == "last" else h
        logits = self.gemm(rms_norm(top, self.norm_weight, self.eps), self.head_weight, None, wide) if head else None
        return h, logits, tuple(captured)


def stack_name(method: str, source: Path | str | None, *parts) -> str:
    """A drafter stack's name for ``TargetModel.add_stack``, which keeps one stack per name: the same
    checkpoint (``source``: its directory, by path and modification time, or a reference such as
    'random:3') and ``parts`` (what else changes the weights, e.g. the draft vocabulary's size) give
    the same name, in any process (compile-progress estimates match graphs by name). ``source``
    None: a name no other drafter shares (drafters built directly, in tests)."""
    if source is None:
        return f"{method}-unnamed{next(_UNNAMED)}"
    ref = (str(source.resolve()), source.stat().st_mtime_ns) if isinstance(source, Path) else (source,)
    return f"{method}-" + hashlib.sha1(repr((ref, *parts)).encode()).hexdigest()[:8]
