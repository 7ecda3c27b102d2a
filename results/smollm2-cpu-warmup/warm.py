"""One process's warm-up: load the default model in bfloat16, compile it with max-autotune as a run
does, time widths 1 and 8 (which compiles vanilla's graphs), and print the compile seconds and
inductor's FX-graph-cache counters (a bypass and its reason, such as 'mkldnn tensors unpickleable'
before specharness.inductor_cache, are logged too). run.sh runs it twice on one fresh
TORCHINDUCTOR_CACHE_DIR: the second process is the 'second run' of issue 11's warm-up goal."""
import json
import logging
import sys
import time

import torch

from specharness import kernels
from specharness.target import TargetModel

torch.set_num_threads(2)
logging.basicConfig(stream=sys.stdout, format="%(message)s")
logging.getLogger("torch._inductor.codecache").setLevel(logging.INFO)  # logs each cache bypass and why
target = TargetModel.load("smollm2", "bfloat16")
kernels.apply(target, "max-autotune")
target.expect_widths(8)
started = time.time()
steps = {w: kernels.step_ms(target, context=256, width=w) for w in (1, 8)}
from torch._dynamo.utils import counters  # noqa: E402
print(json.dumps({"compile_s": target.backend.compile_s, "wall_s": time.time() - started, "step_ms": steps,
                  "fx_graph_cache": {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph")},
                  "torch": torch.__version__}))
