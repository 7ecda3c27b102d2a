"""The narrow attention kernel (specharness/model/accel/narrow_attention.py: our C++ kernel for
forwards of 2-8 positions over a bfloat16 cache), A/B on the full model: two targets in one process,
compiled and timed interleaved by specharness.engine_ab (bfloat16 max-autotune, widths 1-64
compiled first, contexts 256 and 1024, 5 rounds of 9 forwards, medians in ms). The kernel's arm is
built with EngineOptions(narrow_attention="avx512") (its AVX512-BF16 path, the kernel of profile
v5), the control with narrow_attention="off" (SDPA at every width past one, as in profile v4). The
committed .txt ran at 97390c7 with the kernel uncommitted ('-dirty' in its headers), when
SPECHARNESS_NARROW_ATTENTION set the arms.
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v5/narrow_attention_ab.py"""
import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions

THREADS = 2
ARMS = {"sdpa": "off", "narrow": "avx512"}

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    targets = {name: compiled_target(name, EngineOptions(narrow_attention=setting)) for name, setting in ARMS.items()}
    for name, target in targets.items():
        assert bool(target.attention.narrow) == (name == "narrow"), (name, target.attention.narrow)
    time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v5/narrow_attention_ab.py")
