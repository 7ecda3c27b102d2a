"""In one process: two bf16 targets compiled MODE, one with inductor weight prepack, one without; widths 1 and 8
timed interleaved at context 256. Prints medians. PAUSE_PGID: a process group stopped while timing
(the machine was shared). Run: python results/smollm2-cpu-warmup/prepack_ab.py max-autotune"""
import os, sys, time, json, statistics
import torch
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
import torch._inductor.config as ic
from specharness.target import TargetModel
from specharness import kernels
mode = sys.argv[1] if len(sys.argv) > 1 else "max-autotune"
targets = {}
for prepack in (True, False):
    t = TargetModel.load("smollm2", dtype="bfloat16")
    t.compile(mode)
    started = time.perf_counter()
    with ic.patch({"cpp.weight_prepack": prepack}):
        for w in (1, 8):
            kernels.step_ms(t, context=256, width=w, repeats=1)
    print(f"prepack={prepack}: compiled in {time.perf_counter()-started:.0f} s", flush=True)
    targets[prepack] = t
res = {(p, w): [] for p in targets for w in (1, 8)}
import signal
pg = int(os.environ.get("PAUSE_PGID", "0"))
if pg: os.killpg(pg, signal.SIGSTOP)
try:
    time.sleep(3)
    for rep in range(5):
        for p, t in targets.items():
            for w in (1, 8):
                res[(p, w)].append(kernels.step_ms(t, context=256, width=w, repeats=9))
finally:
    if pg: os.killpg(pg, signal.SIGCONT)
for k, v in res.items():
    print(f"prepack={k[0]} width={k[1]}: median {statistics.median(v):.2f} ms  all {[round(x,1) for x in v]}", flush=True)
