"""Does building two graph packages at once (the first run's warm-up, one child per core) give slower
kernels than building one alone? max-autotune times its GEMM choices while the other child compiles on
the other core. The deep layers' width-4 verification graph (Kangaroo's, slow in run 7: 10.8 ms against
7.5 at width 2): 2 packages built by a child alone, one after the other, and 2 built by two children at
once; each with its own inductor cache (independent autotuning); then all four timed interleaved."""
import os, time, statistics
from pathlib import Path
os.environ.setdefault("SPECHARNESS_CACHE", "/tmp/ser/cache")
import torch
torch.set_num_threads(2)
from specharness.model import TargetModel
from specharness.model.backends import GraphKey
from specharness.model.graph_store import GraphStore
m = TargetModel.load(None, dtype="bfloat16")
m.compile("max-autotune")
st = m.backend.store
T, A, B = 4, 2, 30
kv = m.new_cache(512)
H = m.hidden_size
def args():
    return (torch.zeros(T, H, dtype=torch.bfloat16), torch.arange(256, 256 + T), torch.arange(256, 256 + T),
            torch.zeros(T, 256 + T, dtype=torch.bfloat16), kv.keys[:, :, :256 + T].contiguous(),
            kv.values[:, :, :256 + T].contiguous())
key = GraphKey(A, B, True, (), False, ((), ()), T, "")
fixed = (A, B, True, frozenset(), (frozenset(), frozenset()))
R = Path(f"/tmp/ser/pairs{int(time.time())}"); pk = {}
def store(name):
    s = GraphStore("max-autotune", {}, root=R / name, jobs=2); s.env = st.env
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(R / name / "ind"); return s
with torch.inference_mode():
    for i in (1, 2):
        t = time.time(); s = store(f"alone{i}"); b = s.start(key, m.backend.stack, args(), fixed, False, background=True)
        pk[f"alone{i}"] = s.wait(b); print(f"alone{i} {time.time() - t:.1f} s build", flush=True)
    t = time.time(); s1 = store("pair1"); b1 = s1.start(key, m.backend.stack, args(), fixed, False, background=True)
    s2 = store("pair2"); b2 = s2.start(key, m.backend.stack, args(), fixed, False, background=True)
    pk["pair1"], pk["pair2"] = s1.wait(b1), s2.wait(b2); print(f"pair {time.time() - t:.1f} s (two builds at once)", flush=True)
    times = {k: [] for k in pk}
    for r in range(81):
        for k, fn in pk.items():
            a = args(); t = time.perf_counter(); fn(*a); dt = time.perf_counter() - t
            if r: times[k].append(dt * 1e3)
for k, v in times.items():
    q = statistics.quantiles(v, n=4)
    print(f"{k} {statistics.median(v):.2f} ms  (q1 {q[0]:.2f}, q3 {q[2]:.2f})")
