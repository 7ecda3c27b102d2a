"""What the C++ wrapper costs in compile time: vanilla's bfloat16 max-autotune graphs (widths 1 and 8 and the
prefill graph), compiled on an empty TORCHINDUCTOR_CACHE_DIR, then again in a second process on that cache.
for cw in 0 1; do rm -rf /tmp/ct$cw; for run in 1 2; do SPECHARNESS_CPP_WRAPPER=$cw TORCHINDUCTOR_CACHE_DIR=/tmp/ct$cw python results/smollm2-cpu-xeon-profile-v4/compile_time.py; done; done"""
import time, torch, os
torch.set_num_threads(2)
from specharness import kernels
from specharness.target import TargetModel
t0 = time.time()
t = TargetModel.load("smollm2", "bfloat16")
kernels.apply(t, "max-autotune"); t.expect_widths(8)
for w in (1, 8): kernels.step_ms(t, context=256, width=w, repeats=1)
print(os.environ["SPECHARNESS_CPP_WRAPPER"], "compile_s", round(t.backend.compile_s), "process", round(time.time() - t0), "graphs", len(t.backend.graphs), flush=True)
