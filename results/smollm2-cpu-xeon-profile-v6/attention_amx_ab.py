"""Attention alone, eager: SDPA's flash kernel (each group's query heads folded into one head's
rows, as attend calls it) against the narrow attention kernel's two paths, AVX512-BF16 dot products
with float32 FMAs ('fma') and AMX tiles ('amx'), by width, timed as
../smollm2-cpu-xeon-profile-v5/attention_cold_ab.py times them (30 SmolLM2-shaped layers, warm and
cold behind a weight-sized GEMM, 10 interleaved rounds, medians in ms), the T new positions causal
among themselves.
Run: python results/smollm2-cpu-xeon-profile-v6/attention_amx_ab.py [T:n ...]"""
import os, sys
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "smollm2-cpu-xeon-profile-v5"))
from attention_cold_ab import Hkv, L, d, g, time_layers
from specharness import narrow_attention as na

torch.set_num_threads(2)
assert na.available(torch.device("cpu"), 64), na.reason()
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
    got = time_layers(fs, x, junk)
    print(f"T {T:2d} n {n:4d}: " + "  ".join(f"{nm} warm {w:.2f} cold {c:.2f}" for nm, (w, c) in got.items()), flush=True)
