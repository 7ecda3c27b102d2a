"""A bfloat16 K/V cache (attention over it by SDPA's flash kernel at widths > 1), A/B on the full
model: two targets in one process, compiled and timed interleaved as full_model_ab.py says. The
control keeps the float32 cache the engine used before (``TargetModel.kv_dtype`` float32), which
takes attend's float32 kernels: the fused one-position loop and two bmm, exactly as before.
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v4/bf16_cache_ab.py"""
import torch
torch.set_num_threads(2)
from full_model_ab import compiled_target, time_interleaved
from specharness.target import TargetModel


class Float32Cache(TargetModel):
    kv_dtype = property(lambda self: torch.float32)


def float32_cache(t: TargetModel) -> None:
    t.__class__ = Float32Cache


targets = {"f32-cache": compiled_target("f32-cache", float32_cache), "bf16-cache": compiled_target("bf16-cache")}
assert targets["f32-cache"].kv_dtype == torch.float32 and targets["bf16-cache"].kv_dtype == torch.bfloat16
time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v4/bf16_cache_ab.py")
