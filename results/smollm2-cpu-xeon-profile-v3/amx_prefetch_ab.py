"""The AMX GEMM template's weight prefetch (specharness/amx_prefetch.py), A/B on the full model:
vanilla's compiled bfloat16 max-autotune forward at widths 1, 8, 16, 32, 64 and context 256, two
targets in one process (the first compiled before the template is edited, the second after), timed
interleaved: 5 rounds of 9 forwards per width and target after warm-up, medians in ms.
Run on a fresh TORCHINDUCTOR_CACHE_DIR, nothing else on the machine:
python results/smollm2-cpu-xeon-profile-v3/amx_prefetch_ab.py"""
import statistics, subprocess, torch
torch.set_num_threads(2)
from specharness import amx_prefetch, kernels
from specharness.target import TargetModel
from specharness.results import provenance
W = (1, 8, 16, 32, 64)
targets = {}
for name, on in (("stock", False), ("prefetch", True)):
    amx_prefetch._installed = None if on else False  # False: install() leaves the template alone
    t = TargetModel.load("smollm2", "bfloat16")
    kernels.apply(t, "max-autotune"); t.expect_widths(max(W))
    for w in W:
        kernels.step_ms(t, context=256, width=w, repeats=1)  # compiles every width now, under this template
    assert t.backend.amx_prefetch == on
    targets[name] = t
    print(name, "compiled", round(t.backend.compile_s), "s", flush=True)
res = {(n, w): [] for n in targets for w in W}
for rep in range(5):
    for n, t in targets.items():
        for w in W:
            res[n, w].append(kernels.step_ms(t, context=256, width=w, repeats=9))
print("#", provenance(model="smollm2", device="cpu", threads=2, cpu=kernels.cpu_name(),
                      command="python results/smollm2-cpu-xeon-profile-v3/amx_prefetch_ab.py"), flush=True)
for n in targets:
    med = {w: round(statistics.median(res[n, w]), 2) for w in W}
    print(n, med, "8/1", round(med[8] / med[1], 3), "32/1", round(med[32] / med[1], 3),
          "rounds", {w: [round(x, 1) for x in res[n, w]] for w in W}, flush=True)
