"""Inductor's C++ wrapper (``cpp_wrapper``: the calls between a graph's kernels in C++, not Python),
A/B on the full model: two targets in one process, compiled and timed interleaved by
specharness.engine_ab (bfloat16 max-autotune, widths 1-64 compiled first, contexts 256 and 1024,
5 rounds of 9 forwards, medians in ms). The control is built with EngineOptions(cpp_wrapper=False)
(the Python wrapper of every commit before the switch); each arm's graphs compile before the next
arm is made, since the wrapper is a process-wide inductor setting read as a graph compiles. The
committed .txt ran at d9d1230 (its header), when SPECHARNESS_CPP_WRAPPER set the arms.
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v4/cpp_wrapper_ab.py"""
import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions

THREADS = 2
ARMS = {"python-wrapper": False, "cpp-wrapper": True}

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    targets = {name: compiled_target(name, EngineOptions(cpp_wrapper=on)) for name, on in ARMS.items()}
    for name, target in targets.items():
        assert target.backend.cpp_wrapper == ARMS[name], (name, target.backend.cpp_wrapper)
    time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v4/cpp_wrapper_ab.py")
