"""Why the engine adds a float bias rather than selecting under a bool mask: one layer's softmax of
width-32 scores ([3 kv heads, 3 * 32 rows, 288 slots], float32) compiled by inductor and eager, median
microseconds of 200 calls (a compiled call includes ~20 us of guard and wrapper overhead).

Run: python results/smollm2-cpu-xeon-profile/softmax_ab.py > results/smollm2-cpu-xeon-profile/softmax_ab.txt"""
import subprocess
import torch, time, statistics
torch.set_num_threads(2)
Hkv, g, T, n, d = 3, 3, 32, 288, 64
s = torch.randn(Hkv, g*T, n)
mask = torch.ones(T, n, dtype=torch.bool)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} commit {commit}, 2 threads, torch {torch.__version__}")
def tm(f, n=200):
    for _ in range(20): f()
    ts = []
    for _ in range(n):
        st = time.perf_counter(); f(); ts.append(time.perf_counter() - st)
    return statistics.median(ts) * 1e6
variants = {
 "softmax only": lambda s, m: torch.softmax(s, -1),
 "exp only": lambda s, m: torch.exp(s),
 "scale+mask+softmax": lambda s, m: torch.softmax((s * 0.125).view(Hkv, g, T, n).masked_fill(~m, float("-inf")), dim=-1),
 "additive mask": lambda s, m: torch.softmax((s * 0.125).view(Hkv, g, T, n) + m, dim=-1),
}
madd = torch.zeros(T, n)
for k, f in variants.items():
    c = torch.compile(f, dynamic=False)
    mm = madd if k == "additive mask" else mask
    c(s, mm)
    print(f"{k}: compiled {tm(lambda: c(s, mm)):.1f} us, eager {tm(lambda: f(s, mm)):.1f} us", flush=True)
