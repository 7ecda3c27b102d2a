"""EAGLE head checkpoints: ``model.safetensors`` (the head's parameters and, under
``draft_vocab.token_ids``, token ids by descending frequency in its training answers) beside a
``config.json`` (the head's shape, the model it was trained for, its draft vocabulary, training
summary). Heads this project ships live in ``methods/eagle/heads/<model>/``; ``train eagle`` writes
to the cache unless told otherwise. EAGLE-3's heads (``methods/eagle3``) are stored the same way: a
``HeadKind`` names the head class, the method and where its shipped heads live."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from specharness.draft_vocab import select as select_draft_rows
from specharness.checkpoint import read_state_dict
from specharness.errors import UsageError
from specharness.paths import model_slug
from specharness.model import TargetModel

from .head import EagleHead

HEAD_ROOT = Path(__file__).with_name("heads")
VOCAB_KEY = "draft_vocab.token_ids"
# draft_vocab=-1: the head's trained rows, at most this many (its most frequent): on a 2-core EPYC, depth 3,
# 4096 of the shipped head's 8192 rows ran 1.144x against 1.118x, CR 1.63 against 1.65
# (results/smollm2-cpu-epyc-defaults, stage 2; 1.115x against 1.050x at depth 5 in stage 1)
DEFAULT_DRAFT_VOCAB = 4096
UNTRAINED = "untrained"


@dataclass(frozen=True)
class HeadKind:
    """Which head a checkpoint holds: its class (``METHOD`` names the method and trainer), how
    messages name it, and where the heads this project ships live."""

    cls: type
    label: str
    root: Path

    @property
    def method(self) -> str:
        return self.cls.METHOD


EAGLE = HeadKind(EagleHead, "EAGLE", HEAD_ROOT)


def shipped_head_dir(target: TargetModel, kind: HeadKind = EAGLE) -> Path:
    return kind.root / model_slug(target.name)


def resolve_head_path(target: TargetModel, ref: str, kind: HeadKind = EAGLE) -> Path | str:
    ref = (ref or "").strip()
    if ref == UNTRAINED:
        return UNTRAINED
    path = Path(ref).expanduser() if ref else shipped_head_dir(target, kind)
    if not path.is_dir():
        if not ref:
            raise UsageError(f"no shipped {kind.label} head for '{target.name}'; train one with 'python -m specharness "
                             f"train {kind.method}' and pass -o head=DIR (or -o head=untrained)")
        raise UsageError(f"{kind.label} head '{ref}' is not a directory with model.safetensors and config.json")
    return path


def save_head(head: EagleHead, out: Path, target: TargetModel, vocab_order: torch.Tensor | None,
              draft_vocab: int, extra: dict | None = None) -> None:
    from safetensors.torch import save_file
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    if vocab_order is not None:
        state[VOCAB_KEY] = vocab_order.to(torch.int64).contiguous().cpu()
    tmp = out / "model.safetensors.partial"
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    cfg = {"method": head.METHOD, "model": target.name, "model_n_layers": target.n_layers, **head.shape,
           "draft_vocab": draft_vocab, **(extra or {})}
    (out / "config.json").write_text(json.dumps(cfg, indent=1, default=str))


def load_head(path: Path | str, target: TargetModel, draft_vocab: int = -1,
              kind: HeadKind = EAGLE) -> tuple[EagleHead, torch.Tensor | None]:
    """(head, draft-vocabulary token ids or None) for ``target``; memoised on the target."""
    key = (f"{kind.method}-head", str(path), Path(path).stat().st_mtime_ns if path != UNTRAINED else 0, draft_vocab)
    if key in target.memo:
        return target.memo[key]
    if path == UNTRAINED:
        head, order, trained_vocab = kind.cls.for_target(target).eval(), None, 0
    else:
        cfg_file, weights = Path(path) / "config.json", Path(path) / "model.safetensors"
        if not cfg_file.is_file() or not weights.is_file():
            raise UsageError(f"{kind.label} head '{path}' lacks config.json or model.safetensors")
        cfg = json.loads(cfg_file.read_text())
        if cfg.get("model") != target.name or cfg.get("hidden") != target.hidden_size:
            raise UsageError(f"{kind.label} head '{path}' was trained for '{cfg.get('model')}', not '{target.name}'")
        if cfg.get("method", "eagle") != kind.method:
            raise UsageError(f"'{path}' holds a {cfg.get('method')} head, not a {kind.method} one; pass it to "
                             f"-m {cfg.get('method')}")
        state = read_state_dict(weights, f"{kind.label} head")
        order = state.pop(VOCAB_KEY, None)
        try:
            head = kind.cls.from_config(cfg)
            head.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise UsageError(f"{kind.label} head '{path}' does not fit its config: {str(exc).splitlines()[0]}") from None
        head = head.to(device=target.device, dtype=target.dtype).eval()
        trained_vocab = int(cfg.get("draft_vocab") or 0)
    head.requires_grad_(False)
    default = min(trained_vocab, DEFAULT_DRAFT_VOCAB) if trained_vocab else 0
    rows = select_draft_rows(order, draft_vocab, default, target.vocab_size, kind.method,
                             "this head stores no token frequencies; use 0")
    rows = rows.to(target.device) if rows is not None else None
    target.memo[key] = (head, rows)
    return head, rows
