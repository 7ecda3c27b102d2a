"""Vanilla's compiled bfloat16 max-autotune forward at widths 1, 8 and 32, context 256, interleaved (5 rounds
of 9 forwards after warm-up), medians in ms. Run on a fresh TORCHINDUCTOR_CACHE_DIR:
python results/smollm2-cpu-xeon-profile/widths.py"""
import os, sys, time, statistics, torch
torch.set_num_threads(2)
from specharness import kernels
from specharness.target import TargetModel
t = TargetModel.load("smollm2", "bfloat16")
kernels.apply(t, "max-autotune"); t.expect_widths(32)
for w in (1, 8, 32): kernels.step_ms(t, context=256, width=w, repeats=1)
res = {1: [], 8: [], 32: []}
for rep in range(5):
    for w in (1, 8, 32):
        res[w].append(kernels.step_ms(t, context=256, width=w, repeats=9))
print({w: (round(statistics.median(v), 2), [round(x, 1) for x in v]) for w, v in res.items()}, flush=True)
