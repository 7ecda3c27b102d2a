"""Do the linears at width 32 hide their multiplies under the weight loads? The 30 SmolLM2-shaped layers of
amx_prefetch_sweep.py (torch's template, no prefetch), compiled with freezing and max-autotune, timed
with weights of their own per layer (streamed from memory) and, with HOT=1, one layer's weights shared
by all 30 (hot in L3); NOHEAD=1 leaves out the LM head. Medians in ms (5 rounds of 9 forwards).
Run on a fresh TORCHINDUCTOR_CACHE_DIR: HOT=1 NOHEAD=1 python results/smollm2-cpu-xeon-profile-v3/hot_cold_probe.py max-autotune 1,8,32"""
import sys, time, statistics, os, torch
import torch.nn.functional as F
from torch import nn
torch.set_num_threads(2)
import torch._inductor.config as ic
ic.freezing = True
ic.autotune_num_choices_displayed = 0
mode = sys.argv[1]; widths = [int(w) for w in sys.argv[2].split(",")]
if len(sys.argv) > 3: ic.max_autotune_gemm_backends = sys.argv[3]
class Stack(nn.Module):
    def __init__(s):
        super().__init__()
        P = lambda *sh: nn.Parameter(torch.randn(*sh, dtype=torch.bfloat16) * 0.02, requires_grad=False)
        L = 1 if os.environ.get("HOT") else 30
        s.qkv = nn.ParameterList([P(960, 576) for _ in range(L)])
        s.o = nn.ParameterList([P(576, 576) for _ in range(L)])
        s.gu = nn.ParameterList([P(3072, 576) for _ in range(L)])
        s.d = nn.ParameterList([P(576, 1536) for _ in range(L)])
        s.head = P(49152, 576)
    def forward(s, h):
        for j in range(30):
            i = 0 if os.environ.get('HOT') else j
            h = h + F.linear(F.linear(h, s.qkv[i])[:, :576], s.o[i])
            g, u = F.linear(h, s.gu[i]).chunk(2, -1)
            h = h + F.linear(F.silu(g) * u, s.d[i])
        return F.linear(h, s.head) if not os.environ.get('NOHEAD') else h
m = Stack().eval()
f = torch.compile(m, fullgraph=True, mode=None if mode == "default" else "max-autotune-no-cudagraphs") if mode != "none" else m
xs = {w: torch.randn(w, 576, dtype=torch.bfloat16) for w in widths}
with torch.inference_mode():
    for w in widths:
        t = time.perf_counter(); f(xs[w]); print("compile", w, round(time.perf_counter() - t), flush=True)
    res = {w: [] for w in widths}
    for rep in range(5):
        for w in widths:
            ts = []
            for _ in range(9):
                t = time.perf_counter(); f(xs[w]); ts.append(time.perf_counter() - t)
            res[w].append(statistics.median(ts) * 1e3)
print(mode, sys.argv[3:] , {w: round(statistics.median(v), 2) for w, v in res.items()}, flush=True)
