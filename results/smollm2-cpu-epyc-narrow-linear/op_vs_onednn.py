"""The engine's narrow_linear op against oneDNN's prepacked linear over the model's GEMMs (30 layers x 4 shapes
and the 49152 x 576 LM head, random bfloat16 weights, cold), called from Python one by one, 2 threads.

    python results/smollm2-cpu-epyc-narrow-linear/op_vs_onednn.py   (alone on the machine, ~1 min)
"""
import time, statistics, torch, os
torch.set_num_threads(2)
from specharness.model.accel import narrow_attention, narrow_linear
assert narrow_attention.loaded()
op = torch.ops.specharness.narrow_linear
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
Ws = [[torch.randn(n, k).bfloat16() for n, k in shapes] for _ in range(30)]
P = [[narrow_linear.pack(w) for w in l] for l in Ws]
head = torch.randn(49152, 576).bfloat16(); Ph = narrow_linear.pack(head)
pk = [[torch.ops.mkldnn._reorder_linear_weight(w, None) for w in l] for l in Ws]
pkh = torch.ops.mkldnn._reorder_linear_weight(head, None)
def ours(M):
    xs = {k: torch.randn(M, k).bfloat16() for k in (576, 1536)}
    t = time.perf_counter()
    for l in P:
        for w in l: op(xs[w.shape[1] * 2], w, None)
    th = time.perf_counter()
    op(xs[576], Ph, None)
    return (th - t) * 1e3, (time.perf_counter() - th) * 1e3
def dnn(M):
    xs = {k: torch.randn(M, k).bfloat16() for k in (576, 1536)}
    t = time.perf_counter()
    for l, lw in zip(pk, Ws):
        for p, w in zip(l, lw): torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")
    th = time.perf_counter()
    torch.ops.mkldnn._linear_pointwise(xs[576], pkh, None, "none", [], "")
    return (th - t) * 1e3, (time.perf_counter() - th) * 1e3
for M in (1, 2, 4, 8, 16):
    a, b = [], []
    for _ in range(15):
        a.append(ours(M)); b.append(dnn(M))
    med = lambda v, i: statistics.median(x[i] for x in v)
    print(f"M={M:2d} ours layers {med(a,0):.2f} head {med(a,1):.2f} ms | onednn layers {med(b,0):.2f} head {med(b,1):.2f} ms")
