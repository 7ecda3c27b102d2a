"""Where a wider forward's time goes: torch.profiler over 10 forwards of vanilla's compiled bfloat16
max-autotune graph per width (default 1, 8, 32; context 256), with inductor's per-kernel records
on (``cpp.enable_kernel_profile``), so every generated kernel and C++ GEMM template shows by name.
Divide the totals by 10 for one forward.

Run on a fresh TORCHINDUCTOR_CACHE_DIR: python results/smollm2-cpu-xeon-profile/kernel_profile.py 1 32"""
import sys, torch
torch.set_num_threads(2)
import torch._inductor.config as ic; ic.cpp.enable_kernel_profile = True
from torch.profiler import profile, ProfilerActivity
from specharness import kernels
from specharness.target import TargetModel
t = TargetModel.load("smollm2", "bfloat16")
kernels.apply(t, "max-autotune"); t.expect_widths(32)
ws = [int(x) for x in sys.argv[1:]] or [1, 8, 32]
for w in ws: print(w, kernels.step_ms(t, context=256, width=w, repeats=5), flush=True)
with torch.inference_mode():
    cache = t.new_cache(400)
    ids = kernels.random_ids(t, 256, 0)
    t.forward(ids, cache, 0, head=True, prefill=True)
    for w in ws:
        for _ in range(3): t.forward(ids[:w], cache, 256, head=True); cache.crop(256)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(10): t.forward(ids[:w], cache, 256, head=True); cache.crop(256)
        print(f"=== width {w}")
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))
