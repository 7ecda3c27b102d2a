"""Attention alone, eager: SDPA's flash kernel (each group's query heads folded into one head's
rows, as the engine calls it) against the narrow attention kernel's two paths, AVX512-BF16 dot
products with float32 FMAs ('fma') and AMX tiles ('amx'), by width, timed by
specharness.engine_ab.time_layers as ../smollm2-cpu-xeon-profile-v5/attention_cold_ab.py times them
(30 SmolLM2-shaped layers, warm and cold behind a weight-sized GEMM, 10 interleaved rounds, medians
in ms), the T new positions causal among themselves. The committed .txt ran at cb286c4 (its header).
Run: python results/smollm2-cpu-xeon-profile-v6/attention_amx_ab.py [T:n ...]"""
import sys

import torch

from specharness.engine_ab import attention_inputs, time_layers
from specharness.model.accel import narrow_attention as na

THREADS = 2
CASES = [(2, 288), (8, 288), (16, 288), (32, 288), (64, 288), (32, 1024), (8, 1024)]

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    assert na.available(torch.device("cpu"), 64), na.reason()
    junk = None  # the cold path's weights, made once and shared by every case
    for T, n in [tuple(map(int, a.split(":"))) for a in sys.argv[1:]] or CASES:
        case = attention_inputs(T, n, causal=True, junk=junk)
        junk = case.junk
        fs = {"none": lambda i: None, "sdpa": case.sdpa, "fma": case.narrow(amx=False), "amx": case.narrow(amx=True)}
        got = time_layers(fs, case.x, case.junk)
        print(f"T {T:2d} n {n:4d}: " + "  ".join(f"{nm} warm {w:.2f} cold {c:.2f}" for nm, (w, c) in got.items()),
              flush=True)
