"""One engine configuration per process: the width curve of freshly built bf16 max-autotune graphs, in a fresh
graph store and inductor cache (OUT/cache, OUT/ind). Usage: [SPECHARNESS_GEMM=...] python explore.py OUT.
The engine switches come from the environment; WC_WIDTHS picks the widths. Build logs are kept in OUT."""
import json, os, sys, time, glob
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
os.environ["SPECHARNESS_CACHE"] = os.path.join(out, "cache")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(out, "ind")
import torch
torch.set_num_threads(2)
from specharness.model import TargetModel
from specharness.width_curve import verify_seconds
import shutil
from specharness.model import graph_store
_wait = graph_store.GraphStore.wait
def wait(self, build):
    if not build.done:
        build.proc.wait()
        log = build.path.with_name(f"{build.path.stem}.log")
        if log.is_file():
            shutil.copy(log, os.path.join(out, f"build-{build.graph.width}.log"))
    return _wait(self, build)
graph_store.GraphStore.wait = wait
t0 = time.time()
t = TargetModel.load(None, "bfloat16", "cpu")
t.compile("max-autotune")
t.expect_widths(16)
W = [int(w) for w in os.environ.get("WC_WIDTHS", "2,4,8,16").split(",")]
with t.backend.in_background():
    with torch.inference_mode():
        cache = t.new_cache(300)
        for w in W:
            cache.crop(0); cache.lengths[:] = [32] * len(cache.lengths)
            t.forward(torch.zeros(w, dtype=torch.long), cache, 32, head=True)
built = time.time() - t0
curve = verify_seconds(t, 0, W, reps=15)
res = {"built_s": round(built), "curve_ms": {w: round(s * 1e3, 2) for w, s in curve.items()}}
print(json.dumps(res))
json.dump(res, open(os.path.join(out, "curve.json"), "w"))
