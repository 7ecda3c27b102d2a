"""Would a two-pass top-k (each block of 256 columns' maximum, then topk over the k best blocks' columns
only) cut Token Recycling's per-round topk (its bookkeeping's largest part)? Both timed on the verified
rows recycling's commit really gets (6 sample prompts, 128 tokens, bfloat16 max-autotune, 2 threads),
each call right after the other, by row count; and on random rows of the same shape."""
import collections
import json
import statistics
import time

import torch

from specharness.engine import generate
from specharness.methods.recycling import TokenRecycling
from specharness.options import resolve_options
from specharness.plugins import build_registry
from specharness.session import EngineRequest, Session

BLOCK, K = 256, 8


def two_pass(x: torch.Tensor, k: int = K) -> torch.Tensor:
    rows = x.shape[0]
    blocks = x.view(rows, -1, BLOCK)  # 49,152 columns: 192 blocks
    best = blocks.amax(dim=-1).topk(k, dim=-1).indices
    within = blocks.gather(1, best.unsqueeze(-1).expand(-1, -1, BLOCK)).view(rows, -1).topk(k, dim=-1).indices
    return best.gather(1, within // BLOCK) * BLOCK + within % BLOCK


def timed(fn, x) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


s = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
t, reg = s.target, build_registry()
d = reg.method("recycling").build(t, resolve_options("recycling", reg.method("recycling").options, {}))
t.expect_widths(d.max_width)
by_rows = collections.defaultdict(lambda: ([], []))
commit = TokenRecycling.commit


def probe(self, state, verified):
    x = verified.tree_logits
    by_rows[x.shape[0]][0].append(timed(lambda v: v.topk(K, dim=-1), x))
    by_rows[x.shape[0]][1].append(timed(two_pass, x))
    return commit(self, state, verified)


TokenRecycling.commit = probe
accept = reg.verifier("greedy").accept
for q in [json.loads(line) for line in open("tasks/sample_questions.jsonl")][:6]:
    generate(t, d, accept, t.chat_ids([{"role": "user", "content": q["turns"][0]}]), 128)
print("in the loop (recycling's own verified rows):")
for rows in sorted(by_rows):
    a, b = by_rows[rows]
    print(f"  {rows} rows x {len(a)} rounds: topk {1e6 * statistics.median(a):.0f} us, two-pass {1e6 * statistics.median(b):.0f} us")
print("random bfloat16 rows, same shapes, 300 calls each:")
for rows in (1, 3, 8):
    a, b = [], []
    for _ in range(300):
        x = torch.randn(rows, 49152).to(torch.bfloat16)
        a.append(timed(lambda v: v.topk(K, dim=-1), x))
        b.append(timed(two_pass, x))
    print(f"  {rows} rows: topk {1e6 * statistics.median(a):.0f} us, two-pass {1e6 * statistics.median(b):.0f} us")
