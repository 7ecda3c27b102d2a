"""Each row's k largest logits by a C++ kernel of our own (``csrc/row_topk.cpp``), where the engine's
library is loaded; ``torch`` elsewhere.

Why: a round's bookkeeping reads the verified logits, [nodes, vocabulary], and torch's CPU
kernels for it are dear next to what they do: on a 2-core EPYC ``topk`` over 8 x 49,152 bfloat16
logits took ~0.3 ms (Token Recycling's matrix, every round), and ``max`` 51 us for one row
(greedy verification, every round of every method). The kernel compares 8 values per instruction
against the running k-th largest and inserts the rare larger one, one pass over the row.

It asks only whether the library is already loaded (a compiled bfloat16 target loads it for its
linear kernel, on AVX512-BF16 and on AVX2 CPUs) and never builds it, so an eager target, another
CPU or CUDA keeps torch's kernels. The kernel's order is torch's where values differ; among equal values
it takes the lowest index first, as ``argmax`` does (``topk`` leaves ties unordered).
"""

from __future__ import annotations

import torch

from . import narrow_attention


_ops: dict[str, object] = {}  # the library's op overloads, looked up once (each lookup is Python)


def _op(name: str):
    op = _ops.get(name)
    if op is None:
        op = _ops[name] = getattr(torch.ops.specharness, name).default
    return op


def usable(x: torch.Tensor) -> bool:
    """Whether the kernel takes ``x``'s rows: contiguous bfloat16 or float32 on the CPU, needing no
    gradient (the op has no autograd kernel), the library loaded, not inside a graph being traced (nor
    a fake kernel). Attribute checks only: right after a target forward each torch call costs tens of
    microseconds."""
    return (x.is_cpu and x.dtype in (torch.bfloat16, torch.float32) and x.is_contiguous() and not x.requires_grad
            and narrow_attention.is_loaded() and not torch.compiler.is_compiling())


def topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """[R, V] -> [R, k] int64: each row's indices of its ``k`` largest values, largest first."""
    if x.dim() == 2 and usable(x):
        return _op("row_topk")(x, k)
    return x.topk(k, dim=-1).indices


def argmax(x: torch.Tensor) -> torch.Tensor:
    """[V] -> [], [R, V] -> [R]: the first largest value's index along the last dimension, in one op
    call (``layers.argmax`` asks ``usable`` first)."""
    return _op("row_argmax")(x)
