"""The AMX GEMM template's weight prefetch (specharness/model/accel/amx_prefetch.py), A/B on the full
model: vanilla's compiled bfloat16 max-autotune forward at widths 1, 8, 16, 32, 64 and context 256,
two targets in one process, compiled and timed interleaved by specharness.engine_ab (5 rounds of 9
forwards per width and target, medians in ms). 'stock' is built first with
EngineOptions(amx_prefetch=False) and compiles every width before 'prefetch' (amx_prefetch=True)
edits the template: the edit is process-wide, so the order matters. The committed .txt ran at
f0c8dec (its header; its lines have no 'ctx 256' prefix, the only context then).
Run on a fresh TORCHINDUCTOR_CACHE_DIR, nothing else on the machine:
python results/smollm2-cpu-xeon-profile-v3/amx_prefetch_ab.py"""
import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions

THREADS = 2
ARMS = {"stock": False, "prefetch": True}  # in this order: see above

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    targets = {}
    for name, on in ARMS.items():
        targets[name] = compiled_target(name, EngineOptions(amx_prefetch=on))
        assert targets[name].backend.amx_prefetch == on, (name, targets[name].backend.amx_prefetch)
    time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v3/amx_prefetch_ab.py", contexts=(256,))
