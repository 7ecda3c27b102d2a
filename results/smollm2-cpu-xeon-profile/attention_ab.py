"""A/B on this Xeon: the engine's attend (two bmm per layer) against an SDPA variant (q as [Hkv, g*T, d],
the bool mask repeated per group), 30 layers of SmolLM2's attention shapes compiled by inductor in
bfloat16, median of 30 calls, plus the largest output gap. Not wired into the engine (see README).
Run: python results/smollm2-cpu-xeon-profile/attention_ab.py > results/smollm2-cpu-xeon-profile/attention_ab.txt"""
import time, statistics, torch, torch.nn.functional as F
torch.set_num_threads(2)
from specharness.target import attend
def attend_sdpa(q, k, v, k_cache, v_cache, slots, mask):
    k_cache.index_copy_(1, slots, k); v_cache.index_copy_(1, slots, v)
    H, T, d = q.shape; Hkv, n = k_cache.shape[0], mask.shape[-1]; g = H // Hkv
    m = mask.unsqueeze(0).expand(g, T, n).reshape(g * T, n)
    o = F.scaled_dot_product_attention(q.reshape(Hkv, g * T, d), k_cache[:, :n], v_cache[:, :n], attn_mask=m)
    return o.view(H, T, d).transpose(0, 1).reshape(T, H * d)
H, Hkv, d, L = 9, 3, 64, 30
for ctx in (256, 1024):
  for T in (1, 8):
    slots = ctx + 128
    torch.manual_seed(0)
    kc = [torch.randn(Hkv, slots, d, dtype=torch.bfloat16) for _ in range(L)]; vc = [torch.randn(Hkv, slots, d, dtype=torch.bfloat16) for _ in range(L)]
    q = torch.randn(H, T, d, dtype=torch.bfloat16); k = torch.randn(Hkv, T, d, dtype=torch.bfloat16); v = torch.randn(Hkv, T, d, dtype=torch.bfloat16)
    sl = torch.arange(ctx, ctx + T); mask = torch.ones(T, ctx + T, dtype=torch.bool); mask[:, ctx:] = torch.tril(torch.ones(T, T, dtype=torch.bool))
    res = {}
    for name, fn in (("bmm", attend), ("sdpa", attend_sdpa)):
        def layers(q, k, v, sl, mask, kc=kc, vc=vc, fn=fn):
            return [fn(q, k, v, kc[i], vc[i], sl, mask) for i in range(L)]
        c = torch.compile(layers, dynamic=False)
        with torch.inference_mode():
            out = c(q, k, v, sl, mask)
            ts = []
            for _ in range(30):
                s = time.perf_counter(); c(q, k, v, sl, mask); ts.append((time.perf_counter() - s) * 1e3)
        res[name] = (statistics.median(ts), out[0].float())
    gap = (res["bmm"][1] - res["sdpa"][1]).abs().max().item()
    print(f"ctx {ctx} T {T}: bmm {res['bmm'][0]:.2f} ms, sdpa {res['sdpa'][0]:.2f} ms (30 layers), max gap {gap:.4f}", flush=True)
