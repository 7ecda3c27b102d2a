"""The sweep behind specharness/amx_prefetch.py: prefetch variants of the AMX GEMM micro-kernel on 30
layers of SmolLM2-shaped bfloat16 linears (qkv, o, gate/up, down) plus its LM head, each layer with
weights of its own (so they stream from memory as in the model), one module compiled (freezing,
max-autotune) per variant, timed interleaved: 7 rounds of 7 forwards per variant and width, medians
in ms. A variant is "base" (torch's template) or HINT:DIST, _mm_prefetch(_MM_HINT_HINT) of the weight
bytes DIST k-steps ahead in every kernel. Run on a fresh TORCHINDUCTOR_CACHE_DIR, nothing else on the
machine: python results/smollm2-cpu-xeon-profile-v3/amx_prefetch_sweep.py base,T0:4,T0:8,T1:8 1,8,32"""
import os, sys, time, statistics, torch
import torch.nn.functional as F
from torch import nn
torch.set_num_threads(2)
import torch._inductor.config as ic
import torch._inductor.graph  # noqa
from torch._inductor.codegen import cpp_micro_gemm as m
ic.freezing = True; ic.autotune_num_choices_displayed = 0; ic.max_autotune_report_choices_stats = False
ORIG = m.CppMicroGemmAMX.TEMPLATE_KERNEL
anchor = "    auto compute = [&](int k) {\n"
def variant(v):
    if v == "base": return ORIG
    hint, dist = v.split(":")
    pf = ("    auto compute = [&](int k) {\n        {\n"
          f"            const char* pf_base = reinterpret_cast<const char*>(B + (k + {dist} * {{{{block_k}}}}) * ldb);\n"
          "            const int64_t pf_bytes = {{block_k}} * ldb * sizeof({{input2_t}});\n"
          f"            for (int64_t pf_off = 0; pf_off < pf_bytes; pf_off += 64) _mm_prefetch(pf_base + pf_off, _MM_HINT_{hint});\n"
          "        }\n")
    return ORIG.replace(anchor, pf)
class Stack(nn.Module):
    def __init__(s):
        super().__init__()
        P = lambda *sh: nn.Parameter(torch.randn(*sh, dtype=torch.bfloat16) * 0.02, requires_grad=False)
        s.qkv = nn.ParameterList([P(960, 576) for _ in range(30)]); s.o = nn.ParameterList([P(576, 576) for _ in range(30)])
        s.gu = nn.ParameterList([P(3072, 576) for _ in range(30)]); s.d = nn.ParameterList([P(576, 1536) for _ in range(30)])
        s.head = P(49152, 576)
    def forward(s, h):
        for i in range(30):
            h = h + F.linear(F.linear(h, s.qkv[i])[:, :576], s.o[i])
            g, u = F.linear(h, s.gu[i]).chunk(2, -1)
            h = h + F.linear(F.silu(g) * u, s.d[i])
        return F.linear(h, s.head)
variants = sys.argv[1].split(","); widths = [int(w) for w in sys.argv[2].split(",")]
xs = {w: torch.randn(w, 576, dtype=torch.bfloat16) for w in widths}
fs = {}
with torch.inference_mode():
    for v in variants:
        m.CppMicroGemmAMX.TEMPLATE_KERNEL = variant(v)
        torch._dynamo.config.recompile_limit = 64; torch._dynamo.config.accumulated_recompile_limit = 256
        f = torch.compile(Stack().eval(), fullgraph=True, mode="max-autotune-no-cudagraphs")
        t = time.perf_counter()
        for w in widths: f(xs[w])
        print(v, "compiled", round(time.perf_counter() - t), flush=True)
        fs[v] = f
    m.CppMicroGemmAMX.TEMPLATE_KERNEL = ORIG
    res = {(v, w): [] for v in variants for w in widths}
    for rep in range(7):
        for v in variants:
            for w in widths:
                ts = []
                for _ in range(7):
                    t = time.perf_counter(); fs[v](xs[w]); ts.append(time.perf_counter() - t)
                res[v, w].append(statistics.median(ts) * 1e3)
    for v in variants:
        print(v, {w: round(statistics.median(res[v, w]), 2) for w in widths},
              "32/1", round(statistics.median(res[v, widths[-1]]) / statistics.median(res[v, widths[0]]), 3), flush=True)
