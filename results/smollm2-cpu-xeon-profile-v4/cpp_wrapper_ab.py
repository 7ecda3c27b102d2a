"""Inductor's C++ wrapper (``cpp_wrapper``: the calls between a graph's kernels in C++, not Python),
A/B on the full model: two targets in one process, compiled and timed interleaved as
full_model_ab.py says. The control is compiled with SPECHARNESS_CPP_WRAPPER=0 (the Python wrapper
of every commit before this one).
Run with nothing else on the machine: python results/smollm2-cpu-xeon-profile-v4/cpp_wrapper_ab.py"""
import os, torch
torch.set_num_threads(2)
from full_model_ab import compiled_target, time_interleaved

targets = {}
for name in ("python-wrapper", "cpp-wrapper"):
    os.environ["SPECHARNESS_CPP_WRAPPER"] = "1" if name == "cpp-wrapper" else "0"  # read as the backend is made
    targets[name] = compiled_target(name)
    assert targets[name].backend.cpp_wrapper == (name == "cpp-wrapper")
time_interleaved(targets, "python results/smollm2-cpu-xeon-profile-v4/cpp_wrapper_ab.py")
