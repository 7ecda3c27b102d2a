"""Graph store packages against torch.compile for the whole model's forward at widths 2/4/8/16
(bfloat16 max-autotune, the default engine here), both in this one process, timed round-robin.

Why: from cc1d947 to the fix beside this script, every package whose graph calls our linear kernel
(static widths 4-16) failed to build in the store's child process (the op's fake kernel was not
registered there), and each run compiled those graphs with torch.compile instead. So the tables
since then verified 4-16 positions through torch.compile's graphs, not through packages.

    python results/smollm2-cpu-epyc-narrow-build/ab.py OUT.json

"store": the graph store on (packages built in two child processes, as a run's warm-up does; the
user's cache, so a later run loads them); "torch.compile": the store off (what the failed builds fell
back to). The last line of a failed build's log would show here as a store failure.
"""
import json, platform, statistics, subprocess, sys, time

import torch
THREADS = 2
torch.set_num_threads(THREADS)
from specharness.engine_options import EngineOptions
from specharness.model import TargetModel
from specharness.model.engine_choice import cpu_name
from specharness.width_curve import verify_seconds

out = sys.argv[1]
WIDTHS, ROUNDS = [2, 4, 8, 16], 7
CONFIGS = {"store": EngineOptions(aot_graphs=True), "torch.compile": EngineOptions(aot_graphs=False)}
targets, built, failures = {}, {}, {}
for name, options in CONFIGS.items():
    started = time.perf_counter()
    t = TargetModel.load(None, "bfloat16", "cpu", options=options)
    t.compile("max-autotune")
    t.expect_widths(max(WIDTHS))
    with t.backend.in_background(), torch.inference_mode():  # store: the graphs build in two child processes
        cache = t.new_cache(64)
        for w in WIDTHS:
            cache.crop(0)
            cache.lengths[:] = [32] * len(cache.lengths)
            t.forward(torch.zeros(w, dtype=torch.long), cache, 32, head=True)
    store = t.backend.store
    failures[name] = sorted(set(store.failures.values())) if store is not None else []
    targets[name], built[name] = t, round(time.perf_counter() - started)
    print(f"{name}: built in {built[name]} s, store failures: {failures[name]}", file=sys.stderr)

times = {c: {w: [] for w in WIDTHS} for c in CONFIGS}
for _ in range(ROUNDS):  # round-robin: drift falls on both alike
    for name, t in targets.items():
        for w, s in verify_seconds(t, 0, WIDTHS, reps=5).items():
            times[name][w].append(s * 1e3)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "specharness"], capture_output=True, text=True).stdout.strip()
result = {"command": " ".join(["python", *sys.argv]), "commit": commit + ("-dirty" if dirty else ""),
          "model": "SmolLM2-135M-Instruct", "dtype": "bfloat16", "compile": "max-autotune",
          "device": f"cpu: {cpu_name()}", "threads": THREADS, "torch": torch.__version__,
          "python": platform.python_version(), "rounds": ROUNDS, "build_s": built, "store_failures": failures,
          "forward_ms": {c: {w: round(statistics.median(v), 2) for w, v in ws.items()} for c, ws in times.items()},
          "forward_ms_range": {c: {w: [round(min(v), 2), round(max(v), 2)] for w, v in ws.items()}
                               for c, ws in times.items()}}
with open(out, "w") as f:
    json.dump(result, f, indent=1)
print("| configuration | " + " | ".join(f"width {w}" for w in WIDTHS) + " | build s |")
print("|---|" + "---|" * (len(WIDTHS) + 1))
for c in CONFIGS:
    print(f"| {c} | " + " | ".join(f"{result['forward_ms'][c][w]:.1f}" for w in WIDTHS) + f" | {built[c]} |")
