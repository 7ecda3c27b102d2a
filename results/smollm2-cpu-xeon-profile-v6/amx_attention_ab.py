"""The narrow attention kernel's AMX path (specharness/narrow_attention.py), A/B/C on the full model:
three targets in one process, compiled and timed interleaved as
../smollm2-cpu-xeon-profile-v4/full_model_ab.py says. 'sdpa': SPECHARNESS_NARROW_ATTENTION=0 (SDPA
past one position, profile v4's kernels); 'avx512': =avx512 (the kernel's AVX512-BF16 path up to 8
positions, SDPA wider: profile v5's kernels); 'amx': the default on this CPU (the AMX path from 9
query rows per key/value head up to 64 positions).
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v6/amx_attention_ab.py [arm ...]
(all three arms by default)"""
import os, sys, torch
torch.set_num_threads(2)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "smollm2-cpu-xeon-profile-v4"))
from full_model_ab import compiled_target, time_interleaved

targets = {}
ARMS = (("sdpa", "0", ""), ("avx512", "avx512", "avx512-bf16"), ("amx", "1", "amx"))
for name, setting, kind in [a for a in ARMS if a[0] in (sys.argv[1:] or [a[0] for a in ARMS])]:
    os.environ["SPECHARNESS_NARROW_ATTENTION"] = setting  # read as the target is made
    targets[name] = compiled_target(name)
    assert targets[name].backend.stack.narrow == kind, (name, targets[name].backend.stack.narrow)
time_interleaved(targets, " ".join(["python results/smollm2-cpu-xeon-profile-v6/amx_attention_ab.py", *sys.argv[1:]]))
