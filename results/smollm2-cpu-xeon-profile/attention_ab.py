"""A/B of attention kernels on this Xeon: 30 layers of SmolLM2's attention shapes (9 query heads,
3 key/value heads, d 64) compiled by inductor, bfloat16 q/k/v, median ms of 30 calls, plus each
variant's largest output gap to the first.

- bf16-bmm: bfloat16 cache, two bmm per layer at every width (the engine at 6b35023)
- bf16-sdpa: bfloat16 cache, SDPA (q as [Hkv, g*T, d], the bool mask repeated per group)
- bf16-fused: bfloat16 cache, q.k and p.v as multiply-and-sum, fused by inductor into loops
- engine: ``specharness.target.attend`` with the float32 cache the engine allocates on CPU
  (fused loops at one position, float32 bmm wider)

Run: python results/smollm2-cpu-xeon-profile/attention_ab.py > results/smollm2-cpu-xeon-profile/attention_ab.txt"""
import statistics, subprocess, time, torch, torch.nn.functional as F
import torch._dynamo
from specharness.kernels import cpu_name
from specharness.target import attend
torch.set_num_threads(2)
torch._dynamo.config.recompile_limit = torch._dynamo.config.cache_size_limit = 64


def split(q, k, v, k_cache, v_cache, slots, mask):
    k_cache.index_copy_(1, slots, k); v_cache.index_copy_(1, slots, v)
    H, T, d = q.shape; Hkv, n = k_cache.shape[0], mask.shape[-1]
    return q, k_cache[:, :n], v_cache[:, :n], H, T, d, Hkv, n, H // Hkv


def bf16_bmm(*args):
    q, kc, vc, H, T, d, Hkv, n, g = split(*args)
    s = torch.bmm(q.reshape(Hkv, g * T, d), kc.transpose(1, 2)).float() * d ** -0.5
    p = torch.softmax(s.view(Hkv, g, T, n).masked_fill(~args[-1], float("-inf")), dim=-1).to(q.dtype)
    return torch.bmm(p.view(Hkv, g * T, n), vc).view(H, T, d).transpose(0, 1).reshape(T, H * d)


def bf16_sdpa(*args):
    q, kc, vc, H, T, d, Hkv, n, g = split(*args)
    m = args[-1].unsqueeze(0).expand(g, T, n).reshape(g * T, n)
    o = F.scaled_dot_product_attention(q.reshape(Hkv, g * T, d), kc, vc, attn_mask=m)
    return o.view(H, T, d).transpose(0, 1).reshape(T, H * d)


def bf16_fused(*args):
    q, kc, vc, H, T, d, Hkv, n, g = split(*args)
    s = (q.reshape(Hkv, g * T, 1, d).float() * kc.unsqueeze(1).float()).sum(-1) * d ** -0.5
    p = torch.softmax(s.view(Hkv, g, T, n).masked_fill(~args[-1], float("-inf")), dim=-1).view(Hkv, g * T, n, 1)
    return (p * vc.unsqueeze(1).float()).sum(-2).to(q.dtype).view(H, T, d).transpose(0, 1).reshape(T, H * d)


VARIANTS = (("bf16-bmm", bf16_bmm, torch.bfloat16), ("bf16-sdpa", bf16_sdpa, torch.bfloat16),
            ("bf16-fused", bf16_fused, torch.bfloat16), ("engine", attend, torch.float32))
H, Hkv, d, L = 9, 3, 64, 30
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} commit {commit}, 2 threads, {cpu_name()}, torch {torch.__version__}")
for ctx in (256, 1024):
    for T in (1, 8):
        torch.manual_seed(0)
        kc = [torch.randn(Hkv, ctx + 128, d, dtype=torch.bfloat16) for _ in range(L)]
        vc = [torch.randn(Hkv, ctx + 128, d, dtype=torch.bfloat16) for _ in range(L)]
        q, k, v = (torch.randn(h, T, d, dtype=torch.bfloat16) for h in (H, Hkv, Hkv))
        slots = torch.arange(ctx, ctx + T)
        mask = torch.ones(T, ctx + T, dtype=torch.bool)
        mask[:, ctx:] = torch.tril(torch.ones(T, T, dtype=torch.bool))
        res = {}
        for name, fn, cache_dtype in VARIANTS:
            kcs, vcs = [x.to(cache_dtype) for x in kc], [x.to(cache_dtype) for x in vc]
            def layers(q, k, v, slots, mask, kcs=kcs, vcs=vcs, fn=fn):
                return [fn(q, k, v, kcs[i], vcs[i], slots, mask) for i in range(L)]
            compiled = torch.compile(layers, dynamic=False)
            with torch.inference_mode():
                out = compiled(q, k, v, slots, mask)
                times = []
                for _ in range(30):
                    started = time.perf_counter(); compiled(q, k, v, slots, mask); times.append((time.perf_counter() - started) * 1e3)
            res[name] = (statistics.median(times), out[0].float())
        first = next(iter(res.values()))[1]
        print(f"ctx {ctx} T {T}: " + ", ".join(f"{k} {ms:.2f} ms (gap {(o - first).abs().max().item():.4f})"
                                             for k, (ms, o) in res.items()), flush=True)
