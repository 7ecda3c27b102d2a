"""Which child difference makes slower packages: build width-8 in a child under inference_mode vs plain
(each its own inductor cache), and in-process from a saved+loaded program; timed interleaved."""
import os, sys, time, statistics, json, subprocess
from pathlib import Path
os.environ["SPECHARNESS_CACHE"] = "/tmp/ser/cache"
import torch
torch.set_num_threads(2)
import specharness.model.graph_store as gs
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
R = Path("/tmp/ser/exp4"); pk = {}
def store(name):
    s = gs.GraphStore("max-autotune", {}, root=R / name); s.env = st.env; os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(R / name / "ind"); return s
with torch.inference_mode():
    s = store("child_plain"); pk["child_plain"] = s.get(key, m.backend.stack, args(), fixed, False)
    os.environ["SPECHARNESS_BUILD_INFERENCE"] = "1"
    s = store("child_inference"); pk["child_inference"] = s.get(key, m.backend.stack, args(), fixed, False)
    del os.environ["SPECHARNESS_BUILD_INFERENCE"]
    # in-process, from a saved and loaded program
    from torch.export import Dim
    ctx, slots = Dim("context", min=2, max=gs.MAX_DIM), Dim("slots", min=2, max=gs.MAX_DIM)
    with torch.no_grad():
        prog = torch.export.export(gs._Graph(m.backend.stack, *fixed, False), gs.examples(args(), False), dynamic_shapes=({}, {}, {}, {1: ctx}, {2: slots}, {2: slots}), strict=True)
    torch.export.save(prog, "/tmp/ser/exp4/p.pt2"); prog = torch.export.load("/tmp/ser/exp4/p.pt2")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(R / "inproc_loaded" / "ind")
    torch._inductor.aoti_compile_and_package(prog, package_path="/tmp/ser/exp4/inproc_loaded.pt2", inductor_configs={"freezing": True, "cpp_wrapper": True, "max_autotune": True, "coordinate_descent_tuning": True})
    pk["inproc_loaded"] = torch._inductor.aoti_load_package("/tmp/ser/exp4/inproc_loaded.pt2")
    times = {k: [] for k in pk}
    for r in range(61):
        for k, fn in pk.items():
            a = args(); t = time.perf_counter(); fn(*a); dt = time.perf_counter() - t
            if r: times[k].append(dt * 1e3)
for k, v in times.items():
    print(k, f"{statistics.median(v):.2f} ms  (q1 {statistics.quantiles(v, n=4)[0]:.2f}, q3 {statistics.quantiles(v, n=4)[2]:.2f})")
