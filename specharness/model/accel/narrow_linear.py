"""A bfloat16 linear layer over a few rows: a C++ kernel of our own (``csrc/narrow_linear.cpp``).

Why: on a 2-core EPYC with AVX512-BF16 and no AMX a verification forward over 8 positions cost
~1.65x one over 2, though both stream the same weights: oneDNN's small-M GEMMs and inductor's C++
template (float32 FMAs after widening) are not flat in the rows. The kernel keeps each weight in
a packed layout, [N/32, K/2, 32, 2] (``pack``), so one 64-byte load feeds 32 output columns of
every row by ``vdpbf16ps``; up to 8 rows then cost what one does (the weights' stream).

The weights are packed inside the graph (``pack`` is a view and a copy of a frozen parameter), so
inductor's freezing folds them into constants of the graph: no copy per call, and eager runs never
call the kernel (``layers.Gemm``: only in a compiled graph of a static width it was chosen for).
It is built into the same library as ``narrow_attention`` and registered as
``torch.ops.specharness.narrow_linear`` with a fake kernel, so exported graphs call it as one
extern op. A CPU without bfloat16 dot products (AVX2) builds ``csrc/narrow_linear_avx2.cpp`` instead
(``narrow_attention.LIBRARIES``): the same op, layout and rounding on float32 FMAs, each packed
32-bit word widened to its k pair's two floats by a shift and a mask, where oneDNN emulates bfloat16
GEMMs and a forward over 8 positions cost 3.4x one.
"""

from __future__ import annotations

import functools

import torch

from . import narrow_attention

COLS = 32  # output columns per packed tile


def fits(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether the kernel takes ``x`` [T, K] @ ``w`` [N, K].T: bfloat16 both, N a multiple of 32, K even."""
    return (x.dtype == w.dtype == torch.bfloat16 and w.dim() == 2 and w.shape[0] % COLS == 0
            and w.shape[1] % 2 == 0 and x.device.type == "cpu")


def pack(w: torch.Tensor) -> torch.Tensor:
    """[N, K] -> [N/32, K/2, 32, 2]: per tile of 32 output columns, each k pair's 32 x 2 values
    contiguous (one 64-byte load per 16 columns)."""
    N, K = w.shape
    return w.view(N // COLS, COLS, K // 2, 2).permute(0, 2, 1, 3).contiguous()


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, w, b)`` for bfloat16 ``x`` [T, K] by the kernel (``fits`` must hold); float32
    sums (from the bias, in float32), rounded to bfloat16 once. The packing and the bias's widening
    act on frozen parameters, so freezing folds both: no call converts a weight."""
    return torch.ops.specharness.narrow_linear(x.contiguous(), pack(w), None if b is None else b.float())


def fake(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The op's output shape for tracing: [rows, N]."""
    return x.new_empty((x.shape[0], w.shape[0] * w.shape[2]))


def called_by(graph: torch.fx.Graph) -> bool:
    """Whether an exported graph calls the op: a process that builds its package must register the
    fake kernel first (``available``)."""
    return any(n.op == "call_function" and str(n.target).startswith("specharness.narrow_linear") for n in graph.nodes)


def available(device: torch.device) -> bool:
    """Whether the engine's C++ library is loaded here (building it on the first ask); the op's fake
    kernel is registered then, before any graph that calls it is traced."""
    if device.type != "cpu" or not narrow_attention.loaded():
        return False
    _register_fake()
    return True


@functools.cache
def _register_fake() -> None:
    """The op's fake kernel, once per process."""
    torch.library.register_fake("specharness::narrow_linear")(fake)
