"""One tree's whole-model forward at widths 1/2/4/8/16 on the default engine (bfloat16, max-autotune, 2
threads; graphs from $SPECHARNESS_CACHE, built on the first call), median of 5 x 5 forwards at context
32, and the time its graphs spend in specharness::narrow_linear (torch.profiler, 5 forwards a width).
Prints one JSON line. forward_ab.sh alternates two trees' processes, so drift falls on both alike.

    cd TREE && PYTHONPATH=TREE python .../forward_ab.py
"""
import json, os, statistics, time
import torch
from torch.profiler import ProfilerActivity, profile

torch.set_num_threads(2)
import specharness  # noqa: E402
from specharness.model import TargetModel  # noqa: E402
from specharness.width_curve import verify_seconds  # noqa: E402

WIDTHS = [1, 2, 4, 8, 16]
started = time.perf_counter()
target = TargetModel.load(None, "bfloat16", "cpu")
target.compile("max-autotune")
target.expect_widths(max(WIDTHS))
with target.backend.in_background(), torch.inference_mode():
    cache = target.new_cache(64)
    for w in WIDTHS:
        cache.crop(0)
        cache.lengths[:] = [32] * len(cache.lengths)
        target.forward(torch.zeros(w, dtype=torch.long), cache, 32, head=True)
built = time.perf_counter() - started
times = {w: [] for w in WIDTHS}
for _ in range(5):
    for w, s in verify_seconds(target, 0, WIDTHS, reps=5).items():
        times[w].append(s * 1e3)
kernel = {}
with torch.inference_mode():
    for w in WIDTHS:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                cache.crop(0)
                cache.lengths[:] = [32] * len(cache.lengths)
                target.forward(torch.zeros(w, dtype=torch.long), cache, 32, head=True)
        ours = [e for e in prof.key_averages() if e.key == "specharness::narrow_linear"]
        kernel[w] = round(ours[0].self_cpu_time_total / 5e3, 2) if ours else None
print(json.dumps({"tree": os.path.dirname(os.path.dirname(specharness.__file__)), "built_s": round(built),
                  "forward_ms": {w: round(statistics.median(v), 2) for w, v in times.items()},
                  "narrow_linear_ms": kernel}), flush=True)
