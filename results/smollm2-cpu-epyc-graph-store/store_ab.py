"""Graphs from the graph store (AOTInductor packages, specharness/model/graph_store.py) against the
same graphs through torch.compile, on the full model: two targets in one process, compiled and timed
interleaved by specharness.engine_ab (bfloat16 max-autotune, contexts 256 and 1024, 5 rounds of 9
forwards, medians in ms). 'compile': EngineOptions(aot_graphs=False); 'store': the default.
Run with nothing else on the machine: python results/smollm2-cpu-epyc-graph-store/store_ab.py"""
import torch

from specharness.engine_ab import compiled_target, time_interleaved
from specharness.engine_options import EngineOptions

THREADS = 2
WIDTHS = (1, 2, 4, 8, 16)

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    targets = {"compile": compiled_target("compile", EngineOptions(aot_graphs=False), widths=WIDTHS),
               "store": compiled_target("store", EngineOptions(), widths=WIDTHS)}
    assert targets["compile"].backend.store is None and targets["store"].backend.store.failures == {}
    time_interleaved(targets, "python results/smollm2-cpu-epyc-graph-store/store_ab.py", widths=WIDTHS)
