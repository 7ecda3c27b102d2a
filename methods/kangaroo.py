"""Kangaroo: double early exiting self-speculative decoding (Liu et al., arXiv:2404.18911).

Draft model = the target's layers [0, l) (frozen, writing the target's own KV cache) -> adapter
(RMSNorm -> one attention block with the target's head layout, rotary embedding and its own 1-layer
KV cache, residual -> RMSNorm) -> the target's shared LM head (optionally only the rows of the
``draft_vocab`` most frequent tokens of the self-distillation data: a cheaper draft step, still
lossless because verification is exact and speculative sampling is exact for any draft q).

A round, with ``pos`` the position of the current token (chosen by the target, not yet run):

    h_cur = layers[0, l)(current)                                  (shared cache, position pos)
    adapter(pending + h_cur) -> head -> d1, conf1                   (adapter cache)
    h_1 = layers[0, l)(d1); stop if conf1 <= eta or gamma reached; else adapter(h_1) -> d2 ...
    Proposal(tokens d1..dk, hidden = [h_cur, h_1..h_k], layer = l)  -> engine verifies [l, L)

so the shallow layers never run twice for a token, and verification starts at layer l. The last
draft d_k never passes through the adapter in its round; when it is accepted its saved layer-l
state is fed to the adapter at the start of the next round (``pending``), as the authors do,
instead of redoing a shallow pass. ``commit`` crops the adapter cache to the accepted length.

Confidence (the early-exit test) is the top-1 probability of the draft distribution the token was
taken from: softmax of the draft logits at temperature 1 for greedy decoding, at the decoding
temperature when sampling (the token's own q). The draft token is still proposed when it fails.

Checkpoints use the authors' layout (``layers.0.self_attn.{q,k,v,o}_proj.weight``,
``layers.0.input_layernorm.weight``, ``norm.weight`` + a LLaMA-style ``config.json`` with
``num_hidden_layers: 1``), as safetensors or a ``torch.load(weights_only=True)`` file; ours add a
``specharness`` block to the config (model identity, exit layer, draft vocabulary) and the tensor
``draft_vocab.token_ids`` (token ids by descending answer frequency) that the authors' loader
ignores.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specharness.engine import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl
from specharness.options import OptionSpec, resolve_options
from specharness.target import AttentionWeights, TargetModel, rms_norm

ADAPTER_ROOT = Path(__file__).with_name("adapters")
WEIGHT_FILES = ("model.safetensors", "adapter.safetensors", "pytorch_model.bin", "adapter.pt", "model.pt")
VOCAB_KEY = "draft_vocab.token_ids"

OPTIONS = [
    OptionSpec("exit_layer", "int", 2, "early-exit layer l: layers [0, l) draft, [l, L) verify (1..L-1)", min=1),
    OptionSpec("eta", "float", 0.6, "stop drafting after a token whose top-1 draft probability is <= eta",
               min=0.0, max=1.0),
    OptionSpec("gamma", "int", 6, "most draft tokens per round", min=1),
    OptionSpec("adapter", "str", "", "adapter checkpoint directory; empty = the shipped adapter for this "
               "model and exit layer; 'random' or 'random:SEED' = a freshly initialised one"),
    OptionSpec("draft_vocab", "int", -1, "draft head rows: 0 = full LM head, N = the N most frequent tokens "
               "of the adapter's training data, -1 = what the adapter was trained with", min=-1),
]


def model_slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def shipped_adapter_dir(target: TargetModel, exit_layer: int) -> Path:
    return ADAPTER_ROOT / f"{model_slug(target.name)}-l{exit_layer}"


# ---- the adapter module (authors' parameter names) ------------------------------------------------
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
    """RMSNorm -> attention (target layout) -> residual -> RMSNorm; runs through target.attention.

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

    def forward(self, target: TargetModel, x: torch.Tensor, cache, start: int,
                w: AdapterWeights | None = None) -> torch.Tensor:
        """Adapter output (normed, ready for the LM head) for positions [start, start + len(x))."""
        w = w or self.weights()
        L0 = self.layers[0]
        h = x + target.attention(rms_norm(x, L0.input_layernorm.weight, self.eps), w.attn, cache, 0, start,
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


# ---- checkpoints -----------------------------------------------------------------------------------
def adapter_config(target: TargetModel, exit_layer: int, vocab_size_trained: int, extra: dict | None = None) -> dict:
    """A LLaMA-style config the authors' loader accepts, plus our identity block."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": target.hidden_size, "num_attention_heads": target.n_heads,
        "num_key_value_heads": target.n_kv_heads, "head_dim": target.head_dim,
        "rms_norm_eps": target.eps, "vocab_size": target.vocab_size,
        "max_position_embeddings": target.max_context, "hidden_act": "silu",
        "intermediate_size": getattr(target.config, "intermediate_size", 4 * target.hidden_size),
        "torch_dtype": str(target.dtype).replace("torch.", ""),
        "specharness": {"method": "kangaroo", "model": target.name, "model_n_layers": target.n_layers,
                        "exit_layer": exit_layer, "draft_vocab": vocab_size_trained, **(extra or {})},
    }


def save_adapter(adapter: Adapter, out_dir: str | Path, config: dict, vocab_order: torch.Tensor | None) -> None:
    from safetensors.torch import save_file
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in adapter.state_dict().items()}
    if vocab_order is not None:
        state[VOCAB_KEY] = vocab_order.to(torch.int64).contiguous().cpu()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=1))


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(str(path))
    try:  # never arbitrary unpickling
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UsageError(f"adapter weights '{path}' cannot be read safely ({type(exc).__name__}); give "
                         "safetensors or a plain tensor state dict") from None
    if not isinstance(state, dict):
        raise UsageError(f"adapter weights '{path}' are not a state dict")
    return state


def load_adapter(path: str | Path, target: TargetModel, exit_layer: int) -> tuple[Adapter, torch.Tensor | None, dict]:
    """(adapter, token ids by frequency or None, config) from a checkpoint directory or weight file."""
    p = Path(path)
    if p.is_file():
        weights, directory = p, p.parent
    elif p.is_dir():
        directory = p
        found = [p / f for f in WEIGHT_FILES if (p / f).is_file()]
        if not found:
            raise UsageError(f"adapter directory '{path}' holds none of {', '.join(WEIGHT_FILES)}")
        weights = found[0]
    else:
        raise UsageError(f"adapter '{path}' does not exist; give a checkpoint directory, 'random', or "
                         "nothing for the shipped adapter")
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise UsageError(f"adapter '{path}' has no config.json beside its weights")
    cfg = json.loads(cfg_path.read_text())
    n_heads = cfg.get("num_attention_heads")
    n_kv = cfg.get("num_key_value_heads") or n_heads
    hidden = cfg.get("hidden_size")
    head_dim = cfg.get("head_dim") or (hidden // n_heads if hidden and n_heads else None)
    ours = cfg.get("specharness") or {}
    mine = (target.hidden_size, target.n_heads, target.n_kv_heads, target.head_dim)
    if (hidden, n_heads, n_kv, head_dim) != mine:
        raise UsageError(f"adapter '{path}' is for another model (hidden {hidden}, heads {n_heads}/{n_kv}, "
                         f"head_dim {head_dim}); '{target.name}' has hidden {mine[0]}, heads {mine[1]}/{mine[2]}, "
                         f"head_dim {mine[3]}")
    if cfg.get("vocab_size") not in (None, target.vocab_size):
        raise UsageError(f"adapter '{path}' is for a vocabulary of {cfg['vocab_size']} tokens; "
                         f"'{target.name}' has {target.vocab_size}")
    if ours and (ours.get("model") != target.name or ours.get("model_n_layers") != target.n_layers):
        raise UsageError(f"adapter '{path}' was trained for '{ours.get('model')}' "
                         f"({ours.get('model_n_layers')} layers), not '{target.name}' ({target.n_layers} layers)")
    if ours and ours.get("exit_layer") != exit_layer:
        raise UsageError(f"adapter '{path}' was trained at exit_layer {ours.get('exit_layer')}, not {exit_layer}; "
                         f"pass -o exit_layer={ours.get('exit_layer')} or train one for layer {exit_layer}")
    state = _read_state(weights)
    vocab = state.pop(VOCAB_KEY, None)
    ffn_dim = state["layers.0.mlp.gate_proj.weight"].shape[0] if "layers.0.mlp.gate_proj.weight" in state else 0
    head_rows = state["lm_head.weight"].shape[0] if "lm_head.weight" in state else 0
    if head_rows and head_rows != target.vocab_size and (vocab is None or vocab.numel() < head_rows):
        raise UsageError(f"adapter '{path}' has its own LM head over {head_rows} tokens but does not say which "
                         f"({VOCAB_KEY} missing); its head must cover all {target.vocab_size} tokens")
    adapter = Adapter(hidden, n_heads, n_kv, head_dim, float(cfg.get("rms_norm_eps", target.eps)), ffn_dim, head_rows)
    expected = adapter.state_dict()
    missing = [k for k in expected if k not in state]
    if missing:
        raise UsageError(f"adapter '{path}' lacks {', '.join(missing)} (expected the Kangaroo layout "
                         "layers.0.self_attn.{q,k,v,o}_proj.weight, layers.0.input_layernorm.weight, norm.weight)")
    for k, v in expected.items():
        if state[k].shape != v.shape:
            raise UsageError(f"adapter '{path}': {k} has shape {tuple(state[k].shape)}, expected {tuple(v.shape)}")
    adapter.load_state_dict({k: state[k] for k in expected})
    adapter = adapter.to(device=target.device, dtype=target.dtype).eval()
    if vocab is not None:
        vocab = vocab.to(device=target.device, dtype=torch.long)
        if vocab.numel() and (vocab.min() < 0 or vocab.max() >= target.vocab_size):
            raise UsageError(f"adapter '{path}': its draft vocabulary holds ids outside the model's vocabulary")
    return adapter, vocab, cfg


# ---- the drafter ---------------------------------------------------------------------------------
class KangarooDrafter:
    """The Drafter interface (see specharness.engine): built once per method, per-sequence state reset in ``begin``."""

    def __init__(self, target: TargetModel, adapter: Adapter, exit_layer: int, eta: float, gamma: int,
                 rows: torch.Tensor | None = None) -> None:
        self.t = target
        self.adapter = adapter
        self.exit_layer = exit_layer
        self.eta = eta
        self.gamma = gamma
        self.rows = rows  # draft head rows (token ids), None = full head
        self.head_subset = target.head_rows(rows) if rows is not None and not adapter.own_head_rows else None
        self.w = adapter.weights()
        self.cache = None
        self.pending: torch.Tensor | None = None  # layer-l states not yet in the adapter cache
        self.stats = {"rounds": 0, "drafted": 0, "adapter_rows": 0}

    # the adapter's own cache: its length is the first position whose state it has not seen
    @property
    def adapter_len(self) -> int:
        return self.cache.lengths[0]

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        self.cache = self.t.new_cache(state.cache.max_len, n_layers=1)
        self.pending = None
        if prefill_hidden is not None and prefill_hidden.shape[0]:
            self.adapter(self.t, prefill_hidden, self.cache, 0, self.w)  # the prompt's adapter KV

    def _draft_logits(self, x: torch.Tensor, start: int) -> torch.Tensor:
        self.stats["adapter_rows"] += x.shape[0]
        hn = self.adapter(self.t, x, self.cache, start, self.w)
        return self.adapter.logits(self.t, hn[-1:], self.head_subset)[0].float()

    def keep_drafting(self, state: DecodeState, i: int, token: int, confidence: float) -> bool:
        """The first early exit: go on after draft ``i`` only while it was confident (> eta).
        The oracle stop (methods/oracle.py) overrides this with the target's own answer."""
        return confidence > self.eta

    def propose(self, state: DecodeState) -> Proposal:
        t, l, pos = self.t, self.exit_layer, state.pos
        h_cur = t.layers(t.embed(torch.tensor([state.ids[-1]], device=t.device)), pos, 0, l, state.cache)
        budget = min(self.gamma, state.max_draft)
        first = self.adapter_len
        x = h_cur if self.pending is None else torch.cat([self.pending, h_cur])
        self._states = x  # layer-l states of positions first .. pos (+ drafts below)
        self._first = first
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        hs = [h_cur]
        start = first
        sampling = state.temperature > 0
        for i in range(budget):
            logits = self._draft_logits(x, start)
            if sampling:
                q = torch.softmax(logits / state.temperature, -1)
                j = int(torch.multinomial(q, 1, generator=state.generator))
                conf = float(q.max())
                full = torch.zeros(t.vocab_size, device=t.device)
                if self.rows is None:
                    full = q
                else:
                    full[self.rows] = q
                qs.append(full)
            else:
                j = int(logits.argmax())
                conf = float(torch.softmax(logits, -1)[j])
            tok = int(self.rows[j]) if self.rows is not None else j
            tokens.append(tok)
            h = t.layers(t.embed(torch.tensor([tok], device=t.device)), pos + 1 + i, 0, l, state.cache)
            hs.append(h)
            if i + 1 == budget or not self.keep_drafting(state, i, tok, conf):
                break
            x, start = h, pos + 1 + i
        hidden = torch.cat(hs)
        self._states = torch.cat([self._states, hidden[1:]]) if len(hs) > 1 else self._states
        self.pending = None
        self.stats["rounds"] += 1
        self.stats["drafted"] += len(tokens)
        return Proposal(tokens, torch.stack(qs) if sampling and qs else None, hidden, l)

    def commit(self, state: DecodeState, accepted: int) -> None:
        keep = state.pos  # the new current token's position: positions < keep are final
        self.cache.crop(keep)
        have = self.adapter_len
        if have < keep:  # accepted positions the adapter has not seen (the last draft, or no drafts)
            self.pending = self._states[have - self._first:keep - self._first]
        else:
            self.pending = None


# ---- building from options ---------------------------------------------------------------------------
def _resolve_adapter(target: TargetModel, opts: dict) -> tuple[Adapter, torch.Tensor | None, dict]:
    l = opts["exit_layer"]
    ref = (opts["adapter"] or "").strip()
    if ref.startswith("random"):
        seed = 0
        if ref != "random":
            try:
                seed = int(ref.split(":", 1)[1])
            except (IndexError, ValueError):
                raise UsageError(f"option kangaroo.adapter='{ref}': write 'random' or 'random:SEED'") from None
        return Adapter.for_target(target, seed=seed).eval(), None, {"source": f"random (seed {seed})"}
    path = Path(ref) if ref else shipped_adapter_dir(target, l)
    if not ref and not path.is_dir():
        raise UsageError(f"no shipped Kangaroo adapter for '{target.name}' at exit_layer {l}; train one with "
                         f"'python -m specharness train kangaroo -o exit_layer={l} --out DIR' and pass "
                         "-o adapter=DIR (or -o adapter=random for an untrained one)")
    key = ("kangaroo-adapter", str(path.resolve()), path.stat().st_mtime_ns if path.exists() else None, l)
    if key not in target.memo:  # loaded once per target: build, params and info all ask for it
        target.memo[key] = load_adapter(path, target, l)
    return target.memo[key]


def _draft_rows(target: TargetModel, opts: dict, vocab: torch.Tensor | None, cfg: dict,
                own_head_rows: int = 0) -> torch.Tensor | None:
    n = opts["draft_vocab"]
    if own_head_rows:  # the adapter's own head fixes the draft vocabulary
        if n not in (-1, own_head_rows) and not (n == 0 and own_head_rows == target.vocab_size):
            raise UsageError(f"option kangaroo.draft_vocab={n}: this adapter has its own LM head over "
                             f"{own_head_rows} tokens; leave draft_vocab at -1")
        return None if own_head_rows == target.vocab_size else vocab[:own_head_rows].contiguous()
    if n == -1:
        n = int((cfg.get("specharness") or {}).get("draft_vocab") or 0) if vocab is not None else 0
    if n == 0 or n >= target.vocab_size:
        return None
    if vocab is None:
        raise UsageError(f"option kangaroo.draft_vocab={n} needs an adapter that stores its token frequencies "
                         "(ours do; this one does not); use draft_vocab=0")
    if n > vocab.numel():
        raise UsageError(f"option kangaroo.draft_vocab={n} exceeds the {vocab.numel()} tokens this adapter "
                         "ranked; use a smaller value or 0 (full head)")
    return vocab[:n].contiguous()


def build(target: TargetModel, options: dict, drafter_class: type = None) -> KangarooDrafter:
    """A drafter for these options; ``drafter_class`` lets a variant (the oracle stop) reuse it all."""
    opts = resolve_options("kangaroo", OPTIONS, options)
    l = opts["exit_layer"]
    if not 1 <= l < target.n_layers:
        raise UsageError(f"option kangaroo.exit_layer={l} is outside [1, {target.n_layers - 1}] for "
                         f"'{target.name}' ({target.n_layers} layers)")
    adapter, vocab, cfg = _resolve_adapter(target, opts)
    rows = _draft_rows(target, opts, vocab, cfg, adapter.own_head_rows)
    return (drafter_class or KangarooDrafter)(target, adapter, l, opts["eta"], opts["gamma"], rows)


def extra_params(target: TargetModel, options: dict) -> int:
    opts = resolve_options("kangaroo", OPTIONS, options)
    adapter, _, _ = _resolve_adapter(target, opts)
    return adapter.n_parameters


def adapter_info(target: TargetModel, options: dict) -> dict:
    """The adapter's layout for Table 2: feed-forward block or not, shared or own LM head."""
    adapter, _, _ = _resolve_adapter(target, resolve_options("kangaroo", OPTIONS, options))
    return {"ffn": adapter.ffn, "lm_head": f"own ({adapter.own_head_rows} rows)" if adapter.own_head_rows else "shared"}


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("kangaroo", build, OPTIONS, params=extra_params, info=adapter_info,
                        tiny_options={"adapter": "random"},
                        help="double early exiting: shallow layers + trained adapter draft, deep layers verify")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    from methods import kangaroo_train
    return [kangaroo_train.SPEC]
