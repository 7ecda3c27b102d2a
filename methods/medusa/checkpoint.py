"""Medusa-1 checkpoints in the official layout: ``medusa_lm_head.pt`` (or ``.safetensors``) beside a
``config.json`` with ``medusa_num_heads`` and ``medusa_num_layers``; a legacy checkpoint without the
``{head}.{layers}.weight`` keys uses the target's own LM head. Heads trained here are cached under
``cache_root()/medusa/<model>`` and never committed; the residual heads on the target's shared LM
head that this project ships (a few MB) live in ``methods/medusa/heads/<model>/``.
"""

from __future__ import annotations

import json
from pathlib import Path


from specharness.checkpoint import read_state_dict, save_atomic
from specharness.errors import UsageError
from specharness.paths import cache_root, model_slug

from .heads import MedusaHeads

CHECKPOINT_NAMES = ("medusa_lm_head.pt", "medusa_lm_head.safetensors")
HEADS_ROOT = Path(__file__).with_name("heads")


def shipped_heads_dir(target) -> Path:
    """The shipped residual heads on the shared LM head for this target (``lm_head=shared``)."""
    return HEADS_ROOT / model_slug(target.name)


def has_checkpoint(directory: Path) -> bool:
    return any((directory / c).is_file() for c in CHECKPOINT_NAMES)


def heads_dir_for(target, lm_head: str) -> Path:
    """What an empty ``heads_path`` means: the shipped heads for ``lm_head=shared`` where this model
    has them (as EAGLE's head and Kangaroo's adapter), else the heads ``train medusa`` cached."""
    shipped = shipped_heads_dir(target)
    if lm_head == "shared" and has_checkpoint(shipped):
        return shipped
    return default_heads_dir(target, lm_head)


def default_heads_dir(target, lm_head: str = "own") -> Path:
    """Where ``train medusa`` caches heads for this target (never committed); heads feeding the
    target's shared LM head live beside the Medusa-1 ones."""
    return cache_root() / "medusa" / (target.name + ("" if lm_head == "own" else "-shared"))


def _find_checkpoint(path: Path) -> Path:
    if path.is_file():
        return path
    if path.is_dir():
        for name in CHECKPOINT_NAMES:
            if (path / name).is_file():
                return path / name
        raise UsageError(f"Medusa heads directory '{path}' holds no {' or '.join(CHECKPOINT_NAMES)}")
    raise UsageError(f"Medusa heads path '{path}' does not exist; give a directory with medusa_lm_head.pt "
                     "and config.json (official Medusa-1 layout), 'random', or train heads with "
                     "'python -m specharness train medusa'")


def load_heads(path: str | Path, target, n_heads: int | None = None) -> MedusaHeads:
    """Heads from an official Medusa-1 checkpoint (or ours, the same layout), checked against the target."""
    file = _find_checkpoint(Path(path))
    sd = read_state_dict(file, "Medusa heads")
    cfg_file = file.parent / "config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    sd = {k.removeprefix("medusa_head."): v for k, v in sd.items()}
    try:
        found = sorted({int(k.split(".")[0]) for k in sd})
        layers = len({k.split(".")[1] for k in sd if k.startswith("0.") and k.endswith(".linear.weight")})
    except (ValueError, IndexError):
        raise UsageError(f"'{file}' is not in the Medusa-1 layout (keys like '0.0.linear.weight')") from None
    n_found = len(found)
    if found != list(range(n_found)) or n_found == 0:
        raise UsageError(f"'{file}' is not in the Medusa-1 layout (head indices {found[:8]})")
    if cfg.get("medusa_num_heads", n_found) < n_found:  # config may declare fewer heads than stored
        n_found = cfg["medusa_num_heads"]
    if cfg.get("medusa_num_layers", layers) != layers:
        raise UsageError(f"'{cfg_file}' says medusa_num_layers={cfg['medusa_num_layers']} but "
                         f"'{file.name}' holds {layers} residual block(s) per head")
    own = f"0.{layers}.weight" in sd
    w = sd.get("0.0.linear.weight")
    hidden = w.shape[1] if w is not None else sd[f"0.{layers}.weight"].shape[1]
    if hidden != target.hidden_size:
        raise UsageError(f"Medusa heads '{file}' are for hidden size {hidden}, the target "
                         f"'{target.name}' has {target.hidden_size}: they belong to another model")
    if own and sd[f"0.{layers}.weight"].shape[0] != target.vocab_size:
        raise UsageError(f"Medusa heads '{file}' have a vocabulary of {sd[f'0.{layers}.weight'].shape[0]}, "
                         f"the target '{target.name}' has {target.vocab_size}: they belong to another model")
    n = n_heads or n_found
    if n > n_found:
        raise UsageError(f"option medusa.heads={n} but '{file}' holds only {n_found} head(s); "
                         f"use -o heads={n_found} or fewer")
    heads = MedusaHeads(hidden, target.vocab_size, n, layers, own_head=own)
    keep = {k: v for k, v in sd.items() if int(k.split(".")[0]) < n}
    try:
        heads.load_official(keep)
    except RuntimeError as exc:
        raise UsageError(f"Medusa heads '{file}' do not fit the layout: {str(exc).splitlines()[0]}") from None
    return heads.to(dtype=target.dtype, device=target.device).eval().requires_grad_(False)


def save_heads(heads: MedusaHeads, directory: Path, target, extra: dict | None = None) -> Path:
    """Write the official layout (medusa_lm_head.pt + config.json), atomically per file."""
    directory.mkdir(parents=True, exist_ok=True)
    save_atomic({k: v.detach().cpu().contiguous() for k, v in heads.state_dict_official().items()},
                directory / "medusa_lm_head.pt")
    cfg = {"medusa_num_heads": heads.n_heads, "medusa_num_layers": heads.n_layers,
           "base_model_name_or_path": target.source or target.name, "hidden_size": heads.hidden,
           "vocab_size": heads.vocab, **(extra or {})}
    (directory / "config.json").write_text(json.dumps(cfg, indent=1, default=str))
    return directory / "medusa_lm_head.pt"
