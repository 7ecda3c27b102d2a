"""The narrow attention kernel (specharness/narrow_attention.py: our C++ kernel for forwards of 2-8
positions over a bfloat16 cache), A/B on the full model: two targets in one process, compiled and
timed interleaved as ../smollm2-cpu-xeon-profile-v4/full_model_ab.py says. The kernel's arm is built with
SPECHARNESS_NARROW_ATTENTION=avx512 (its AVX512-BF16 path, the kernel of profile v5), the control with
SPECHARNESS_NARROW_ATTENTION=0 (SDPA at every width past one, as in profile v4).
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v5/narrow_attention_ab.py"""
import os, sys, torch
torch.set_num_threads(2)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "smollm2-cpu-xeon-profile-v4"))
from full_model_ab import compiled_target, time_interleaved

targets = {}
for name in ("sdpa", "narrow"):
    os.environ["SPECHARNESS_NARROW_ATTENTION"] = "avx512" if name == "narrow" else "0"  # read as the target is made
    targets[name] = compiled_target(name)
    assert bool(targets[name].backend.stack.narrow) == (name == "narrow")
time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v5/narrow_attention_ab.py")
