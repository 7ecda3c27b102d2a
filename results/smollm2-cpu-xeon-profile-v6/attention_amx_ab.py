"""Attention alone, eager: SDPA's flash kernel (each group's query heads folded into one head's
rows, as attend calls it) against the narrow attention kernel's two paths, AVX512-BF16 dot products
with float32 FMAs ('fma') and AMX tiles ('amx'), by width. 30 SmolLM2-shaped layers (3 key/value
heads of 64, 3 query heads each, caches of 1100 slots per layer), 2 threads, 10 interleaved rounds,
medians in ms, the T new positions causal among themselves. 'warm': the layers back to back (their caches stay in L3); 'cold': each layer after
a GEMM over a weight-sized matrix of its own (3.5 MB, like the MLP's), the GEMMs' own time
subtracted, so the layer's cache comes from memory as in the full model.
Run: python results/smollm2-cpu-xeon-profile-v6/attention_amx_ab.py [T:n ...]"""
import statistics, sys, time
import torch
import torch.nn.functional as F
from specharness import narrow_attention as na
torch.set_num_threads(2)
assert na.available(torch.device("cpu"), 64), na.reason()
Hkv, g, d, L = 3, 3, 64, 30
junk = [torch.randn(3072, 576, dtype=torch.bfloat16) for _ in range(L)]
cases = [tuple(map(int, a.split(":"))) for a in sys.argv[1:]] or [(2, 288), (8, 288), (16, 288), (32, 288), (64, 288), (32, 1024), (8, 1024)]
for T, n in cases:
    kc = [torch.randn(Hkv, 1100, d, dtype=torch.bfloat16) for _ in range(L)]
    vc = [torch.randn(Hkv, 1100, d, dtype=torch.bfloat16) for _ in range(L)]
    x = torch.randn(T, 576, dtype=torch.bfloat16)
    q = torch.randn(Hkv, g * T, d, dtype=torch.bfloat16)
    bias = torch.zeros(T, n, dtype=torch.bfloat16)  # the new positions causal among themselves, as a chain's are
    bias[:, n - T:] = torch.zeros(T, T).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    bg = bias.repeat(g, 1)
    fs = {"none": lambda i: None,
          "sdpa": lambda i: F.scaled_dot_product_attention(q.unsqueeze(0), kc[i][:, :n].unsqueeze(0), vc[i][:, :n].unsqueeze(0), attn_mask=bg),
          "fma": lambda i: torch.ops.specharness.narrow_attention(q, kc[i], vc[i], bias, d ** -0.5, False),
          "amx": lambda i: torch.ops.specharness.narrow_attention(q, kc[i], vc[i], bias, d ** -0.5, True)}
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
    print(f"T {T:2d} n {n:4d}: " + "  ".join(f"{nm} warm {statistics.median(res[nm, False]):.2f} cold {statistics.median(res[nm, True]) - base:.2f}" for nm in ("sdpa", "fma", "amx")), flush=True)
