"""FlexAttention (inductor's CPU C++ template) against the engine's attend: 30 layers of SmolLM2's
attention shapes compiled as one graph, median ms of 30 calls, and each variant's largest output gap
to attend's. The block mask is built eagerly from the engine's bool mask (a mask_mod reading it);
its build time is printed too. The template reads sizes off the buffer under a view, so q goes in
as a computed 4-D tensor and the caches are 4-D buffers (a 3-D cache unsqueezed fails to lower).

Run: python results/smollm2-cpu-xeon-profile/flex_ab.py > results/smollm2-cpu-xeon-profile/flex_ab.txt"""
import statistics, time, torch, torch.nn.functional as F
import torch._dynamo
from torch.nn.attention.flex_attention import flex_attention, create_block_mask
from specharness.target import attend
torch.set_num_threads(2)
torch._dynamo.config.recompile_limit = torch._dynamo.config.cache_size_limit = 64
H, Hkv, d, L = 9, 3, 64, 30

def flex_layers(q, k, v, slots, mask, block, kcs, vcs):
    out = []
    for i in range(L):
        # inductor's CPU template reads sizes off the buffer under a view, so q and the caches must be 4-D buffers
        kcs[i].index_copy_(2, slots, k.to(kcs[i].dtype).unsqueeze(0)); vcs[i].index_copy_(2, slots, v.to(vcs[i].dtype).unsqueeze(0))
        o = flex_attention((q.unsqueeze(0) * 1.0).to(kcs[i].dtype), kcs[i], vcs[i], block_mask=block, enable_gqa=True)
        out.append(o[0].transpose(0, 1).reshape(q.shape[1], H * d).to(q.dtype))
    return out

for ctx in (256, 1024):
    for T in (1, 8, 32):
        torch.manual_seed(0)
        S = ctx + 128
        kc = [torch.randn(Hkv, S, d) for _ in range(L)]; vc = [torch.randn(Hkv, S, d) for _ in range(L)]
        q, k, v = (torch.randn(h, T, d, dtype=torch.bfloat16) for h in (H, Hkv, Hkv))
        slots = torch.arange(ctx, ctx + T)
        mask = torch.zeros(T, S, dtype=torch.bool); mask[:, :ctx] = True
        mask[:, ctx:ctx + T] = torch.tril(torch.ones(T, T, dtype=torch.bool))
        res = {}
        def eng(q, k, v, slots, mask, kcs, vcs):
            return [attend(q, k, v, kcs[i], vcs[i], slots, mask[:, :ctx + T]) for i in range(L)]
        c = torch.compile(eng, dynamic=False)
        with torch.inference_mode():
            kcs, vcs = [x.clone() for x in kc], [x.clone() for x in vc]
            out = c(q, k, v, slots, mask, kcs, vcs); ts = []
            for _ in range(30):
                s0 = time.perf_counter(); c(q, k, v, slots, mask, kcs, vcs); ts.append((time.perf_counter() - s0) * 1e3)
        res["engine"] = (statistics.median(ts), out[0].float())
        for name, dt in (("flex-bf16", torch.bfloat16), ("flex-f32", torch.float32)):
            try:
                cf = torch.compile(flex_layers, dynamic=False)
                with torch.inference_mode():
                    kcs, vcs = [x.to(dt).unsqueeze(0).contiguous() for x in kc], [x.to(dt).unsqueeze(0).contiguous() for x in vc]
                    def make():
                        return create_block_mask(lambda b, h, qi, kv: mask[qi, kv], None, None, T, S, device="cpu")
                    s0 = time.perf_counter(); block = make(); mk = (time.perf_counter() - s0) * 1e3
                    out = cf(q, k, v, slots, mask, block, kcs, vcs); ts = []
                    for _ in range(30):
                        s0 = time.perf_counter(); cf(q, k, v, slots, mask, block, kcs, vcs); ts.append((time.perf_counter() - s0) * 1e3)
                res[name] = (statistics.median(ts), out[0].float())
                print(f"  ({name} block mask eager: {mk:.2f} ms)")
            except Exception as e:
                print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        first = res["engine"][1]
        print(f"ctx {ctx} T {T}: " + ", ".join(f"{n} {ms:.2f} ms (gap {(o - first).abs().max().item():.4f})" for n, (ms, o) in res.items()), flush=True)
