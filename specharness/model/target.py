"""TargetModel: the one place that knows a decoder's architecture.

Method plugins never touch transformers' modules. They call this interface instead:
``forward(x, cache, start, a, b, tree=..., head=...)`` runs decoder layers [a, b) over T positions
(token ids when a = 0, hidden states otherwise), writes their keys and values into cache slots
``start .. start+T-1`` and returns the hidden states (before the final norm) and, asked for, the
logits of the model's own LM head (never copied). Positions are addressed: a tree node at depth d
sits at position ``start + d`` and attends to the committed prefix, its ancestors and itself
(``specharness.tree``); a chain is the tree ``[-1, 0, 1, ...]``.

The forward is a lean restatement of the LLaMA-family decoder (LLaMA, Mistral, Qwen2) over the very
tensors transformers loaded (``stack.DecoderStack`` of ``layers.decoder_layer``), run eagerly or
compiled (``backends``). Which dtype and mode are fastest is measured, not assumed
(``engine_choice``). ``tests/test_target.py`` checks the logits against transformers for every
family, and compiled logits against eager ones.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F

from ..engine_options import EngineOptions
from ..errors import UsageError, exception_line
from ..tree import Tree
from . import loading
from .accel import narrow_attention
from .backends import COMPILE_MODES, WIDTH_BUCKETS, CompiledBackend, EagerBackend, ForwardRequest, GraphKey, bucket
from .cache import KVCache
from .layers import (Attention, AttentionWeights, HeadShape, LayerWeights, argmax, attention_bias, attention_mask, mlp,
                     pad_mask, rms_norm, self_attention)
from .loading import SUPPORTED_FAMILIES
from .stack import DecoderStack, Skip

R = TypeVar("R")


@dataclass
class Forward:
    """What a target forward returns: hidden states after its last layer (before the final norm),
    the logits when asked, and the hidden states after the layers a drafter asked to capture."""

    hidden: torch.Tensor
    logits: torch.Tensor | None = None
    captured: dict[int, torch.Tensor] | None = None


class TargetModel:
    """A loaded decoder with per-layer access, a shared cut-back cache and the shared LM head."""

    def __init__(self, hf_model, tokenizer=None, name: str = "model", source: str = "",
                 options: EngineOptions | None = None) -> None:
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
        self.layers_w: list[LayerWeights] = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            bias = None
            if a.q_proj.bias is not None:
                bias = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach()
            self.layers_w.append(LayerWeights(
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
        self.options = options or EngineOptions.from_env()
        self.shape = HeadShape(self.n_heads, self.n_kv_heads, self.head_dim)
        # the attention kernels, chosen once: every forward of this model (and its drafters' heads) uses them
        self.attention = Attention.choose(self.kv_dtype, self.device, self.head_dim, self.options.narrow_attention)
        self.backend: EagerBackend = EagerBackend({"": DecoderStack(
            self.layers_w, self.embed_weight, self.norm_weight, self.head_weight, self._cos, self._sin, self.eps,
            self.shape, self.attention)})
        # the engine configuration in force (dtype, mode, how it was chosen): set by whoever compiles
        # the target (``session.Session``), recorded in result headers
        self.engine: dict = {"dtype": str(self.dtype).removeprefix("torch."), "compile": "none", "chosen": "asked"}

    def compile(self, mode: str = "default") -> None:
        """Run the forward compiled (``default`` or ``max-autotune`` inductor modes) or eagerly (``none``)."""
        if mode not in COMPILE_MODES:
            raise UsageError(f"unknown compile mode '{mode}'; choose one of {', '.join(COMPILE_MODES)}")
        stacks = self.backend.stacks
        self.backend = EagerBackend(stacks) if mode == "none" else CompiledBackend(stacks, mode, self.device, self.options)
        self.engine = {**self.engine, "compile": mode}
        self.memo.pop("session-cache", None)

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, model: str | None = None, dtype: str = "float32", device: str = "cpu",
             options: EngineOptions | None = None) -> "TargetModel":
        """Load the embedded default ('smollm2'), a .gguf file, or a local Hugging Face directory. A
        bfloat16 target on the CPU builds our attention kernel meanwhile (a first run converts the GGUF
        file on one core while the compiler takes the other)."""
        if device == "cpu" and dtype == "bfloat16":
            narrow_attention.build_in_background((options or EngineOptions.from_env()).narrow_attention)
        hf, tok, name = loading.load_hf(model, dtype, device)
        return cls(hf, tok, name=name, source=str(model or loading.DEFAULT_MODEL), options=options)

    @classmethod
    def tiny(cls, family: str = "llama", vocab_size: int = 64, n_layers: int = 4, hidden_size: int = 64,
             n_heads: int = 4, n_kv_heads: int = 2, seed: int = 0, dtype: str = "float32",
             options: EngineOptions | None = None, eos: int | None = None) -> "TargetModel":
        """A small random model of a supported family, built in memory (tests, sampling checks);
        ``eos``: the token id that ends a sequence (none by default)."""
        hf = loading.tiny_hf(family, vocab_size, n_layers, hidden_size, n_heads, n_kv_heads, seed, dtype, eos)
        return cls(hf, None, name=f"tiny-{family}", source=f"tiny:{family}:{seed}", options=options)

    # ---- the forward -----------------------------------------------------------------------
    def kernel_flags(self) -> dict[str, bool | str]:
        """The engine's own kernel choices in force, for result headers and profile rows
        (``narrow_attention``: its path, "amx" or "avx512-bf16", "sdpa (fallback: <why>)" once it
        failed at run time, or False; ``narrow_linear``: the static widths whose graphs take our linear
        kernel)."""
        return {"amx_prefetch": self.backend.amx_prefetch, "cpp_wrapper": self.backend.cpp_wrapper,
                "narrow_attention": self.attention.describe(), "narrow_linear": list(self.backend.gemm.widths),
                "narrowest_width": self.backend.narrowest, "narrowest_why": self.backend.narrowest_why}

    def run_with_fallback(self, run: Callable[[], R]) -> R:
        """``run()`` (a forward that reads ``self.attention`` when called), rerun once on SDPA if it
        raises while our C++ kernel serves: a kernel failing at run time, eagerly or inside a
        compiled graph (which then recompiles without it), must not end the run. A rerun rewrites
        the same cache slots. If the rerun fails too the kernel was not the cause: it is restored
        and the error raised. Otherwise SDPA serves from now on, one line on stderr says why
        (``narrow_attention.record_failure``) and ``self.engine`` (the dict result headers hold,
        rewritten after warm-up and at the end) records it. No cost until something raises."""
        try:
            return run()
        except Exception as exc:
            if not self.attention.narrow:
                raise
            kernel, line = self.attention, exception_line(exc)
            self._use_attention(Attention("", line))
            try:
                out = run()
            except Exception:
                self._use_attention(kernel)
                raise
            narrow_attention.record_failure(line)
            if "narrow_attention" in self.engine:
                self.engine["narrow_attention"] = self.attention.describe()
            return out

    def _use_attention(self, attention: Attention) -> None:
        # the stack's graphs guard on its attention's kernel path: changing it recompiles them
        self.attention = attention
        for stack in self.backend.stacks.values():
            stack.attention = attention

    @property
    def kv_dtype(self) -> torch.dtype:
        """The cache's dtype: the weights'. On CPU a bfloat16 cache halves the bytes attention reads
        and lets wider forwards take SDPA's AMX flash kernel (see ``layers.Attention``)."""
        return self.dtype

    def new_cache(self, max_len: int, n_layers: int | None = None) -> KVCache:
        cache = KVCache(n_layers or self.n_layers, self.n_kv_heads, self.head_dim, max_len, self.kv_dtype, self.device)
        if self.backend.compiled:  # its length varies; compiled graphs do not specialise on it
            for buf in (cache.keys, cache.values):
                torch._dynamo.mark_dynamic(buf, 2)
        return cache

    def session_cache(self, max_len: int) -> KVCache:
        """The engine's cache, reused from one generation to the next (emptied, grown when a longer
        one is needed): no allocation per prompt, and on CUDA one static address per buffer."""
        cache = self.memo.get("session-cache")
        if cache is None or cache.max_len < max_len:
            cache = self.new_cache(max(max_len, 512))
            if self.device.type == "cuda":  # CUDA graphs replay on fixed addresses
                for buf in (cache.keys, cache.values):
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

    def attention_block(self, x: torch.Tensor, w: AttentionWeights, cache: KVCache, layer: int, start: int,
                        rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Causal self-attention of positions [start, start+T) over ``cache``'s layer ``layer``.

        Public because a drafter's own attention block (Kangaroo's adapter) has the target's head
        layout and rotary embedding: it runs through this same code (``layers.self_attention``) with
        its own weights and cache.
        """
        T = x.shape[0]
        cache.claim(layer, layer + 1, start, T)
        mask = attention_mask(start, Tree.chain(T - 1), T, x.device)
        slots = torch.arange(start, start + T, device=x.device)
        return self.run_with_fallback(lambda: self_attention(x, w, self.shape, *rope, cache.keys, cache.values, layer,
                                                             slots, mask, self.attention))

    def forward(self, x: torch.Tensor, cache: KVCache, start: int, a: int = 0, b: int | None = None,
                tree: Tree | None = None, head: bool = False, capture: tuple[int, ...] = (),
                skip: "Skip" = ((), ()), prefill: bool = False, stack: str = "",
                positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                last: bool = False) -> Forward:
        """Layers [a, b) over T positions: token ids (a = 0) or the hidden states entering layer a.

        Node i of ``tree`` (default: a chain) is at position ``start + depth(i)`` and writes cache
        slot ``start + i``. Returns the hidden states after layer b - 1 (before the final norm), the
        logits when ``head``, and the hidden states after each layer in ``capture``. ``skip`` =
        (layers whose attention, layers whose MLP is left out): a layer-skipping self-drafter's
        forward (its skipped attention writes no K/V; verification rewrites every layer). A
        ``prefill`` (a prompt, any length) runs a compiled target's dynamic-width graph, unpadded; one
        of more than one position computes every layer's states whatever ``capture`` asks, so all
        callers' prefills of one layer range share that graph.

        ``stack`` names a drafter's stack (``add_stack``) to run instead of the target's layers, through
        the same backend. ``positions`` [T] and ``mask`` [T, start + T] (bool: may attend) replace the
        tree's when a drafter head lays its nodes out itself (EAGLE's frontier at scratch slots).
        ``last``: the logits at the last position only, [1, V] (a prompt's next token): an unpadded
        forward then runs the LM head there alone. A prompt of 500 tokens otherwise spends about a
        tenth of its prefill on 500 x 49,152 logits no one reads (SmolLM2, bfloat16).
        """
        b = self.backend.stacks[stack].n_layers if b is None else b
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
        if self.backend.route and head and not (prefill or stack or skip[0] or skip[1]):  # a verification
            width = self.backend.routed(GraphKey(a, b, head, tuple(capture), x.dtype == torch.long, ((), ()), width))
        if positions is None:
            depths = torch.arange(T, device=self.device) if tree.is_chain else torch.tensor(tree.depths, device=self.device)
            positions = start + depths
        if width > T:  # padding rows: the last node repeated, writing slots past the tree, seeing only themselves
            x = torch.cat([x, x[-1:].expand(width - T, *x.shape[1:])])
            positions = torch.cat([positions, positions[-1:].expand(width - T)])
        cache.claim(a, b, start, T, width)
        slots = torch.arange(start, start + width, device=self.device)
        # made here, outside any compiled graph: inside one, inductor recomputes it from the bool mask in
        # every layer's softmax loop, which is what the float bias avoids
        mask = attention_mask(start, tree, width, self.device) if mask is None else pad_mask(mask, width)
        bias = attention_bias(mask, self.kv_dtype)
        # a wide prefill hands back every layer's states, whichever a caller keeps: one compiled graph
        # then serves every method's prefill (each graph costs ~20 s of warm-up even from the disk cache)
        run_capture = tuple(range(a, b)) if prefill and T > 1 else tuple(capture)
        # the head at the last position alone only in a dynamic-width forward: unpadded, and no graph added for it
        tail = "last" if head and last and self.backend.dynamic(T, prefill) else head
        request = ForwardRequest(x, positions, slots, bias, cache.keys, cache.values, a, b, tail, run_capture,
                                 (tuple(skip[0]), tuple(skip[1])), prefill, stack)
        h, logits, captured = self.run_with_fallback(lambda: self.backend(request))
        got = dict(zip(sorted(run_capture), captured))  # the stack hands them back in layer order
        if logits is not None and tail != "last":  # a padded forward's head ran at every row: keep the real ones
            logits = logits[T - 1:T] if last else logits[:T]
        return Forward(h[:T], logits,
                       {layer: got[layer][:T] for layer in capture} if capture else None)

    def add_stack(self, name: str, layers: list[LayerWeights], norm_weight: torch.Tensor, head_weight: torch.Tensor,
                  in_proj: tuple[torch.Tensor, torch.Tensor | None] | None = None,
                  shape: HeadShape | None = None, max_width: int = 1, cache_layers: int | None = None) -> str:
        """Run a drafter head of the target's layout (its decoder layers, final norm and LM head rows,
        optionally an input projection) through the target's own backend: ``forward(..., stack=name)``.
        It then runs exactly as the target does (the target's layer code, attention kernels, rotary
        embedding, dtype, compile mode, width buckets and C++ wrapper), its graphs are compiled in
        warm-up with the target's and counted with them, and the weights are frozen into them. A name
        says which weights it holds: one already added is kept, with its compiled graphs, and the
        tensors passed again are not read. ``max_width``: the most positions one of its forwards holds;
        warm-up compiles its width buckets up to that, whatever the warm-up prompt happened to need
        (EAGLE's warm-up may never accept enough drafts to run its head over 5 rows). ``cache_layers``: the
        layers of the caches it writes when not its own number (a stack of the target's first layers
        writes the target's cache). Returns ``name``."""
        if name in self.backend.stacks:
            return name
        if not name:
            raise ValueError("a drafter stack needs a name ('' is the target's own)")
        if shape is not None and shape != self.shape:
            raise ValueError(f"a drafter stack's head layout {shape} differs from the target's {self.shape}: the "
                             "target's cache and kernels assume its own")
        stack = DecoderStack(layers, self.embed_weight, norm_weight, head_weight, self._cos, self._sin, self.eps,
                             self.shape, self.attention, in_proj, max_width, cache_layers)
        self.backend.add_stack(name, stack)
        return name

    @contextmanager
    def eager(self):
        """Run forwards op by op inside the block: a search that tries many layer subsets must not
        compile a graph per try."""
        backend = self.backend
        self.backend = EagerBackend(backend.stacks)
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
        todo = list(self.backend.graphs if graphs is None else graphs)
        # a drafter stack's declared widest call gets static graphs too, even past the verification's
        self.expect_widths(max([max_width] + [self.backend.stacks[k.stack].max_width for k in todo]))
        seen: dict[tuple, int] = {}
        for a, b, head, capture, ids, skip, width, stack in todo:
            if width != "wide":
                sig = (a, b, head, capture, ids, skip, stack)
                verifies = head and skip == ((), ()) and verify_layer in (None, a) and not stack
                declared = min(self.backend.stacks[stack].max_width, WIDTH_BUCKETS[-1])  # a drafter stack's widest call
                seen[sig] = max(seen.get(sig, 1), max_width if verifies else width, declared)
        before = len(self.backend.graphs)
        with torch.inference_mode():  # the engine's tensors are inference tensors, and graphs guard on that
            # a cache as the run's are: a stack's graphs specialise on its cache's number of layers
            caches = {name: self.new_cache(256, n_layers=self.backend.stacks[name].cache_layers)
                      for name in {sig[-1] for sig in seen}}
            for (a, b, head, capture, ids, skip, stack), top in seen.items():
                size, cache = self.backend.stacks[stack].input_size, caches[stack]
                for w in WIDTH_BUCKETS:
                    if w > max(bucket(top), self.backend.narrowest):
                        break
                    if w < self.backend.narrowest:  # padded past: never run
                        continue
                    x = (torch.zeros(w, dtype=torch.long, device=self.device) if ids else
                         torch.zeros(w, size, dtype=self.dtype, device=self.device))
                    cache.crop(0)
                    if a:
                        cache.lengths[:a] = [32] * a
                    cache.lengths[a:b] = [32] * (b - a)
                    self.forward(x, cache, 32, a, b, head=head, capture=capture, skip=skip, stack=stack)
        return len(self.backend.graphs) - before

    def layers(self, h: torch.Tensor, start: int, a: int, b: int, cache: KVCache) -> torch.Tensor:
        """Decoder layers [a, b) on the hidden states (or ids) of a chain at [start, start + len(h))."""
        return self.forward(h, cache, start, a, b).hidden

    @staticmethod
    def mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        """The SwiGLU feed-forward block (``layers.mlp``; an adapter variant with an FFN runs it with
        its own weights)."""
        return mlp(x, w_gate_up, w_down)

    def norm(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.norm_weight, self.eps)

    def head(self, h_normed: torch.Tensor, subset: torch.Tensor | None = None) -> torch.Tensor:
        """The shared LM head; ``subset`` = rows gathered by ``head_rows`` (a cheap draft head)."""
        return F.linear(h_normed, self.head_weight if subset is None else subset)

    def head_rows(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The LM head's rows for ``token_ids``, gathered once: the caller keeps them for its draft steps."""
        return self.head_weight[token_ids.to(self.device)].contiguous()

    def logits(self, ids: list[int] | torch.Tensor, cache: KVCache | None = None, start: int = 0,
               last: bool = False) -> torch.Tensor:
        """Full forward of token ids from position ``start`` (tests and one-off checks): the logits at
        every position, or at the last only (the graph a run's prefill uses)."""
        ids = torch.as_tensor(ids, device=self.device)
        cache = cache or self.new_cache(start + len(ids))  # a prefill: never padded
        return self.forward(ids, cache, start, head=True, prefill=True, last=last).logits

    @torch.inference_mode()
    def greedy_continuation(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        """The model's own greedy continuation of ``prompt``, one position per forward, with no
        drafter and no engine: a reference the engine's output can be held against (an oracle's
        look-ahead, identity checks). Stops after an end-of-sequence token."""
        if max_new_tokens <= 0:
            return []
        cache = self.new_cache(len(prompt) + max_new_tokens + 1)
        logits = self.forward(torch.as_tensor(prompt, device=self.device), cache, 0, head=True, prefill=True,
                              last=True).logits
        out: list[int] = []
        while True:
            out.append(int(argmax(logits[-1])))
            if out[-1] in self.eos_ids or len(out) == max_new_tokens:
                return out
            x = torch.tensor(out[-1:], device=self.device)
            logits = self.forward(x, cache, len(prompt) + len(out) - 1, head=True).logits

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
