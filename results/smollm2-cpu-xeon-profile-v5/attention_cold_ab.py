"""Attention alone, eager, SDPA's flash kernel (each group's query heads folded into one head's rows,
as the engine calls it) against the narrow attention kernel (its AVX512-BF16 path): 30 SmolLM2-shaped
layers (3 key/value heads of 64, 3 query heads each, caches of 1100 slots per layer), 2 threads,
10 interleaved rounds, medians in ms. 'warm': the layers back to back (their caches stay in L3);
'cold': each layer after a GEMM over a weight-sized matrix of its own (3.5 MB, like the MLP's), the
GEMMs' own time subtracted, so the layer's cache comes from memory as in the full model. The timing
loop is specharness.engine_ab.time_layers (shared with ../smollm2-cpu-xeon-profile-v6/attention_amx_ab.py).
The committed .txt ran on the kernel of 5cf06e9, then again on cb286c4's (its header names each).
Run: python results/smollm2-cpu-xeon-profile-v5/attention_cold_ab.py"""
import torch

from specharness.engine_ab import attention_inputs, time_layers
from specharness.model.accel import narrow_attention as na

THREADS = 2
CASES = [(8, 288), (8, 1024), (4, 288), (16, 288), (1, 288)]

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    assert na.available(torch.device("cpu"), 64), na.reason()
    junk = None  # the cold path's weights, made once and shared by every case
    for T, n in CASES:
        case = attention_inputs(T, n, junk=junk)
        junk = case.junk
        fs = {"none": lambda i: None, "sdpa": case.sdpa, "narrow": case.narrow(amx=False)}
        got = time_layers(fs, case.x, case.junk)
        print(f"T {T} n {n}: " + "  ".join(f"{nm} warm {w:.2f} cold {c:.2f}" for nm, (w, c) in got.items()), flush=True)
