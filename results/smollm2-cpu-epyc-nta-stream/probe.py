"""Our linear kernel alone: SmolLM2's 120 layer GEMMs (202 MB, random bfloat16 weights) streamed or
not, each pass followed by a Kangaroo-sized draft step (2 layers' GEMMs and 4096 head rows, 19 MB,
never streamed) read twice, as a round reads them after its verification.

    python results/smollm2-cpu-epyc-nta-stream/probe.py   (alone on the machine, ~1 min)

Per rows M: the pass's ms, then the draft step's ms right after it and once more (the median of 15
interleaved rounds, 2 threads).
"""
import statistics, time

import torch

from specharness.model.accel import narrow_attention, narrow_linear

torch.set_num_threads(2)
assert narrow_attention.loaded() and narrow_linear.available(torch.device("cpu")), narrow_attention.reason()
op = torch.ops.specharness.narrow_linear
layer = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
W = [narrow_linear.pack(torch.randn(n, k).bfloat16()) for n, k in layer * 30]
D = [narrow_linear.pack(torch.randn(n, k).bfloat16()) for n, k in layer * 2 + layer[:2] + [(4096, 576)]]
xs = {M: {k: torch.randn(M, k).bfloat16() for k in (576, 1536)} for M in (1, 2, 4, 8)}


def run(ws, M, stream):
    start = time.perf_counter()
    for w in ws:
        op(xs[M][w.shape[1] * 2], w, None, stream)
    return (time.perf_counter() - start) * 1e3


print(f"# the pass: {sum(w.numel() for w in W) * 2 / 2**20:.0f} MB; the draft step: {sum(w.numel() for w in D) * 2 / 2**20:.0f} MB; "
      f"torch {torch.__version__}, {torch.get_num_threads()} threads")
res: dict = {}
for _ in range(15):
    for M in (1, 2, 4, 8):
        for stream in (False, True):
            res.setdefault((M, stream), []).append((run(W, M, stream), run(D, 1, False), run(D, 1, False)))
for (M, stream), v in res.items():
    med = [statistics.median(x[i] for x in v) for i in range(3)]
    print(f"M={M} {'streamed' if stream else 'normal  '} pass {med[0]:5.2f} ms | draft step after it {med[1]:.3f} ms, again {med[2]:.3f} ms")
