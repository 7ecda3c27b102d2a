"""Inductor's C++ wrapper (``cpp_wrapper``: the calls between a graph's kernels in C++, not Python),
A/B on the full model: vanilla's compiled bfloat16 max-autotune forward at widths 1, 8, 16, 32, 64
and contexts 256 and 1024, two targets in one process, timed interleaved (5 rounds of 9 forwards
per width, context and target after warm-up; medians in ms). The control is compiled with
SPECHARNESS_CPP_WRAPPER=0 (the Python wrapper of every commit before this one).
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v4/cpp_wrapper_ab.py"""
import os, statistics, torch
torch.set_num_threads(2)
from specharness import kernels
from specharness.target import TargetModel
from specharness.results import provenance
W, CTX = (1, 8, 16, 32, 64), (256, 1024)
targets = {}
for name in ("python-wrapper", "cpp-wrapper"):
    os.environ["SPECHARNESS_CPP_WRAPPER"] = "1" if name == "cpp-wrapper" else "0"  # read as the backend is made
    t = TargetModel.load("smollm2", "bfloat16")
    kernels.apply(t, "max-autotune"); t.expect_widths(max(W))
    for w in W:
        kernels.step_ms(t, context=256, width=w, repeats=1)  # compiles every width before timing
    assert t.backend.cpp_wrapper == (name == "cpp-wrapper")
    targets[name] = t
    print(name, "compiled", round(t.backend.compile_s), "s", flush=True)
res = {(n, c, w): [] for n in targets for c in CTX for w in W}
for rep in range(5):
    for c in CTX:
        for n, t in targets.items():
            for w in W:
                res[n, c, w].append(kernels.step_ms(t, context=c, width=w, repeats=9))
print("#", provenance(model="smollm2", device="cpu", threads=2, cpu=kernels.cpu_name(),
                      command="python results/smollm2-cpu-xeon-profile-v4/cpp_wrapper_ab.py"), flush=True)
for c in CTX:
    for n in targets:
        med = {w: round(statistics.median(res[n, c, w]), 2) for w in W}
        print(f"ctx {c} {n}", med, "8/1", round(med[8] / med[1], 3), "32/1", round(med[32] / med[1], 3),
              "rounds", {w: [round(x, 1) for x in res[n, c, w]] for w in W}, flush=True)
