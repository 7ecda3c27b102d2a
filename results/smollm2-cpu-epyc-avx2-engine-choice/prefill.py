"""Prefill cost per prompt token for one engine configuration (dtype/compile), SmolLM2, 2 threads:
random prompts of 128, 512 and 1024 tokens, one warm call each, then the median of 5, the LM head at
the last position alone (what a run's prefill does). One configuration per process.

Run from the repository root: python results/smollm2-cpu-epyc-avx2-engine-choice/prefill.py bfloat16/max-autotune
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from specharness.model.engine_choice import random_ids
from specharness.session import EngineRequest, Session


def main(config: str) -> None:
    dtype, mode = config.split("/")
    target = Session(EngineRequest("smollm2", dtype, mode, "cpu", 2)).target
    with torch.inference_mode():
        cache = target.new_cache(1200)

        def prefill(ids: torch.Tensor) -> float:
            cache.crop(0)
            start = time.perf_counter()
            target.forward(ids, cache, 0, head=True, prefill=True, last=True)
            return time.perf_counter() - start

        prefill(random_ids(target, 96, 0))  # its graph built (or loaded) before anything is timed
        for n in (128, 512, 1024):
            ids = random_ids(target, n, 1)
            prefill(ids)
            ms = statistics.median(prefill(ids) for _ in range(5)) * 1e3
            print(f"| {config} | {n} | {ms:.0f} | {ms / n:.2f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bfloat16/max-autotune")
