"""A bfloat16 K/V cache (attention over it by SDPA's flash kernel at widths > 1), A/B on the full
model: two targets in one process, compiled and timed interleaved by specharness.engine_ab
(bfloat16 max-autotune, widths 1-64 compiled first, contexts 256 and 1024, 5 rounds of 9 forwards,
medians in ms). The control keeps the float32 cache the engine used before (``TargetModel.kv_dtype``
float32), which takes the float32 kernels: the fused one-position loop and two bmm. Both arms run
with EngineOptions(narrow_attention="off"), the kernels of this A/B (the narrow kernel came in v5).
The committed .txt ran at 43dcc61 (its header).
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v4/bf16_cache_ab.py"""
import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions
from specharness.model import TargetModel

THREADS = 2
V4_KERNELS = EngineOptions(narrow_attention="off")


class Float32Cache(TargetModel):
    kv_dtype = property(lambda self: torch.float32)


def float32_cache(t: TargetModel) -> None:
    t.__class__ = Float32Cache


if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    targets = {"f32-cache": compiled_target("f32-cache", V4_KERNELS, prepare=float32_cache),
               "bf16-cache": compiled_target("bf16-cache", V4_KERNELS)}
    assert targets["f32-cache"].kv_dtype == torch.float32 and targets["bf16-cache"].kv_dtype == torch.bfloat16
    time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v4/bf16_cache_ab.py")
