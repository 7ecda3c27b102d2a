"""What torch's package runner (AOTICompiledModel.__call__: the call spec read and parsed every call)
costs beside graph_store.Package (specs parsed once), on packages a run built: each graph's forward at
context 256, interleaved, medians. Usage: python call_overhead.py GRAPHS_DIR (a store: $SPECHARNESS_CACHE/graphs)."""
import json, statistics, sys, time
from pathlib import Path
import torch
from specharness.model.graph_store import Package
torch.set_num_threads(2)
from specharness.model.accel import narrow_attention  # the packages call our attention op
narrow_attention.available(torch.device("cpu"), narrow_attention.HEAD_DIMS[0])
rows = []
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())
    a, b, head, capture, ids, skip, width, stack = eval(r["graph"])
    if width == "wide":
        continue
    layers = int(r["stack"].rsplit(",", 1)[1].strip(" )"))  # (eps, shape, cache layers)
    x = torch.zeros(width, dtype=torch.long) if ids else torch.zeros(width, 576, dtype=torch.bfloat16)
    ctx, slots = 256, 512
    args = (x, torch.arange(ctx, ctx + width), torch.arange(ctx, ctx + width), torch.zeros(width, ctx + width, dtype=torch.bfloat16),
            torch.zeros(layers, 3, slots, 64, dtype=torch.bfloat16), torch.zeros(layers, 3, slots, 64, dtype=torch.bfloat16))
    torchs = torch._inductor.aoti_load_package(str(f.with_suffix(".pt2")))
    rows.append((r["graph"][:48], args, {"torch runner": torchs, "Package": Package(torchs)}))
times = {(g, k): [] for g, _, fns in rows for k in fns}
with torch.inference_mode():
    for rep in range(41):
        for g, args, fns in rows:
            for k, fn in fns.items():
                t = time.perf_counter(); fn(*args); dt = time.perf_counter() - t
                if rep:
                    times[(g, k)].append(dt * 1e3)
for g, _, fns in rows:
    t0, t1 = (statistics.median(times[(g, k)]) for k in fns)
    print(f"{g:50s} torch runner {t0:7.3f} ms   Package {t1:7.3f} ms   saved {t0 - t1:6.3f} ms")
