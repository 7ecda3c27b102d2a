"""The decoder's building blocks, shared by the target's layer stack and by drafter heads.

RMSNorm, rotary embedding, the attention bias, the attention kernels (``Attention``: chosen once
when a model is built) and ``decoder_layer``, the public helper that runs one LLaMA-family layer
over any weights of the target's layout: the target's own layers (``stack.DecoderStack``), EAGLE's
draft layer and Kangaroo's adapter block run this same code, never a copy of it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..tree import Tree
from .accel import narrow_attention, narrow_linear, row_topk


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed as transformers does (statistics in float32, scale in the model dtype).

    In float32 torch's fused kernel gives the same values with one dispatch instead of six."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def argmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The index of the first largest value along ``dim``, exactly as ``Tensor.argmax`` (ties included),
    by our row top-k kernel where it serves (``accel.row_topk``), else through ``max``, whose CPU kernel
    is 3-4x faster than argmax's: on a 2-core EPYC one bfloat16 row of SmolLM2's 49,152 logits took
    187 us by argmax and 51 us by max, eight rows 751 and 187 us. Every round's greedy verification
    and most drafters take one."""
    if x.dim() in (1, 2) and dim in (-1, x.dim() - 1) and row_topk.usable(x):
        return row_topk.argmax(x)
    return x.max(dim=dim).indices


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of [heads, T, d] at the positions whose cos/sin rows are given."""
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = may attend) as the additive bias attention adds to its scores: 0 or -inf.

    ``TargetModel.forward`` makes it once per forward, outside any compiled graph, and every layer
    adds it: inductor's CPU loops load a bool mask slowly (scaling, selecting under the mask and
    softmax of [9, 32, 288] scores took 142 us compiled, 58 us adding a float mask instead:
    ``results/smollm2-cpu-xeon-profile/softmax_ab.txt``)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


class HeadShape(NamedTuple):
    """How attention splits a hidden state: query heads, key/value heads, head size."""

    n_heads: int
    n_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class Attention:
    """The attention kernels of one model, chosen once, when the model is built: ``narrow`` names
    the path of our own C++ kernel that serves its narrow forwards ("amx", "avx512-bf16", or ""
    where it does not serve: no AVX512-BF16, another head size, a float32 cache, switched off).
    Per call, only a forward's width (and whether it runs inside a compiled graph) picks among them.
    ``fallback`` says why SDPA serves where the kernel would: the kernel failed at run time in this
    process (``TargetModel.run_with_fallback``; one line).

    ``__call__`` writes k, v ([kv heads, T, d]) into cache slots, then attends q ([heads, T, d])
    over the first ``bias.shape[1]`` slots under ``bias`` ([T, slots]: a bool mask, True = may
    attend, or the additive bias of ``attention_bias`` in the cache's dtype). Grouped-query heads
    share their key/value head, never repeated (the query heads of one group are rows of one
    matrix). The cache holds the weights' dtype; scores and softmax run in float32; the result is
    [T, heads * d] in q's dtype.

    Kernels, by measurement on CPU (30 SmolLM2 layers of attention alone, compiled max-autotune:
    ``results/smollm2-cpu-xeon-profile-v4/attention_ab.txt``; the history is docs/engine-performance.md):
    - one position, inside a compiled graph, is a multiply-and-sum that inductor fuses into one
      loop reading the cache in place (context 288: 0.74 ms from a bfloat16 cache, 0.88 from
      float32); eager, SDPA where our kernel does not serve;
    - otherwise up to ``narrow_attention.max_width(narrow)`` positions over a bfloat16 cache, our
      kernel (``accel.narrow_attention``; never in the dynamic-width graph of prefills, ``wide``):
      "amx" (64 positions; AMX tiles from 9 query rows per key/value head) or "avx512-bf16" (8);
    - other forwards over a bfloat16 or float16 cache take SDPA, whose CPU flash kernel multiplies
      on AMX with a fused softmax, each group's query heads folded into the rows of one head; over
      a float32 cache, two bmm (as fast as float32 SDPA there).
    """

    narrow: str = ""
    fallback: str = ""

    @classmethod
    def choose(cls, kv_dtype: torch.dtype, device: torch.device, head_dim: int, mode: str = "on") -> "Attention":
        """The kernels for a cache of ``kv_dtype`` on ``device``; ``mode`` is
        ``EngineOptions.narrow_attention``."""
        serves = kv_dtype == torch.bfloat16 and narrow_attention.available(device, head_dim, mode)
        if serves and (failed := narrow_attention.failure()):
            return cls("", failed)
        return cls(narrow_attention.kind(mode) if serves else "")

    def describe(self) -> str | bool:
        """What result headers record: the kernel's path, "sdpa (fallback: <why>)", or False."""
        return self.narrow or (f"sdpa (fallback: {self.fallback})" if self.fallback else False)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor,
                 layer: int, slots: torch.Tensor, bias: torch.Tensor, wide: bool = False) -> torch.Tensor:
        """``k_all``/``v_all``: a whole cache's tensors (``KVCache.keys``/``values`` [layers, kv heads,
        slots, d]); ``layer``: the one this call writes and reads."""
        out_dtype = q.dtype
        write_slots(k_all, layer, slots, k)
        write_slots(v_all, layer, slots, v)
        k_cache, v_cache = k_all[layer], v_all[layer]
        H, T, d = q.shape
        Hkv, n = k_cache.shape[0], bias.shape[-1]
        g = H // Hkv
        keys, values = k_cache[:, :n], v_cache[:, :n]
        bias = bias.to(k_cache.dtype) if bias.is_floating_point() else attention_bias(bias, k_cache.dtype)
        if T == 1 and torch.compiler.is_compiling():
            q = q.float().reshape(Hkv, g, d)
            p = torch.softmax((q.unsqueeze(2) * keys.float().unsqueeze(1)).sum(-1) * d ** -0.5 + bias.float(), dim=-1)
            return (p.unsqueeze(-1) * values.float().unsqueeze(1)).sum(-2).reshape(1, H * d).to(out_dtype)
        q = q.to(k_cache.dtype)
        rows = q.reshape(Hkv, g * T, d)  # a group's query heads as rows of one matrix: K/V read once per group
        # the C++ op has no backward: a forward that trains (an adapter in bfloat16) takes SDPA
        trains = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        if (self.narrow and not wide and not trains and T <= narrow_attention.max_width(self.narrow)
                and k_cache.dtype == torch.bfloat16):
            o = narrow_attention.narrow_attention(rows, k_cache, v_cache, bias, self.narrow)
        elif T == 1:
            return F.scaled_dot_product_attention(rows, keys, values, attn_mask=bias).reshape(1, H * d).to(out_dtype)
        elif k_cache.dtype != torch.float32:
            o = F.scaled_dot_product_attention(rows.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                                               attn_mask=bias.repeat(g, 1))
        else:
            p = torch.softmax((torch.bmm(rows, keys.transpose(1, 2)) * d ** -0.5).view(Hkv, g, T, n) + bias, dim=-1)
            o = torch.bmm(p.view(Hkv, g * T, n), values)
        return o.view(H, T, d).transpose(0, 1).reshape(T, H * d).to(out_dtype)


WIDEN_ROWS = 16  # from this many rows an eager bfloat16 linear runs in float32 where bfloat16 is emulated


# whether this CPU has bfloat16 dot products (AVX512-BF16; every AMX CPU has them too): read once, as
# a constant a traced graph can read (dynamo refuses to trace torch's CPU query)
NATIVE_BFLOAT16 = torch.cpu._is_avx512_bf16_supported()


def widened(x: torch.Tensor, w: torch.Tensor, wide: bool) -> bool:
    """Whether a bfloat16 linear over ``x``'s rows runs in float32 (inputs widened exactly, float32
    sums rounded to bfloat16 once, as a bfloat16 GEMM rounds its accumulator): on a CPU without
    bfloat16 dot products, for a prompt's width. Why: there oneDNN emulates bfloat16 GEMMs, and a
    prefill cost 11.4 ms per prompt token against 2.1 widened (SmolLM2, 2-core Zen 3 EPYC with AVX2,
    results/smollm2-cpu-epyc-avx2-engine-choice), while one row stays cheaper in bfloat16 (half
    the bytes). The dynamic-width graph (``wide``, and its eager stand-in while it builds) widens
    every linear (a test of its symbolic width would guard it); other eager forwards widen from
    ``WIDEN_ROWS`` rows (one measured crossover: 8 rows 156 ms bfloat16 against 202 widened, 16
    rows 300 against 246, the weights' conversion included); a static compiled graph keeps what its
    compile mode picks."""
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16 or x.device.type != "cpu" or NATIVE_BFLOAT16:
        return False
    return wide or (not torch.compiler.is_compiling() and x.shape[0] >= WIDEN_ROWS)


@dataclass(frozen=True)
class Gemm:
    """The linear layers' kernel in a stack's compiled graphs: ``widths`` are the static widths whose
    graphs call our C++ kernel (``accel.narrow_linear``, chosen per width by
    ``backends.gemm_family``); everything else (eager calls, the dynamic-width graph, other widths,
    shapes it does not take, a forward that trains) is ``F.linear``, whose kernel inductor picks,
    in float32 for a prompt's width where bfloat16 is emulated (``widened``). Our kernel only inside
    a compiled graph: there the weights' packing (and a widened weight's float32 copy) is folded
    into constants at freezing, while eagerly it would copy every weight per call."""

    widths: tuple[int, ...] = ()

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, wide: bool = False) -> torch.Tensor:
        # ``wide`` first: in the dynamic-width graph a test of the width would guard it (a failed export)
        if (not wide and self.widths and torch.compiler.is_compiling() and x.shape[0] in self.widths
                and narrow_linear.fits(x, w) and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return narrow_linear.linear(x, w, b)
        if widened(x, w, wide):
            return F.linear(x.float(), w.float(), None if b is None else b.float()).to(torch.bfloat16)
        return F.linear(x, w, b)


def write_slots(buf: torch.Tensor, layer: int, slots: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``x`` [kv heads, T, d] into slots ``slots`` of ``layer`` of a whole cache ``buf`` [layers, kv heads,
    slots, d], as one in-place write to ``buf`` itself: inside a compiled graph, a write through the
    view ``buf[layer]`` is functionalised into a copy of the whole cache (23 ms a call at 512 slots)."""
    heads = torch.arange(buf.shape[1], device=buf.device).view(-1, 1)
    at = torch.full((1, 1), layer, dtype=torch.long, device=buf.device)
    return buf.index_put_((at, heads, slots.view(1, -1)), x.to(buf.dtype))


def attention_mask(start: int, tree: Tree, width: int, device) -> torch.Tensor:
    """[width, start + width] bool: every row sees the committed prefix; tree rows see their
    ancestors and themselves; padding rows (past the tree) see only themselves."""
    T = len(tree)
    m = torch.zeros(width, start + width, dtype=torch.bool, device=device)
    m[:, :start] = True
    m[:T, start:start + T] = tree.ancestors_mask(device)
    if width > T:
        idx = torch.arange(T, width, device=device)
        m[idx, start + idx] = True
    return m


def pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """A [T, start + T] bool mask widened to [width, start + width]: padding rows see only themselves."""
    T, start = mask.shape[0], mask.shape[1] - mask.shape[0]
    if width == T:
        return mask
    m = torch.zeros(width, start + width, dtype=torch.bool, device=mask.device)
    m[:T, :start + T] = mask
    idx = torch.arange(T, width, device=mask.device)
    m[idx, start + idx] = True
    return m


@dataclass
class AttentionWeights:
    """One attention block's tensors: fused q/k/v projection (and bias, Qwen2) and output."""

    wqkv: torch.Tensor
    bqkv: torch.Tensor | None
    wo: torch.Tensor


@dataclass
class LayerWeights:
    """One decoder layer's tensors (the target's, or a drafter head's of the same layout)."""

    ln1: torch.Tensor
    attn: AttentionWeights
    ln2: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


def read_bytes(layers: list[LayerWeights], *tensors: torch.Tensor | None,
               skip: tuple[Collection[int], Collection[int]] = ((), ())) -> int:
    """Bytes one position's forward reads from these weights: each layer's attention block (unless
    ``skip[0]`` holds its index) and MLP block (unless ``skip[1]`` does), and ``tensors`` (norms, an
    LM head or its draft rows), each tensor counted once. The byte roofline of a step is this over
    the memory bandwidth."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None:
            seen[id(t)] = t.numel() * t.element_size()
    for i, w in enumerate(layers):
        parts = ((w.ln1, w.attn.wqkv, w.attn.bqkv, w.attn.wo) if i not in skip[0] else ()) + \
                ((w.ln2, w.w_gate_up, w.w_down) if i not in skip[1] else ())
        for t in parts:
            if t is not None:
                seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def self_attention(x: torch.Tensor, w: AttentionWeights, shape: HeadShape, cos: torch.Tensor, sin: torch.Tensor,
                   keys: torch.Tensor, values: torch.Tensor, layer: int, slots: torch.Tensor, bias: torch.Tensor,
                   attention: Attention, wide: bool = False, gemm: Gemm = Gemm()) -> torch.Tensor:
    """The attention block of a layer on ``x`` (already normed) [T, hidden]: q/k/v projection,
    rotary embedding at the positions whose ``cos``/``sin`` rows are given, attention over the
    cache's ``layer`` (writing slots ``slots``; ``Attention.__call__``), and the output projection.
    No residual."""
    T, (H, Hkv, d) = x.shape[0], shape
    q, k, v = gemm(x, w.wqkv, w.bqkv, wide).split([H * d, Hkv * d, Hkv * d], dim=-1)
    q = rotary(q.view(T, H, d).transpose(0, 1), cos, sin)
    k = rotary(k.view(T, Hkv, d).transpose(0, 1), cos, sin)
    o = attention(q, k, v.view(T, Hkv, d).transpose(0, 1), keys, values, layer, slots, bias, wide)
    return gemm(o, w.wo, None, wide)


def mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, wide: bool = False,
        gemm: Gemm = Gemm()) -> torch.Tensor:
    """The SwiGLU feed-forward block (gate and up projections fused)."""
    gate, up = gemm(x, w_gate_up, None, wide).chunk(2, dim=-1)
    return gemm(F.silu(gate) * up, w_down, None, wide)


def decoder_layer(h: torch.Tensor, w: LayerWeights, shape: HeadShape, eps: float, cos: torch.Tensor,
                  sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, layer: int, slots: torch.Tensor,
                  bias: torch.Tensor, attention: Attention, skip_attn: bool = False, skip_mlp: bool = False,
                  wide: bool = False, gemm: Gemm = Gemm()) -> torch.Tensor:
    """One pre-norm LLaMA-family decoder layer on the hidden states ``h`` [T, hidden]: RMSNorm ->
    self-attention -> residual, RMSNorm -> SwiGLU -> residual. ``skip_attn``/``skip_mlp`` leave a
    block out (a layer-skipping self-drafter; a skipped attention writes no K/V). ``keys``/``values``:
    a whole ``KVCache``'s tensors, of which it writes and reads ``layer``. ``gemm``: the linear
    layers' kernel (``Gemm``: the stack's, in its compiled graphs)."""
    if not skip_attn:
        h = h + self_attention(rms_norm(h, w.ln1, eps), w.attn, shape, cos, sin, keys, values, layer, slots, bias,
                               attention, wide, gemm)
    if not skip_mlp:
        h = h + mlp(rms_norm(h, w.ln2, eps), w.w_gate_up, w.w_down, wide, gemm)
    return h
