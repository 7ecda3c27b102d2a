"""A/B of the narrowest compiled width: vanilla's one-position step on its own width-1 graph ("width1")
against the same step padded to the width-2 graph ("padded2"), bfloat16 max-autotune, interleaved.
Usage: python narrowest_ab.py > narrowest_ab.txt (repository root)."""

import sys

import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions

torch.set_num_threads(2)
arms = {name: compiled_target(name, EngineOptions(narrowest=n), widths=(1, 2))
        for name, n in (("width1", "1"), ("padded2", "2"))}
time_interleaved(arms, "python " + " ".join(sys.argv), widths=(1, 2), rounds=7)
