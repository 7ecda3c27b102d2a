"""Attention alone, A/B of its kernels: 30 SmolLM2-shaped layers of attention (9 query heads over 3
key/value heads of 64, a cache of 1100 slots per layer, a causal bias over the last T of n slots),
compiled max-autotune with freezing, 2 threads; 7 interleaved rounds of 20 calls, medians in ms.
Variants: fp32 (two float32 bmm over a float32 cache: the engine's wide kernel before v4); bf16 (the
same over a bfloat16 cache, bmm on inductor's AMX template); fp32x6 (float32 bmm split into 6
batches for 2 threads); sdpa32 / sdpa16 (SDPA over a float32 / bfloat16 cache, its own grouped heads); sdpa16f (SDPA over a
bfloat16 cache, each group's query heads folded into the rows of one head: the engine's kernel);
sdpa16c (SDPA in bfloat16 over a float32 cache, slices converted per call); fused32 / fused16 (the
one-position multiply-and-sum over a float32 / bfloat16 cache).
python results/smollm2-cpu-xeon-profile-v4/attention_ab.py T n variant,variant,...  (PROF=1 adds a
per-kernel profile)"""
import sys, time, os, torch, torch.nn.functional as F
torch.set_num_threads(2)
import torch._inductor.config as ic
ic.freezing = True
if os.environ.get("PROF"): ic.cpp.enable_kernel_profile = True
ic.autotune_num_choices_displayed = 0
T, n = int(sys.argv[1]), int(sys.argv[2]); variants = sys.argv[3].split(",")
H, Hkv, d, L = 9, 3, 64, 30
g = H // Hkv
torch.manual_seed(0)
def make(dt):
    return ([torch.randn(Hkv, 1100, d).to(dt) for _ in range(L)], [torch.randn(Hkv, 1100, d).to(dt) for _ in range(L)])
qs = [torch.randn(H, T, d) for _ in range(L)]
bias = torch.zeros(T, n); bias[:, n - T:] = torch.triu(torch.full((T, T), float("-inf")), 1)

def bmm_attn(qs, ks, vs, bias, dt):
    outs = []
    for q, kc, vc in zip(qs, ks, vs):
        keys, values = kc[:, :n], vc[:, :n]
        q = q.to(dt)
        s = torch.bmm(q.reshape(Hkv, g * T, d), keys.transpose(1, 2)).float() * d ** -0.5
        p = torch.softmax(s.view(Hkv, g, T, n) + bias, dim=-1).to(dt)
        outs.append(torch.bmm(p.view(Hkv, g * T, n), values).float().view(H, T, d))
    return outs

def bmm6(qs, ks, vs, bias, dt):
    outs = []
    for q, kc, vc in zip(qs, ks, vs):
        keys, values = kc[:, :n], vc[:, :n]
        qq = q.reshape(Hkv, 2, g * T // 2, d).reshape(2 * Hkv, g * T // 2, d)
        kk = keys.unsqueeze(1).expand(Hkv, 2, n, d).reshape(2 * Hkv, n, d)
        vv = values.unsqueeze(1).expand(Hkv, 2, n, d).reshape(2 * Hkv, n, d)
        s = torch.bmm(qq, kk.transpose(1, 2)) * d ** -0.5
        p = torch.softmax(s.view(Hkv, g, T, n) + bias, dim=-1)
        outs.append(torch.bmm(p.view(2 * Hkv, g * T // 2, n), vv).view(H, T, d))
    return outs

def sdpa(qs, ks, vs, bias, dt):
    outs = []
    for q, kc, vc in zip(qs, ks, vs):
        keys, values = kc[:, :n], vc[:, :n]
        outs.append(F.scaled_dot_product_attention(q.to(dt).unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0), attn_mask=bias.to(dt), enable_gqa=True).squeeze(0).float())
    return outs

def sdpa_c(qs, ks, vs, bias, dt):
    outs = []
    for q, kc, vc in zip(qs, ks, vs):
        keys, values = kc[:, :n].to(torch.bfloat16), vc[:, :n].to(torch.bfloat16)
        outs.append(F.scaled_dot_product_attention(q.to(torch.bfloat16).unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0), attn_mask=bias.to(torch.bfloat16), enable_gqa=True).squeeze(0).float())
    return outs

def fused1(qs, ks, vs, bias, dt):
    outs = []
    for q, kc, vc in zip(qs, ks, vs):
        keys, values = kc[:, :n].float(), vc[:, :n].float()
        qq = q.reshape(Hkv, g, d)
        p = torch.softmax((qq.unsqueeze(2) * keys.unsqueeze(1)).sum(-1) * d ** -0.5 + bias, dim=-1)
        outs.append((p.unsqueeze(-1) * values.unsqueeze(1)).sum(-2).reshape(1, H * d))
    return outs

def sdpa_fold(qs, ks, vs, bias, dt):
    outs = []
    bb = bias.to(dt).repeat(g, 1)
    for q, kc, vc in zip(qs, ks, vs):
        keys, values = kc[:, :n], vc[:, :n]
        o = F.scaled_dot_product_attention(q.to(dt).reshape(1, Hkv, g * T, d), keys.unsqueeze(0), values.unsqueeze(0), attn_mask=bb)
        outs.append(o.reshape(H, T, d).float())
    return outs

fns = {"sdpa16f": (sdpa_fold, torch.bfloat16), "sdpa16c": (sdpa_c, torch.float32), "fused32": (fused1, torch.float32), "fused16": (fused1, torch.bfloat16), "fp32": (bmm_attn, torch.float32), "bf16": (bmm_attn, torch.bfloat16), "fp32x6": (bmm6, torch.float32),
       "sdpa32": (sdpa, torch.float32), "sdpa16": (sdpa, torch.bfloat16)}
compiled, data = {}, {}
ref = None
for v in variants:
    f, dt = fns[v]
    ks, vs = make(dt)
    c = torch.compile(lambda qs, ks, vs, b, f=f, dt=dt: f(qs, ks, vs, b, dt), mode="max-autotune-no-cudagraphs", fullgraph=True)
    t0 = time.time(); out = c(qs, ks, vs, bias); print(v, "compile", round(time.time() - t0, 1), "s", flush=True)
    compiled[v], data[v] = c, (ks, vs)
for r in range(7):
    for v in variants:
        ks, vs = data[v]
        for _ in range(3): compiled[v](qs, ks, vs, bias)
        ts = []
        for _ in range(20):
            t0 = time.perf_counter(); compiled[v](qs, ks, vs, bias); ts.append(time.perf_counter() - t0)
        ts.sort(); data.setdefault(v + "_t", []).append(ts[len(ts) // 2] * 1e3)
for v in variants:
    t = sorted(data[v + "_t"]); print(f"{v}: median {t[len(t)//2]:.2f} ms  rounds {[round(x,2) for x in data[v+'_t']]}")
if os.environ.get("PROF"):
    from torch.profiler import profile
    for v in variants:
        ks, vs = data[v]
        with profile() as p:
            for _ in range(10): compiled[v](qs, ks, vs, bias)
        print(v); print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
