"""The full-model A/B both of this folder's engine changes share: vanilla's compiled bfloat16
max-autotune forward, every width compiled before timing, then the targets timed interleaved at
widths 1, 8, 16, 32, 64 and contexts 256 and 1024 (5 rounds of 9 forwards per width, context and
target; medians in ms). Imported by bf16_cache_ab.py and cpp_wrapper_ab.py."""
import statistics
from typing import Callable

import torch

from specharness import kernels
from specharness.results import provenance
from specharness.target import TargetModel

W, CTX = (1, 8, 16, 32, 64), (256, 1024)


def compiled_target(name: str, prepare: Callable[[TargetModel], None] = lambda t: None) -> TargetModel:
    """SmolLM2 in bfloat16, ``prepare``d, then compiled at every width (under the config of this moment)."""
    t = TargetModel.load("smollm2", "bfloat16")
    prepare(t)
    kernels.apply(t, "max-autotune"); t.expect_widths(max(W))
    for w in W:
        kernels.step_ms(t, context=256, width=w, repeats=1)
    print(name, "compiled", round(t.backend.compile_s), "s", flush=True)
    return t


def time_interleaved(targets: dict[str, TargetModel], command: str) -> None:
    """Time the targets interleaved, then print a provenance line and one line per context and target."""
    torch.set_num_threads(2)
    res = {(n, c, w): [] for n in targets for c in CTX for w in W}
    for rep in range(5):
        for c in CTX:
            for n, t in targets.items():
                for w in W:
                    res[n, c, w].append(kernels.step_ms(t, context=c, width=w, repeats=9))
    print("#", provenance(model="smollm2", device="cpu", threads=2, cpu=kernels.cpu_name(), command=command), flush=True)
    for c in CTX:
        for n in targets:
            med = {w: round(statistics.median(res[n, c, w]), 2) for w in W}
            print(f"ctx {c} {n}", med, "8/1", round(med[8] / med[1], 3), "32/1", round(med[32] / med[1], 3),
                  "rounds", {w: [round(x, 1) for x in res[n, c, w]] for w in W}, flush=True)
