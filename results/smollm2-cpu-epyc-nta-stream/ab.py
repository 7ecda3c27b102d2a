"""The whole model with and without streamed weights (``EngineOptions.narrow_stream``): a verification
forward at each width, and a Kangaroo draft step (its own stack: 2 layers, adapter, 4096 head rows,
never streamed) right after it, as a round runs them.

    python results/smollm2-cpu-epyc-nta-stream/ab.py OUT.txt   (alone on the machine; ~10 min with cold graphs)

Both arms are built first (their verification graphs differ only in the prefetch hint), then timed
round-robin in one process: per round and arm, each width's forward at context 256 followed by one
draft step, 9 times, the median of each.
"""
import statistics, sys, time

import torch

from specharness.engine_ab import compiled_target
from specharness.engine_options import EngineOptions
from specharness.methods.kangaroo import drafter as kangaroo
from specharness.results import provenance
from specharness.model.engine_choice import cpu_name

torch.set_num_threads(2)
WIDTHS, ROUNDS, REPS, CTX = (2, 4, 8, 16), 7, 9, 256
out = open(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdout", "w")
arms = {"stream": EngineOptions(), "no-stream": EngineOptions(narrow_stream=False)}
targets = {n: compiled_target(n, o, widths=WIDTHS) for n, o in arms.items()}
drafters = {n: kangaroo.build(t, {}) for n, t in targets.items()}
res: dict = {}
with torch.inference_mode():
    state = {}
    for n, t in targets.items():
        d = drafters[n]
        d.cache = t.new_cache(CTX + 64, n_layers=d.exit_layer + 1)
        d.cache.lengths[:] = [CTX] * len(d.cache.lengths)
        state[n] = (t.new_cache(CTX + 32), d)
        d._step(100, CTX)  # builds or loads the step's graph
    for r in range(ROUNDS):
        for n, t in targets.items():
            cache, d = state[n]
            for w in WIDTHS:
                x = torch.zeros(w, dtype=torch.long)
                fw, st = [], []
                for _ in range(REPS):
                    cache.crop(0); cache.lengths[:] = [CTX] * len(cache.lengths)
                    s = time.perf_counter(); t.forward(x, cache, CTX, 0, head=True); m = time.perf_counter()
                    d.cache.crop(CTX); d._step(100, CTX); e = time.perf_counter()
                    fw.append(m - s); st.append(e - m)
                res.setdefault((n, w), []).append((statistics.median(fw) * 1e3, statistics.median(st) * 1e3))
head = provenance(model=targets["stream"].name, device="cpu", threads=torch.get_num_threads(), cpu=cpu_name(),
                  command="python results/smollm2-cpu-epyc-nta-stream/ab.py", widths=list(WIDTHS), rounds=ROUNDS,
                  repeats=REPS, context=CTX, arms={n: o.record() for n, o in arms.items()})
print(f"# {head}", file=out)
for (n, w), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    f = statistics.median(x[0] for x in v); s = statistics.median(x[1] for x in v)
    print(f"width {w:2d} {n:9s} forward {f:6.2f} ms  draft step after it {s:5.3f} ms  rounds {[round(x[0], 1) for x in v]} {[round(x[1], 2) for x in v]}", file=out)
out.close()
