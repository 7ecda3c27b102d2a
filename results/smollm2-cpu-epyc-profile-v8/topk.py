import torch, time, statistics
torch.set_num_threads(2)
x = torch.randn(8, 49152).to(torch.bfloat16)
x1 = x[:1].clone()
rows = torch.randperm(49152)[:8192]
def b(name, f, n=300):
    for _ in range(10): f()
    ts=[]
    for _ in range(n):
        t0=time.perf_counter(); f(); ts.append(time.perf_counter()-t0)
    print(f"{name}: {1e6*statistics.median(ts):.0f} us")
b("topk8", lambda: x.topk(8, dim=-1).indices)
b("index_select 8192 + topk", lambda: x.index_select(-1, rows).topk(8, dim=-1).indices)
b("index_select 8192", lambda: x.index_select(-1, rows))
b("argmax 1 row", lambda: x1.argmax(-1))
b("argmax 8 rows", lambda: x.argmax(-1))
from specharness.model.layers import argmax
b("harness argmax 8 rows", lambda: argmax(x))
b("harness argmax 1 row", lambda: argmax(x1))
