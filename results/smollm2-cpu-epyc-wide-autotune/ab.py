"""The dynamic-width (prefill) graph with and without max-autotune: how long each takes to build, and
what its prefills cost, timed interleaved in one process.

Why: in a first run the engine check builds the prefill graph beside the whole model's width-2 graph,
and the prefill graph is the long pole (144-164 s in results/smollm2-cpu-epyc-first-run runs 8-10).
Run from the repository root: python results/smollm2-cpu-epyc-wide-autotune/ab.py
"""
import json
import statistics
import sys
import time

import torch

from specharness.engine_options import EngineOptions
from specharness.model import TargetModel
from specharness.model.engine_choice import apply
from specharness.profile import prefill_ms
from specharness.results import provenance

THREADS, LENGTHS, ROUNDS = 2, (64, 128, 256, 512), 7
torch.set_num_threads(THREADS)
print(json.dumps(provenance(command="python " + " ".join(sys.argv), threads=THREADS)), flush=True)
arms = {}
for name, on in (("autotuned", True), ("default", False)):
    target = TargetModel.load("smollm2", "bfloat16", "cpu", options=EngineOptions(wide_autotune=on))
    apply(target, "max-autotune")
    started = time.perf_counter()
    prefill_ms(target, 64, repeats=1)  # builds (or loads) the wide graph
    graphs = [json.loads(p.with_suffix(".json").read_text()) for p in target.backend.store.root.glob("*.pt2")
              if p.with_suffix(".json").is_file()]
    wide = [g for g in graphs if "'wide'" in g["graph"] and g["mode"] == "max-autotune"
            and ("max_autotune" in g.get("inductor", {})) == on and g.get("code") == target.backend.store.env["code"]]
    print(f"{name}: first prefill {time.perf_counter() - started:.0f} s; stored build times of such graphs "
          f"{[g.get('build_s') for g in wide]}", flush=True)
    arms[name] = target
times = {(a, n): [] for a in arms for n in LENGTHS}
for r in range(ROUNDS):
    for name in (arms if r % 2 == 0 else reversed(list(arms))):
        for n in LENGTHS:
            times[(name, n)].append(prefill_ms(arms[name], n, repeats=5))
for n in LENGTHS:
    a, d = statistics.median(times[("autotuned", n)]), statistics.median(times[("default", n)])
    ratios = [y / x for x, y in zip(times[("autotuned", n)], times[("default", n)])]
    print(f"prefill {n:4d}: autotuned {a:7.1f} ms, default {d:7.1f} ms; default / autotuned {d / a:.3f} "
          f"(per round {min(ratios):.3f}-{max(ratios):.3f})", flush=True)
