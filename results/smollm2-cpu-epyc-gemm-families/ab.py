"""GEMM kernel choice A/B: SmolLM2's whole-model verification forward at widths 2/4/8/16, each engine
configuration's graphs built fresh (own graph store, empty inductor cache, two builds at once as in a
run's warm-up), then every configuration timed round-robin in this one process.

    python results/smollm2-cpu-epyc-gemm-families/ab.py SCRATCH_DIR OUT.json [CONFIG ...]

CONFIG is GEMM/TIMING (EngineOptions.gemm / .autotune_timing); default: every one below. $WIDTHS (a
comma list, default 2,4,8,16) picks the widths.
"""
import json, os, platform, statistics, subprocess, sys, time

scratch, out = sys.argv[1], sys.argv[2]
CONFIGS = sys.argv[3:] or ["autotune/inductor", "autotune/fastest", "cpp/fastest", "aten/fastest", "auto/fastest"]
os.makedirs(scratch, exist_ok=True)
os.environ["SPECHARNESS_CACHE"] = os.path.join(scratch, "cache")  # a fresh graph store: every graph built now
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")  # and no timing or graph reused
import torch
THREADS = 2
torch.set_num_threads(THREADS)
from specharness.engine_options import EngineOptions
from specharness.model import TargetModel
from specharness.model.engine_choice import cpu_name
from specharness.width_curve import verify_seconds

WIDTHS, ROUNDS = [int(w) for w in os.environ.get("WIDTHS", "2,4,8,16").split(",")], 5
targets, built = {}, {}
for config in CONFIGS:
    gemm, timing = config.split("/")
    started = time.perf_counter()
    t = TargetModel.load(None, "bfloat16", "cpu", options=EngineOptions(gemm=gemm, autotune_timing=timing))
    t.compile("max-autotune")
    t.expect_widths(max(WIDTHS))
    with t.backend.in_background(), torch.inference_mode():  # the graphs build in two child processes
        cache = t.new_cache(64)
        for w in WIDTHS:
            cache.crop(0)
            cache.lengths[:] = [32] * len(cache.lengths)
            t.forward(torch.zeros(w, dtype=torch.long), cache, 32, head=True)
    targets[config], built[config] = t, round(time.perf_counter() - started)
    print(f"{config}: built in {built[config]} s", file=sys.stderr)

times = {c: {w: [] for w in WIDTHS} for c in CONFIGS}
for _ in range(ROUNDS):  # round-robin: drift falls on every configuration alike
    for config, t in targets.items():
        for w, s in verify_seconds(t, 0, WIDTHS, reps=5).items():
            times[config][w].append(s * 1e3)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
result = {"command": " ".join(["python", *sys.argv]), "commit": commit, "model": "SmolLM2-135M-Instruct",
          "dtype": "bfloat16", "compile": "max-autotune", "device": f"cpu: {cpu_name()}", "threads": THREADS,
          "torch": torch.__version__, "python": platform.python_version(), "rounds": ROUNDS,
          "build_s": built, "forward_ms": {c: {w: round(statistics.median(v), 2) for w, v in ws.items()}
                                          for c, ws in times.items()},
          "forward_ms_range": {c: {w: [round(min(v), 2), round(max(v), 2)] for w, v in ws.items()}
                               for c, ws in times.items()}}
with open(out, "w") as f:
    json.dump(result, f, indent=1)
print("| configuration | " + " | ".join(f"width {w}" for w in WIDTHS) + " | build s |")
print("|---|" + "---|" * (len(WIDTHS) + 1))
for c in CONFIGS:
    print(f"| {c} | " + " | ".join(f"{result['forward_ms'][c][w]:.1f}" for w in WIDTHS) + f" | {built[c]} |")
