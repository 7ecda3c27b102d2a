"""Width-8 full-model packages: 2 built in-process (the store before b7fab65), 2 by a child alone, 2 by
two children at once; each with its own inductor cache (independent autotuning); timed interleaved."""
import os, sys, time, statistics, json, types
from pathlib import Path
os.environ["SPECHARNESS_CACHE"] = "/tmp/ser/cache"
import torch
torch.set_num_threads(2)
import specharness.model.graph_store as new_gs
src = open("/tmp/ser/old_gs_src.py").read().replace("from ..errors", "from specharness.errors").replace("from ..paths", "from specharness.paths").replace("from .accel", "from specharness.model.accel").replace("from .engine_choice", "from specharness.model.engine_choice")
old = types.ModuleType("old_gs"); old.__dict__["__file__"] = new_gs.__file__; exec(compile(src, "old_gs", "exec"), old.__dict__)
from specharness.model import TargetModel
from specharness.model.backends import GraphKey
m = TargetModel.load(None, dtype="bfloat16")
m.compile("max-autotune")
st = m.backend.store
T = 8
kv = m.new_cache(512)
def args():
    return (torch.zeros(T, dtype=torch.long), torch.arange(256, 256 + T), torch.arange(256, 256 + T),
            torch.zeros(T, 256 + T, dtype=torch.bfloat16), kv.keys[:, :, :256 + T].contiguous(), kv.values[:, :, :256 + T].contiguous())
key = GraphKey(0, 30, True, (), True, ((), ()), T, "")
fixed = (0, 30, True, frozenset(), (frozenset(), frozenset()))
R = Path("/tmp/ser/exp3"); pk = {}
def store(name, cls=new_gs.GraphStore):
    s = cls("max-autotune", {}, root=R / name); s.env = st.env; os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(R / name / "ind"); return s
with torch.inference_mode():
    for i in (1, 2):
        t = time.time(); s = store(f"inproc{i}", old.GraphStore); pk[f"inproc{i}"] = s.get(key, m.backend.stack, args(), fixed, False); print(f"inproc{i}", time.time() - t, flush=True)
    for i in (1, 2):
        t = time.time(); s = store(f"alone{i}"); pk[f"alone{i}"] = s.get(key, m.backend.stack, args(), fixed, False); print(f"alone{i}", time.time() - t, flush=True)
    t = time.time(); s1 = store("pair1"); b1 = s1.start(key, m.backend.stack, args(), fixed, False)
    s2 = store("pair2"); b2 = s2.start(key, m.backend.stack, args(), fixed, False)
    pk["pair1"], pk["pair2"] = s1.wait(b1), s2.wait(b2); print("pair", time.time() - t, flush=True)
    times = {k: [] for k in pk}
    for r in range(61):
        for k, fn in pk.items():
            a = args(); t = time.perf_counter(); fn(*a); dt = time.perf_counter() - t
            if r: times[k].append(dt * 1e3)
for k, v in times.items():
    print(k, f"{statistics.median(v):.2f} ms  (q1 {statistics.quantiles(v, n=4)[0]:.2f}, q3 {statistics.quantiles(v, n=4)[2]:.2f})")
