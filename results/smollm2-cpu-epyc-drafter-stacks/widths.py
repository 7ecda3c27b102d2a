"""What a verification forward costs at widths 1, 2, 3, 4 and 8 when each has its own static graph
(the engine pads 2..8 to the bucket 8): layers 2-30 + head, as Kangaroo verifies, and 0-30 + head.
Usage: python widths.py > widths.txt (repository root)."""

import statistics
import time

import torch

import specharness.model.backends as backends
from specharness.model import TargetModel

torch.set_num_threads(2)
backends.WIDTH_BUCKETS = (1, 2, 3, 4, 8, 16, 32, 64)  # bucket() reads the module's tuple
t = TargetModel.load(dtype="bfloat16")
t.compile("max-autotune")
t.expect_widths(8)
print("| layers | width | ms per forward (median of 60, interleaved) |\n|---|---|---|")
times = {}
with torch.inference_mode():
    cache = t.new_cache(512)
    for rep in range(65):
        for a in (2, 0):
            for w in (1, 2, 3, 4, 8):
                x = torch.zeros(w, dtype=torch.long) if a == 0 else torch.zeros(w, t.hidden_size, dtype=t.dtype)
                cache.crop(0)
                cache.lengths[:] = [300] * len(cache.lengths)
                s = time.perf_counter()
                t.forward(x, cache, 300, a, head=True)
                if rep >= 5:
                    times.setdefault((a, w), []).append(time.perf_counter() - s)
for (a, w), v in sorted(times.items()):
    print(f"| {a}-30 +head | {w} | {1e3 * statistics.median(v):.2f} |")
