"""The narrow attention kernel's AMX path (specharness/model/accel/narrow_attention.py), A/B/C on the
full model: three targets in one process, compiled and timed interleaved by
specharness.engine_ab (bfloat16 max-autotune, widths 1-64 compiled first, contexts 256 and 1024,
5 rounds of 9 forwards, medians in ms). 'sdpa': EngineOptions(narrow_attention="off") (SDPA past one
position, profile v4's kernels); 'avx512': narrow_attention="avx512" (the kernel's AVX512-BF16 path
up to 8 positions, SDPA wider: profile v5's kernels); 'amx': the default on this CPU (the AMX path
from 9 query rows per key/value head up to 64 positions). The committed .txt ran at cb286c4 with
the AMX path uncommitted ('-dirty' in its headers), when SPECHARNESS_NARROW_ATTENTION set the arms.
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v6/amx_attention_ab.py [arm ...]
(all three arms by default)"""
import sys

import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions

THREADS = 2
ARMS = {"sdpa": ("off", ""), "avx512": ("avx512", "avx512-bf16"), "amx": ("on", "amx")}  # name: (option, path)

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    targets = {}
    for name in sys.argv[1:] or list(ARMS):
        setting, path = ARMS[name]
        targets[name] = compiled_target(name, EngineOptions(narrow_attention=setting))
        assert targets[name].attention.narrow == path, (name, targets[name].attention.narrow)
    time_interleaved(targets, " ".join(["python results/smollm2-cpu-xeon-profile-v6/amx_attention_ab.py", *sys.argv[1:]]))
