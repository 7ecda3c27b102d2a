"""The AVX2 kernel against oneDNN (bfloat16, emulated here) and float32 F.linear over SmolLM2-135M's GEMMs
(30 layers + the LM head, random weights), eagerly, interleaved, median of 7; and its rounding against
float32 sums. Run from the repository root: python results/smollm2-cpu-epyc-avx2-narrow-linear/op_vs_onednn.py"""
import os, time, torch, statistics, sys
import torch.nn.functional as F
from torch.utils import cpp_extension
torch.set_num_threads(2)
os.makedirs(os.environ.get("BUILD", "/tmp/narrow_linear_avx2"), exist_ok=True)
cpp_extension.load("nl_avx2", ["specharness/model/accel/csrc/narrow_linear_avx2.cpp"],
    extra_cflags=["-O3","-mavx2","-mfma","-fopenmp"], extra_ldflags=["-fopenmp"], build_directory=os.environ.get("BUILD", "/tmp/narrow_linear_avx2"), is_python_module=False)
from specharness.model.accel.narrow_linear import pack
# SmolLM2-135M shapes: per layer q,o 576x576; k,v 192x576; gate,up 1536x576; down 576x1536; head 49152x576
shapes=[(576,576)]*2+[(192,576)]*2+[(1536,576)]*2+[(576,1536)]
g=torch.Generator().manual_seed(0)
layers=[[torch.randn(n,k,generator=g).bfloat16()*0.05 for n,k in shapes] for _ in range(30)]
head=torch.randn(49152,576,generator=g).bfloat16()*0.05
allw=[w for l in layers for w in l]+[head]
packed=[pack(w) for w in allw]
wf=[w.float() for w in allw]
# correctness
for M in (1,2,3,5,8,11):
    x=torch.randn(M,576).bfloat16(); w=allw[4]; b=torch.randn(w.shape[0])
    ref=F.linear(x.float(),w.float(),b).bfloat16()
    out=torch.ops.specharness.narrow_linear(x,pack(w),b)
    d=(out.float()-ref.float()).abs().max().item()
    print("M",M,"maxdiff",d, "exact frac", (out==ref).float().mean().item())
def run(fn,M):
    xs={576:torch.randn(M,576).bfloat16(),1536:torch.randn(M,1536).bfloat16()}
    xf={k:v.float() for k,v in xs.items()}
    t=time.perf_counter()
    if fn=="ours":
        for w,p in zip(allw,packed): torch.ops.specharness.narrow_linear(xs[w.shape[1]],p,None)
    elif fn=="bf16":
        for w in allw: F.linear(xs[w.shape[1]],w)
    else:
        for w in wf: F.linear(xf[w.shape[1]],w)
    return time.perf_counter()-t
for M in (1,2,4,8,16):
    res={}
    for fn in ("ours","bf16","f32"):
        run(fn,M)
    ts={fn:[] for fn in ("ours","bf16","f32")}
    for i in range(7):
        for fn in ts: ts[fn].append(run(fn,M))
    print(M, {fn:round(statistics.median(v)*1e3,2) for fn,v in ts.items()}, flush=True)
