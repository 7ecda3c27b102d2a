"""Our row top-k kernel (``model.accel.row_topk``): each row's k largest values as ``torch.topk``
finds them, equal values lowest index first (so k=1 is ``argmax``), at any row length; and torch's
kernel wherever the library is not loaded."""

from __future__ import annotations

import pytest
import torch

from specharness.model.accel import narrow_attention, row_topk
from specharness.model.layers import argmax

needs_kernel = pytest.mark.skipif(narrow_attention.library() is None, reason="neither AVX512-BF16 nor AVX2 on this CPU")


@pytest.fixture(scope="module")
def kernel() -> None:
    if not narrow_attention.loaded():
        pytest.fail(f"the engine's C++ library did not load: {narrow_attention._state.get('why')}")


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("V", [8, 15, 16, 17, 1000, 49152])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_the_kernel_finds_each_rows_k_largest_as_torch_does(kernel, dtype, V, k):
    torch.manual_seed(V + k)
    x = (torch.randn(9, V) * 4).to(dtype)
    x[3] = torch.arange(V, dtype=dtype)  # ascending: every value displaces the floor
    x[4] = -torch.arange(V, dtype=dtype)  # descending: the first k, then nothing
    got = row_topk.topk_indices(x, k)
    assert got.dtype == torch.int64 and got.shape == (9, k)
    want = x.topk(k, dim=-1)
    assert torch.equal(x.gather(1, got), want.values)  # the same values, largest first
    for r in range(9):
        if len(set(x[r].tolist())) == V:  # distinct values: the same indices
            assert got[r].tolist() == want.indices[r].tolist()


@needs_kernel
def test_equal_values_come_lowest_index_first_so_k1_is_argmax(kernel):
    torch.manual_seed(0)
    x = torch.randint(0, 4, (64, 1000)).to(torch.bfloat16)  # every row full of ties
    x[0] = float("-inf")  # all equal, none finite
    x[1, 500:] = float("-inf")
    got = row_topk.topk_indices(x, 8)
    for r in range(64):
        row = x[r].float().tolist()
        want = sorted(range(1000), key=lambda i: (-row[i], i))[:8]  # a stable descending sort's first 8
        assert got[r].tolist() == want, r
    assert torch.equal(row_topk.topk_indices(x, 1).squeeze(1), x.float().argmax(-1))
    assert torch.equal(argmax(x), x.float().argmax(-1)) and torch.equal(argmax(x[5]), x[5].float().argmax())
    assert argmax(x[5]).shape == () and argmax(x).shape == (64,)
    assert row_topk.usable(x[5]) and not row_topk.usable(x[:, :500])  # not contiguous: torch's kernel serves
    assert torch.equal(argmax(x[:, :500]), x[:, :500].float().argmax(-1))
    assert not row_topk.usable(x[5].float().requires_grad_())  # training's logits: torch's kernel serves


def test_without_the_library_torch_serves(monkeypatch):
    monkeypatch.setattr(narrow_attention, "is_loaded", lambda: False)
    x = torch.randn(3, 50)
    assert not row_topk.usable(x)
    assert torch.equal(row_topk.topk_indices(x, 4), x.topk(4, dim=-1).indices)
    assert torch.equal(argmax(x), x.argmax(-1))
