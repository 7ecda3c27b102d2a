"""How fast the self-distillation generator writes answers, by dtype and batch: the cost of the data lever.

Times ``selfdistill._BatchDecoder`` (the generator's own batched decode) writing 64 greedy answer tokens to the
first N user turns of a cached self-distillation set, after a short warm-up, at 2 threads.
usage: python gen_speed.py DATA_DIR DTYPES N   (e.g. ~/.cache/specharness/selfdistill/<set> float32,bfloat16 32)
"""
import sys
import time

import torch

from specharness import selfdistill as sd
from specharness.model import TargetModel

torch.set_num_threads(2)
ds, _ = sd.load(sys.argv[1])
users = ds["user"][:int(sys.argv[3])]
for dtype in sys.argv[2].split(","):
    t = TargetModel.load("smollm2", dtype=dtype)
    prompts = [t.chat_ids([{"role": "user", "content": u}]) for u in users]
    stop = sd._end_of_turn(t)
    g = torch.Generator().manual_seed(0)
    sd._BatchDecoder(t).run(prompts[:4], 4, 0.0, stop, g, pad_id=min(stop))  # warm-up
    dec = sd._BatchDecoder(t)
    t0 = time.perf_counter()
    rows = dec.run(prompts, 64, 0.0, stop, g, pad_id=min(stop))
    dt = time.perf_counter() - t0
    n = sum(len(r["new"]) for r in rows)
    print(f"{dtype} batch {len(prompts)}: {n} tokens in {dt:.1f} s = {n / dt:.0f} tok/s, "
          f"{dec.flops / dt / 1e9:.1f} GFLOP/s", flush=True)
