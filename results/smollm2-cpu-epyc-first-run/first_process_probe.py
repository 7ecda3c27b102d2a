"""First-process slowness probe (run three times in a row with a fresh SPECHARNESS_CACHE holding only the converted
model: first, second, third; output in first_process_probe.txt): process 'first' builds the engine check's graphs (fresh store), then
times vanilla's step with the handles it loaded right after the build ('built') and with the same
packages loaded again ('reloaded'), interleaved; a later process loads them and times the same."""
import statistics, sys, time
import torch
torch.set_num_threads(2)
from specharness.engine_options import EngineOptions
from specharness.model import TargetModel
from specharness.model.engine_choice import apply, step_ms
from specharness.model.graph_store import GraphStore

which = sys.argv[1]
t0 = time.perf_counter()
target = TargetModel.load("smollm2", "bfloat16", "cpu", options=EngineOptions())
apply(target, "max-autotune")
b = target.backend
print(which, f"apply {time.perf_counter() - t0:.0f} s; built {len(b.store.built)} loaded {len(b.store.loaded)}; "
      f"narrowest {b.narrowest}", flush=True)
step_ms(target, context=256, width=1, repeats=3)  # warm
built = dict(b.packages)
paths = {id(build.package): build.path for build in b.store.builds}  # packages this process built
reloaded = {k: GraphStore._open(paths[id(pkg)]) if id(pkg) in paths else pkg for k, pkg in built.items()}
print(which, "reloaded", sum(1 for k in built if reloaded[k] is not built[k]), "of", len(built), flush=True)
res = {"built": [], "reloaded": []}
for r in range(12):
    for name in (("built", "reloaded") if r % 2 == 0 else ("reloaded", "built")):
        b.packages.update(built if name == "built" else reloaded)
        res[name].append(step_ms(target, context=256, width=1, repeats=9))
for name, v in res.items():
    print(which, name, f"median {statistics.median(v):.2f} ms; rounds {' '.join(f'{x:.1f}' for x in v)}", flush=True)
