"""Kangaroo adapter checkpoints in the authors' layout, and the adapters this project ships.

Layout: ``layers.0.self_attn.{q,k,v,o}_proj.weight``, ``layers.0.input_layernorm.weight``,
``norm.weight`` + a LLaMA-style ``config.json`` with ``num_hidden_layers: 1``, as safetensors or a
``torch.load(weights_only=True)`` file. Ours add a ``specharness`` block to the config (model
identity, exit layer, draft vocabulary) and the tensor ``draft_vocab.token_ids`` (token ids by
descending answer frequency) that the authors' loader ignores; the Table 2 ablation variants add
``layers.0.mlp.*`` / ``lm_head.weight`` and are recognised by those keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from specharness.checkpoint import read_state_dict
from specharness.errors import UsageError
from specharness.paths import model_slug
from specharness.model import TargetModel

from .adapter import Adapter

ADAPTER_ROOT = Path(__file__).with_name("adapters")
WEIGHT_FILES = ("model.safetensors", "adapter.safetensors", "pytorch_model.bin", "adapter.pt", "model.pt")
VOCAB_KEY = "draft_vocab.token_ids"


def shipped_adapter_dir(target: TargetModel, exit_layer: int) -> Path:
    return ADAPTER_ROOT / f"{model_slug(target.name)}-l{exit_layer}"


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
    state = read_state_dict(weights, "adapter weights")
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
