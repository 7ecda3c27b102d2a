"""The K/V cache every forward of a run shares: preallocated, addressed by slot, cut back by length."""

from __future__ import annotations

import torch


class KVCache:
    """Preallocated keys and values, addressed by slot: one tensor each for all layers
    (``keys``/``values`` [layers, kv heads, slots, head dim]), with per-layer views ``k[i]``/``v[i]``.

    One tensor, not one per layer, because a compiled graph takes every input's dynamic length as
    an argument of its own: 60 per-layer buffers cost the 30-layer target 61 symbolic sizes, each
    converted to a tensor by inductor's wrapper, about 0.35 ms per forward call (a quarter of a
    Kangaroo draft step). Every forward writes the whole tensor with the layer as an index
    (``layers.write_slots``): a write through a per-layer view would make inductor copy the whole cache.

    Cutting back is moving a length, not copying. Each layer keeps its own valid length, because a
    self-drafter writes the shallow layers ahead of the deep ones; a write must start at or before
    the layer's valid length (no gaps). A tree's accepted path is moved into consecutive slots by
    ``compact``.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        self.keys = torch.zeros(n_layers, n_kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.k, self.v = [self.keys[i] for i in range(n_layers)], [self.values[i] for i in range(n_layers)]
        self.lengths = [0] * n_layers
        self.max_len = max_len

    def claim(self, a: int, b: int, start: int, n: int, width: int | None = None) -> None:
        """Layers [a, b) are about to be written at slots start .. start + width - 1, of which the
        first n hold real positions (the rest are padding, overwritten before anyone sees them)."""
        if start + (width or n) > self.max_len:
            raise RuntimeError(f"KV cache overflow: position {start + (width or n)} > capacity {self.max_len}")
        for layer in range(a, b):
            if start > self.lengths[layer]:
                raise RuntimeError(f"KV cache gap at layer {layer}: write at {start}, valid {self.lengths[layer]}")
            self.lengths[layer] = start + n

    def crop(self, n: int) -> None:
        """Forget every position >= n in every layer (rejected drafts)."""
        self.lengths = [min(length, n) for length in self.lengths]

    def compact(self, start: int, nodes: list[int]) -> None:
        """Move the entries of slots ``start + nodes[i]`` to ``start + i`` in every layer (the
        accepted path of a tree; nodes ascend, so no entry is overwritten before it is moved)."""
        if all(n == i for i, n in enumerate(nodes)):
            return
        src = torch.tensor(nodes, device=self.keys.device) + start
        dst = torch.arange(start, start + len(nodes), device=src.device)
        for buf in (self.keys, self.values):  # every layer in one copy
            buf.index_copy_(2, dst, buf.index_select(2, src))
