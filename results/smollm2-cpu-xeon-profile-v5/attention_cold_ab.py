"""Attention alone, eager, SDPA's flash kernel (each group's query heads folded into one head's rows,
as attend calls it) against the narrow attention kernel (its AVX512-BF16 path): 30 SmolLM2-shaped
layers (3 key/value heads of 64, 3 query heads each, caches of 1100 slots per layer), 2 threads,
10 interleaved rounds, medians in ms. 'warm': the layers back to back (their caches stay in L3);
'cold': each layer after a GEMM over a weight-sized matrix of its own (3.5 MB, like the MLP's), the
GEMMs' own time subtracted, so the layer's cache comes from memory as in the full model.
``time_layers`` is shared with ../smollm2-cpu-xeon-profile-v6/attention_amx_ab.py.
Run: python results/smollm2-cpu-xeon-profile-v5/attention_cold_ab.py"""
import statistics, time
from typing import Callable

import torch
import torch.nn.functional as F

Hkv, g, d, L = 3, 3, 64, 30


def time_layers(fs: dict[str, Callable[[int], object]], x: torch.Tensor, junk: list[torch.Tensor]) -> dict[str, tuple[float, float]]:
    """Each of ``fs`` (layer index -> one layer's attention; "none" does nothing) over L layers, warm
    and cold (each layer after its GEMM of x by junk[i]), interleaved: name -> (warm ms, cold ms)."""
    res = {}
    with torch.inference_mode():
        for rep in range(10):
            for name, f in fs.items():
                for cold in (False, True):
                    t = time.perf_counter()
                    for i in range(L):
                        if cold: torch.mm(x, junk[i].t())
                        f(i)
                    res.setdefault((name, cold), []).append((time.perf_counter() - t) * 1e3)
    base = statistics.median(res["none", True])
    return {nm: (statistics.median(res[nm, False]), statistics.median(res[nm, True]) - base) for nm in fs if nm != "none"}


if __name__ == "__main__":
    from specharness import narrow_attention as na
    torch.set_num_threads(2)
    assert na.available(torch.device("cpu"), 64)
    junk = [torch.randn(3072, 576, dtype=torch.bfloat16) for _ in range(L)]
    for T, n in [(8, 288), (8, 1024), (4, 288), (16, 288), (1, 288)]:
        kc = [torch.randn(Hkv, 1100, d, dtype=torch.bfloat16) for _ in range(L)]
        vc = [torch.randn(Hkv, 1100, d, dtype=torch.bfloat16) for _ in range(L)]
        x = torch.randn(T, 576, dtype=torch.bfloat16)
        q = torch.randn(Hkv, g*T, d, dtype=torch.bfloat16)
        bias = torch.zeros(T, n, dtype=torch.bfloat16); b24 = bias.repeat(g, 1)
        fs = {"none": lambda i: None,
              "sdpa": lambda i: F.scaled_dot_product_attention(q.unsqueeze(0), kc[i][:, :n].unsqueeze(0), vc[i][:, :n].unsqueeze(0), attn_mask=b24),
              "narrow": lambda i: torch.ops.specharness.narrow_attention(q, kc[i], vc[i], bias, d ** -0.5, False)}
        got = time_layers(fs, x, junk)
        print(f"T {T} n {n}: " + "  ".join(f"{nm} warm {w:.2f} cold {c:.2f}" for nm, (w, c) in got.items()), flush=True)
