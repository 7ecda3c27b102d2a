"""Attention alone, eager, SDPA's flash kernel (each group's query heads folded into one head's rows,
as attend calls it) against the narrow attention kernel: 30 SmolLM2-shaped layers (3 key/value heads
of 64, 3 query heads each, caches of 1100 slots per layer), 2 threads, 10 interleaved rounds,
medians in ms. 'warm': the layers back to back (their caches stay in L3); 'cold': each layer after a
GEMM over a weight-sized matrix of its own (3.5 MB, like the MLP's), the GEMMs' own time subtracted,
so the layer's cache comes from memory as in the full model.
Run: python results/smollm2-cpu-xeon-profile-v5/attention_cold_ab.py
at cb286c4 (git checkout cb286c4): since db55abf the kernel's op takes an AMX flag and a stack's
`narrow` names a path; results/smollm2-cpu-xeon-profile-v6 has the A/Bs at today's interface."""
import torch, time, statistics
import torch.nn.functional as F
from specharness import narrow_attention as na
torch.set_num_threads(2)
assert na.available(torch.device("cpu"), 64)
Hkv, g, d, L = 3, 3, 64, 30
junk = [torch.randn(3072, 576, dtype=torch.bfloat16) for _ in range(L)]
for T, n in [(8, 288), (8, 1024), (4, 288), (16, 288), (1, 288)]:
    kc = [torch.randn(Hkv, 1100, d, dtype=torch.bfloat16) for _ in range(L)]
    vc = [torch.randn(Hkv, 1100, d, dtype=torch.bfloat16) for _ in range(L)]
    x = torch.randn(T, 576, dtype=torch.bfloat16)
    q = torch.randn(Hkv, g*T, d, dtype=torch.bfloat16)
    bias = torch.zeros(T, n, dtype=torch.bfloat16); b24 = bias.repeat(g, 1)
    fs = {"none": lambda i: None,
          "sdpa": lambda i: F.scaled_dot_product_attention(q.unsqueeze(0), kc[i][:, :n].unsqueeze(0), vc[i][:, :n].unsqueeze(0), attn_mask=b24),
          "narrow": lambda i: torch.ops.specharness.narrow_attention(q, kc[i], vc[i], bias, d ** -0.5)}
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
    print(f"T {T} n {n}: " + "  ".join(f"{nm} warm {statistics.median(res[nm, False]):.2f} cold {statistics.median(res[nm, True]) - base:.2f}" for nm in ("sdpa", "narrow")), flush=True)
