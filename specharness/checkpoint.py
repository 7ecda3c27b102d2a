"""Reading and writing trained drafter weights safely: the one loader every method uses.

Checkpoints come from strangers (the authors' releases, a colleague's directory), so a file is read
as safetensors or with ``torch.load(weights_only=True)``: no pickled code runs. Writes go to a
temporary name and are moved into place, so an interrupted save never leaves half a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .errors import UsageError


def read_state_dict(path: str | Path, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """A mapping of names to tensors from ``path``; any other content is a one-line error."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            state = load_file(str(path))
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt or foreign file: say which, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UsageError(f"cannot read {what} '{path}' safely ({type(exc).__name__}: {first[:120]}); give "
                         "safetensors or a plain tensor state dict") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{what} '{path}' is not a state dict (expected a mapping of names to tensors)")
    return state


def save_atomic(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary name, then an atomic rename."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    torch.save(obj, tmp)
    os.replace(tmp, path)
