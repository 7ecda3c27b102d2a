"""The engine's additive float bias (made before the compiled graph) against its bool mask (inductor
selected under it in every layer's softmax loop) in the full model: two targets, bfloat16
max-autotune, widths 1, 8, 32 at one context, 5 interleaved rounds of 7 forwards, medians in ms.
The bool-mask target is target.py of 7f82765, copied in for the run:
git show 7f82765:specharness/target.py > specharness/_target_old.py
python results/smollm2-cpu-xeon-profile/bias_ab.py 256; rm specharness/_target_old.py"""
import statistics, subprocess, sys, time, torch
torch.set_num_threads(2)
from specharness import kernels
from specharness.kernels import cpu_name
from specharness.target import TargetModel
from specharness._target_old import TargetModel as OldTarget
ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 256
widths = (1, 8, 32)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} commit {commit}, 2 threads, {cpu_name()}, torch {torch.__version__}", flush=True)
models = {}
for name, cls in (("bool mask", OldTarget), ("additive bias", TargetModel)):
    t = cls.load("smollm2", "bfloat16"); kernels.apply(t, "max-autotune"); t.expect_widths(32)
    for w in widths: kernels.step_ms(t, context=ctx, width=w, repeats=1)
    models[name] = t
res = {(k, w): [] for k in models for w in widths}
for rep in range(5):
    for k, t in models.items():
        for w in widths:
            res[k, w].append(kernels.step_ms(t, context=ctx, width=w, repeats=7))
for k in models:
    m = {w: statistics.median(res[k, w]) for w in widths}
    print(f"ctx {ctx} {k}: " + ", ".join(f"W{w} {m[w]:.2f}" for w in widths) + f"  8/1 {m[8]/m[1]:.2f} 32/1 {m[32]/m[1]:.2f}", flush=True)
