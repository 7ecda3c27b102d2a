"""Full-model A/B of attention kernels for forwards wider than one position (one position keeps
attend's fused loop): each variant is its own TargetModel, bfloat16 max-autotune, compiled with
``specharness.target.attend`` swapped (the global is set before each call, so each keeps its own
graphs); widths 1, 8 and 32 at one context, 5 interleaved rounds of 7 forwards, medians in ms.

- engine: attend as committed (float32 cache, two float32 bmm)
- bf16-bmm: the float32 cache's slices converted to bfloat16, two bfloat16 bmm (branch wide-attention)
- f32-sdpa / bf16-sdpa: SDPA over [kv heads, group * T, d], the bool mask repeated per group

Run: python results/smollm2-cpu-xeon-profile/wide_ab.py engine,bf16-bmm,f32-sdpa 256 (about 12 minutes)"""
import statistics, subprocess, sys, time, torch, torch.nn.functional as F
torch.set_num_threads(2)
from specharness import kernels, target as tm
from specharness.kernels import cpu_name
from specharness.target import TargetModel
base = tm.attend

def wide(kind):
    def fn(q, k, v, k_cache, v_cache, slots, mask):
        T = q.shape[1]
        if T == 1:
            return base(q, k, v, k_cache, v_cache, slots, mask)
        out_dtype = q.dtype
        k_cache.index_copy_(1, slots, k.to(k_cache.dtype)); v_cache.index_copy_(1, slots, v.to(v_cache.dtype))
        H, T, d = q.shape; Hkv, n = k_cache.shape[0], mask.shape[-1]; g = H // Hkv
        work = out_dtype if kind.startswith("bf16") else k_cache.dtype
        keys, values = k_cache[:, :n].to(work), v_cache[:, :n].to(work)
        qq = q.to(work).reshape(Hkv, g * T, d)
        if kind.endswith("sdpa"):
            m = mask.unsqueeze(0).expand(g, T, n).reshape(g * T, n)
            o = F.scaled_dot_product_attention(qq, keys, values, attn_mask=m)
        else:
            s = torch.bmm(qq, keys.transpose(1, 2)).float() * d ** -0.5
            p = torch.softmax(s.view(Hkv, g, T, n).masked_fill(~mask, float("-inf")), dim=-1).to(work)
            o = torch.bmm(p.view(Hkv, g * T, n), values)
        return o.view(H, T, d).transpose(0, 1).reshape(T, H * d).to(out_dtype)
    return fn

kinds = sys.argv[1].split(",")
fns = {k: base if k == "engine" else wide(k) for k in kinds}
ctx = int(sys.argv[2]) if len(sys.argv) > 2 else 256
widths = (1, 8, 32)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} commit {commit}, 2 threads, {cpu_name()}, torch {torch.__version__}")
models = {}
for kind in kinds:
    tm.attend = fns[kind]
    t = TargetModel.load("smollm2", "bfloat16"); kernels.apply(t, "max-autotune"); t.expect_widths(32)
    s = time.time()
    for w in widths: kernels.step_ms(t, context=ctx, width=w, repeats=1)
    print(kind, "compiled", round(time.time() - s), "s", flush=True)
    models[kind] = t
res = {(k, w): [] for k in kinds for w in widths}
for rep in range(5):
    for k in kinds:
        tm.attend = fns[k]
        for w in widths:
            res[k, w].append(kernels.step_ms(models[k], context=ctx, width=w, repeats=7))
for k in kinds:
    m = {w: statistics.median(res[k, w]) for w in widths}
    print(f"ctx {ctx} {k}: " + ", ".join(f"W{w} {m[w]:.2f}" for w in widths) + f"  8/1 {m[8]/m[1]:.2f} 32/1 {m[32]/m[1]:.2f}", flush=True)
