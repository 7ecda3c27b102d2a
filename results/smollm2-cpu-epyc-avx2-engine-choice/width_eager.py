"""Eager bfloat16 forwards of 1-32 rows at context 256, with ``layers.Gemm`` as it was (bfloat16
linears) and patched to widen every bfloat16 linear to float32 (weights converted per call):
interleaved, median of 10 each. The table in this folder's README set ``layers.WIDEN_ROWS``.

Run from the repository root: python results/smollm2-cpu-epyc-avx2-engine-choice/width_eager.py
"""
import statistics, time, torch, torch.nn.functional as F
from specharness.model import layers
from specharness.model.engine_choice import random_ids
from specharness.session import EngineRequest, Session
torch.set_num_threads(2)
orig = layers.Gemm.__call__  # at f153d32: bfloat16 linears at every width
def widened(self, x, w, b=None, wide=False):
    if x.dtype == torch.bfloat16:
        return F.linear(x.float(), w.float(), None if b is None else b.float()).to(torch.bfloat16)
    return orig(self, x, w, b, wide)
t = Session(EngineRequest("smollm2", "bfloat16", "none", "cpu", 2)).target
with torch.inference_mode():
    cache = t.new_cache(600)
    t.forward(random_ids(t, 256, 1), cache, 0, head=True, prefill=True, last=True)
    def step(ids):
        s = time.perf_counter(); t.forward(ids, cache, 256, head=True); cache.crop(256); return time.perf_counter() - s
    for T in (1, 2, 4, 8, 16, 32):
        ids = random_ids(t, T, 2)
        res = {}
        for name, fn in (("bf16", orig), ("widened", widened)) * 2:
            layers.Gemm.__call__ = fn; step(ids)
            res.setdefault(name, []).extend(step(ids) for _ in range(5))
        print(T, {k: round(statistics.median(v) * 1e3, 1) for k, v in res.items()}, flush=True)
