"""One process's warm-up: load the default model in bfloat16, compile it with max-autotune as a run
does, time widths 1 and 8 (which compiles vanilla's graphs), and print the compile seconds and
inductor's FX-graph-cache counters (a bypass and its reason, such as 'mkldnn tensors unpickleable'
before specharness/model/accel/inductor_cache.py, are logged too). run.sh runs it twice on one fresh
TORCHINDUCTOR_CACHE_DIR: the second process is the 'second run' of issue 11's warm-up goal. The
engine's switches come from the environment (EngineOptions.from_env), as a run's do."""
import json
import logging
import sys
import time

import torch

from specharness.engine_options import EngineOptions
from specharness.model import TargetModel
from specharness.model.engine_choice import apply, step_ms

THREADS = 2

if __name__ == "__main__":
    torch.set_num_threads(THREADS)
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    logging.getLogger("torch._inductor.codecache").setLevel(logging.INFO)  # logs each cache bypass and why
    options = EngineOptions.from_env()
    target = TargetModel.load("smollm2", "bfloat16", options=options)
    mode, why = apply(target, "max-autotune")
    assert mode == "max-autotune", why
    target.expect_widths(8)
    started = time.time()
    steps = {w: step_ms(target, context=256, width=w) for w in (1, 8)}
    from torch._dynamo.utils import counters
    print(json.dumps({"compile_s": target.backend.compile_s, "wall_s": time.time() - started, "step_ms": steps,
                      "fx_graph_cache": {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph")},
                      "threads": torch.get_num_threads(), "options": options.record(), "torch": torch.__version__}))
