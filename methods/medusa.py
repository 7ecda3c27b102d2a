"""Medusa-1: K parallel heads on the target's last hidden state, single-sequence verification.

Head k (k = 1..K) reads the normed final hidden state h_t that chose the current token x_{t+1}
(``state.last_hidden``) and predicts x_{t+1+k}: the token k+1 positions after h_t's own. Each
head is residual block(s) ``x + SiLU(W x + b)`` (W zero-initialised, so an untrained block is the
identity) followed by its own LM head, initialised from the target's: the Medusa-1 architecture of
github.com/FasterDecoding/Medusa, restated here. As in the Kangaroo paper's comparison there is
no tree: the K top-1 tokens (greedy) or K tokens each sampled from its head's own distribution
(sampling, handed over as q) form one draft sequence, verified by the engine in one full target
forward and accepted by ``specharness.verify``; the drafter keeps no state between rounds.

Heads come from ``-o heads_path=...``:
  * a directory (or file) in the official Medusa-1 layout: ``medusa_lm_head.pt`` (a state dict of
    an ``nn.ModuleList`` of ``nn.Sequential(ResBlock * layers, Linear(hidden, vocab))``, keys
    ``{head}.{block}.linear.weight|bias`` and ``{head}.{layers}.weight``) beside a ``config.json``
    with ``medusa_num_heads`` and ``medusa_num_layers``; ``medusa_lm_head.safetensors`` is read
    too. A legacy checkpoint without the ``{head}.{layers}.weight`` keys uses the target's own LM
    head. Loaded with ``torch.load(weights_only=True)``: no pickled code runs.
  * ``random``: seeded untrained heads (random residual blocks, the target's shared LM head), for
    losslessness tests: the output must not depend on the heads.
  * empty (default): the heads ``python -m specharness train medusa`` cached for this target
    under ``specharness.target.cache_root()/medusa/<model>``; if there are none, the run stops
    with a one-line message that says how to train them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from specharness.engine import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.hookspecs import DrafterSpec, OptionSpec, TrainerSpec, hookimpl
from specharness.target import cache_root

CHECKPOINT_NAMES = ("medusa_lm_head.pt", "medusa_lm_head.safetensors")
RANDOM_SEED = 1234

OPTIONS = [
    OptionSpec("heads", "int", 4, "Medusa heads used (head k drafts the k-th token after the current one)", min=1),
    OptionSpec("heads_path", "str", "",
               "official Medusa-1 checkpoint (dir with medusa_lm_head.pt + config.json), 'random' for "
               "untrained seeded heads, or empty for the heads 'train medusa' cached for this model"),
]


class ResBlock(nn.Module):
    """x + SiLU(W x + b); W starts at zero so the block starts as the identity."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """K heads; ``own_head`` gives each its own LM head (trained heads), else the target's is used.

    The module's ``state_dict`` is the official layout (``{i}.{j}.linear.*``, ``{i}.{layers}.weight``).
    """

    def __init__(self, hidden: int, vocab: int, n_heads: int, n_layers: int = 1,
                 own_head: bool = True, init_head: torch.Tensor | None = None) -> None:
        super().__init__()
        self.hidden, self.vocab, self.n_layers, self.own_head = hidden, vocab, n_layers, own_head
        heads = []
        for _ in range(n_heads):
            mods: list[nn.Module] = [ResBlock(hidden) for _ in range(n_layers)]
            if own_head:
                lm = nn.Linear(hidden, vocab, bias=False)
                if init_head is not None:
                    with torch.no_grad():
                        lm.weight.copy_(init_head)
                mods.append(lm)
            heads.append(nn.Sequential(*mods))
        self.heads = nn.ModuleList(heads)

    @property
    def n_heads(self) -> int:
        return len(self.heads)

    def state_dict_official(self) -> dict[str, torch.Tensor]:
        return {k.removeprefix("heads."): v for k, v in self.state_dict().items()}

    def load_official(self, sd: dict[str, torch.Tensor]) -> None:
        self.heads.load_state_dict(sd)

    def features(self, h: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """Residual-block outputs of the first ``n`` heads: [n, *h.shape]."""
        out = []
        for head in list(self.heads)[:n]:
            x = h
            for block in list(head)[:self.n_layers]:
                x = block(x)
            out.append(x)
        return torch.stack(out)

    def logits(self, h: torch.Tensor, target, n: int | None = None) -> torch.Tensor:
        """[n, *h.shape[:-1], V]: head k's logits for the token k+1 positions after h's own."""
        x = self.features(h, n)
        if not self.own_head:
            return target.head(x)
        return torch.stack([head[-1](x[i]) for i, head in enumerate(list(self.heads)[:x.shape[0]])])

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ---- checkpoints ---------------------------------------------------------------------------------
def default_heads_dir(target) -> Path:
    """Where ``train medusa`` caches heads for this target (never committed)."""
    return cache_root() / "medusa" / target.name


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


def read_checkpoint(file: Path) -> dict[str, torch.Tensor]:
    """The raw state dict, loaded without running pickled code."""
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file
            return load_file(str(file))
        sd = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt or foreign file: say which, in one line
        raise UsageError(f"cannot read Medusa heads '{file}': {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise UsageError(f"'{file}' is not a Medusa state dict (expected a mapping of names to tensors)")
    return sd


def load_heads(path: str | Path, target, n_heads: int | None = None) -> MedusaHeads:
    """Heads from an official Medusa-1 checkpoint (or ours, the same layout), checked against the target."""
    file = _find_checkpoint(Path(path))
    sd = read_checkpoint(file)
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
    tmp = directory / "medusa_lm_head.pt.partial"
    torch.save({k: v.detach().cpu().contiguous() for k, v in heads.state_dict_official().items()}, tmp)
    os.replace(tmp, directory / "medusa_lm_head.pt")
    cfg = {"medusa_num_heads": heads.n_heads, "medusa_num_layers": heads.n_layers,
           "base_model_name_or_path": target.source or target.name, "hidden_size": heads.hidden,
           "vocab_size": heads.vocab, **(extra or {})}
    (directory / "config.json").write_text(json.dumps(cfg, indent=1, default=str))
    return directory / "medusa_lm_head.pt"


def random_heads(target, n_heads: int, n_layers: int = 1, seed: int = RANDOM_SEED) -> MedusaHeads:
    """Seeded untrained heads: random residual blocks on the target's shared head (no copy)."""
    heads = MedusaHeads(target.hidden_size, target.vocab_size, n_heads, n_layers, own_head=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 / p.shape[-1] ** 0.5)
    return heads.to(dtype=target.dtype, device=target.device).eval().requires_grad_(False)


def resolve_heads(target, options: dict) -> MedusaHeads:
    n, raw = options["heads"], (options.get("heads_path") or "").strip()
    if n < 1:
        raise UsageError(f"option medusa.heads={n} must be at least 1")
    if raw == "random":
        key: tuple = ("medusa-heads", "random", n)
    else:
        path = Path(raw).expanduser() if raw else default_heads_dir(target)
        if not raw and not any((path / c).is_file() for c in CHECKPOINT_NAMES):
            raise UsageError(f"no Medusa heads for '{target.name}' (looked in {path}); train them with "
                             "'python -m specharness train medusa', or pass -o heads_path=DIR (official "
                             "Medusa-1 layout) or -o heads_path=random (untrained)")
        file = _find_checkpoint(path)
        key = ("medusa-heads", str(file.resolve()), file.stat().st_mtime_ns, n)
    if key not in target.memo:  # loaded once per target: build and params both ask for them
        target.memo[key] = random_heads(target, n) if raw == "random" else load_heads(path, target, n)
    return target.memo[key]


# ---- the drafter -----------------------------------------------------------------------------------
class MedusaDrafter:
    exit_layer = 0  # drafts are verified by a full target forward from the embeddings

    def __init__(self, target, heads: MedusaHeads) -> None:
        self.target, self.heads = target, heads

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        pass

    def propose(self, state: DecodeState) -> Proposal:
        k = min(self.heads.n_heads, state.max_draft)
        if k <= 0:
            return Proposal()
        logits = self.heads.logits(state.last_hidden, self.target, k)  # [k, V]
        if state.temperature > 0:
            q = torch.softmax(logits.float() / state.temperature, dim=-1)
            tokens = torch.multinomial(q, 1, generator=state.generator)[:, 0].tolist()
        else:
            q, tokens = None, logits.argmax(dim=-1).tolist()
        eos = self.target.eos_ids
        for i, tok in enumerate(tokens):
            if tok in eos:  # nothing after an end of sequence can be kept
                tokens = tokens[:i + 1]
                q = q[:i + 1] if q is not None else None
                break
        return Proposal(tokens, q)

    def commit(self, state: DecodeState, accepted: int) -> None:
        pass


def build(target, options: dict) -> MedusaDrafter:
    return MedusaDrafter(target, resolve_heads(target, options))


def extra_params(target, options: dict) -> int:
    return resolve_heads(target, options).n_parameters


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("medusa", build, OPTIONS, params=extra_params, tiny_options={"heads_path": "random"},
                        help="Medusa-1: K heads on the last hidden state draft K tokens at once, "
                             "single-sequence verification (no tree)")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    from methods import medusa_train
    return [TrainerSpec("medusa", medusa_train.run, medusa_train.OPTIONS,
                        help="Medusa-1 heads by self-distillation on the shared data (target frozen, AdamW)")]
