"""A/B of AVX2 kernel sources in one process: each source is copied under its own op namespace, built,
checked against float32 sums, then timed interleaved over SmolLM2-135M's GEMMs (30 layers' 7 linears
and the LM head, random bfloat16 weights, one call each; median of 9 rounds, ms) at each row count.

    git show 8719538:specharness/model/accel/csrc/narrow_linear_avx2.cpp > /tmp/before.cpp
    MS=1,2,3,4,6,8,16 python results/smollm2-cpu-epyc-avx2-narrow-linear/register-blocking/kernel_ab.py \
        /tmp/before.cpp specharness/model/accel/csrc/narrow_linear_avx2.cpp

Run from the repository root, with nothing else busy: 2 threads, as a run's default. $MS picks the rows.
"""
import os, statistics, sys, tempfile, time
import torch
import torch.nn.functional as F
from torch.utils import cpp_extension

torch.set_num_threads(2)
from specharness.model.accel.narrow_linear import pack  # noqa: E402

HEADERS = os.path.abspath("specharness/model/accel/csrc")
ops = []
for i, source in enumerate(sys.argv[1:]):
    ns, build = f"ab{i}", tempfile.mkdtemp(prefix=f"kernel_ab{i}_")
    text = open(source).read().replace("(specharness,", f"({ns},")
    open(f"{build}/k{i}.cpp", "w").write(text)
    cpp_extension.load(f"k{i}", [f"{build}/k{i}.cpp"], extra_include_paths=[HEADERS],
                       extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp"], extra_ldflags=["-fopenmp"],
                       build_directory=build, is_python_module=False)
    ops.append(getattr(torch.ops, ns).narrow_linear)
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # the graphs fuse q/k/v and gate/up
g = torch.Generator().manual_seed(0)
weights = [torch.randn(n, k, generator=g).bfloat16() * 0.05 for _ in range(30) for n, k in shapes]
weights.append(torch.randn(49152, 576, generator=g).bfloat16() * 0.05)
packed = [pack(w) for w in weights]
for rows in (1, 3, 7):  # each source computes the float32 sums, rounded once
    x = torch.randn(rows, 576).bfloat16()
    want = F.linear(x.float(), weights[4].float())
    for i, op in enumerate(ops):
        got = op(x, packed[4], None).float()
        assert ((got - want).abs() <= want.abs().clamp_min(1e-3) * 2 ** -7).all(), (sys.argv[1 + i], rows)


def forward(op, xs) -> float:
    start = time.perf_counter()
    for w, p in zip(weights, packed):
        op(xs[w.shape[1]], p, None)
    return time.perf_counter() - start


print("rows", *sys.argv[1:], sep="\t")
for rows in [int(m) for m in os.environ.get("MS", "1,2,4,8,16").split(",")]:
    xs = {k: torch.randn(rows, k).bfloat16() for k in (576, 1536)}
    times = [[] for _ in ops]
    for op in ops:
        forward(op, xs)  # warm-up
    for _ in range(9):
        for i, op in enumerate(ops):
            times[i].append(forward(op, xs))
    print(rows, *(f"{statistics.median(t) * 1e3:.2f}" for t in times), sep="\t", flush=True)
