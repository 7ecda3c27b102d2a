"""Argmax of one row and top-8 of eight rows of SmolLM2's 49,152 bfloat16 logits, timed right after a
compiled target forward (as a round's bookkeeping meets them), torch's kernels against ours, the
paths interleaved over 216 forwards (after 24 untimed). Run from the repository root:

    python results/smollm2-cpu-epyc-avx2-row-topk/after_forward.py
"""
import statistics, time
import torch

torch.set_num_threads(2)
from specharness.model import TargetModel  # noqa: E402
from specharness.model.accel import row_topk  # noqa: E402
from specharness.model.layers import argmax  # noqa: E402

target = TargetModel.load(None, "bfloat16", "cpu")
target.compile("max-autotune")
target.expect_widths(16)
calls = {  # name: (forward width, the call)
    "argmax, 1 row: torch max": (1, lambda rows: rows[0].max(dim=-1).indices),
    "argmax, 1 row: layers.argmax (ours)": (1, lambda rows: argmax(rows[0])),
    "argmax, 1 row: the op alone": (1, lambda rows: torch.ops.specharness.row_argmax(rows[0])),
    "top-8, 8 rows: torch topk": (8, lambda rows: rows.topk(8, dim=-1).indices),
    "top-8, 8 rows: row_topk.topk_indices (ours)": (8, lambda rows: row_topk.topk_indices(rows, 8)),
}
names, seconds = list(calls), {name: [] for name in calls}
with torch.inference_mode():
    cache = target.new_cache(64)
    for i in range(240):
        name = names[i % len(names)]
        width, call = calls[name]
        cache.crop(0)
        cache.lengths[:] = [32] * len(cache.lengths)
        logits = target.forward(torch.zeros(width, dtype=torch.long), cache, 32, head=True).logits
        rows = logits.reshape(-1, logits.shape[-1])
        start = time.perf_counter()
        call(rows)
        if i >= 24:
            seconds[name].append(time.perf_counter() - start)
for name, s in seconds.items():
    print(f"{name}: {statistics.median(s) * 1e6:.0f} us (median of {len(s)})")
