"""One process of test_compiled's disk-cache check: compile tiny bfloat16 models with max-autotune
(their linear weights prepacked for oneDNN, then re-blocked by the C++ GEMM template where the
caller forces it), run a forward, print the logits, the gap to an eager twin and inductor's FX
graph cache counters as JSON, and what the graph store did (packages loaded and built; also its
test's probe). Usage: python inductor_cache_probe.py SEED [SEED...]"""
import json
import sys

import torch

from specharness.model import TargetModel

torch.set_num_threads(1)
ids = torch.tensor([i % 45 + 3 for i in range(6)])
runs = {}
for seed in sys.argv[1:]:
    shape = dict(vocab_size=48, n_layers=1, hidden_size=64, seed=int(seed), dtype="bfloat16")
    compiled, eager = TargetModel.tiny("qwen2", **shape), TargetModel.tiny("qwen2", **shape)
    compiled.compile("max-autotune")
    with torch.no_grad():
        got = compiled.forward(ids[:1], compiled.new_cache(8), 0, head=True).logits.float()
        want = eager.forward(ids[:1], eager.new_cache(8), 0, head=True).logits.float()
    store = compiled.backend.store
    runs[seed] = {"logits": got.flatten().tolist(), "eager_gap": (got - want).abs().max().item(),
                  "loaded": len(store.loaded) if store else None, "built": len(store.built) if store else None,
                  "failures": {k.describe(): v for k, v in store.failures.items()} if store else None}
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({"runs": runs, "fx": {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph")}}))
