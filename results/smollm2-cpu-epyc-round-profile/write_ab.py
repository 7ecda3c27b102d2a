"""Same-process A/B of the K/V cache write, interleaved: one tensor for all layers written by index
(new, fbb2029) against one buffer per layer (old). Both compile in one process, so max-autotune's
GEMM choices (cached per shape in the process) are the same for both: only the write differs.
Run (repository root at 609f95f):
  mkdir /tmp/abtree && git archive HEAD | tar -x -C /tmp/abtree
  patch -p1 -d /tmp/abtree < results/smollm2-cpu-epyc-round-profile/write_ab.patch   # KVCache(separate=True)
  python results/smollm2-cpu-epyc-round-profile/write_ab.py max-autotune > write_ab.txt"""
import sys, time, statistics, torch
sys.path.insert(0, "/tmp/abtree")
import specharness; assert specharness.__file__.startswith("/tmp/abtree")
from specharness.model import TargetModel, KVCache
mode = sys.argv[1]
torch.set_num_threads(2)
t = TargetModel.load(dtype="bfloat16"); t.compile(mode); t.expect_widths(8)
print("narrowest", t.backend.narrowest, flush=True)
with torch.inference_mode():
    new = t.new_cache(512)
    old = KVCache(t.n_layers, t.n_kv_heads, t.head_dim, 512, t.kv_dtype, t.device, separate=True)
    for buf in (*old.k, *old.v): torch._dynamo.mark_dynamic(buf, 1)
    caches = {"old": old, "new": new}
    cases = {"shallow w1": (torch.tensor([5]), 0, 2, False), "full w1": (torch.tensor([5]), 0, 30, True),
             "full w8": (torch.arange(8) + 5, 0, 30, True), "deep w2": (torch.zeros(2, 576, dtype=torch.bfloat16), 2, 30, True)}
    s0 = time.time()
    for c in caches.values():
        c.lengths[:] = [150] * t.n_layers
        for x, a, b, head in cases.values():
            for _ in range(3): t.forward(x, c, 150, a, b, head=head)
    print(f"compiled in {time.time() - s0:.0f} s", flush=True)
    res = {}
    for rep in range(30):
        for k, (x, a, b, head) in cases.items():
            for cn, c in (caches.items() if rep % 2 else reversed(caches.items())):
                s = time.perf_counter()
                for _ in range(4): t.forward(x, c, 150, a, b, head=head)
                res.setdefault((k, cn), []).append((time.perf_counter() - s) / 4 * 1e3)
    for k in cases:
        o, n = statistics.median(res[(k, "old")]), statistics.median(res[(k, "new")])
        diffs = sorted(a - b for a, b in zip(res[(k, "new")], res[(k, "old")]))
        print(f"{mode} {k}: old {o:.3f} ms, new {n:.3f} ms, paired new-old median {statistics.median(diffs):+.3f} "
              f"[{diffs[len(diffs)//4]:+.3f}, {diffs[3*len(diffs)//4]:+.3f}] (quartiles)", flush=True)
