"""Per-round costs of vanilla, pld, kangaroo and eagle on the default compiled engine, interleaved, and
every compiled graph's step time against its own byte roofline (weights it reads / bandwidth measured
in this run). Usage: python measure.py [COMPILE_MODE] > out.txt  (run from the repository root)."""

import json
import platform
import statistics
import subprocess
import sys
import time

import torch
import transformers

from specharness.model import TargetModel, WIDTH_BUCKETS
from specharness.plugins import build_registry
from specharness.profile import bandwidth_gbs
from specharness.runner import Settings, build_method

THREADS, TOKENS, REPEATS = 2, 96, 2
PROMPTS = ["Explain in a few sentences why the sky is blue.", "Write a short poem about the sea.",
           "Summarize: The cat sat on the mat. It was a sunny day and the cat was happy to sit there all day long.",
           "List five fruits and one fact about each."]
torch.set_num_threads(THREADS)
mode = sys.argv[1] if len(sys.argv) > 1 else "max-autotune"
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"command": f"python {' '.join(sys.argv)}", "commit": commit, "model": "SmolLM2-135M-Instruct",
                  "dtype": "bfloat16", "compile": mode, "threads": THREADS, "torch": torch.__version__,
                  "transformers": transformers.__version__, "cpu": platform.processor() or platform.machine(),
                  "tokens": TOKENS, "repeats": REPEATS, "prompts": len(PROMPTS)}))
t = TargetModel.load(dtype="bfloat16")
t.compile(mode)
reg = build_registry()
names = ["vanilla", "pld", "kangaroo", "eagle"]
ms = {n: build_method(reg, n, [], t, 0.0) for n in names}
ids = [t.chat_ids([{"role": "user", "content": p}]) for p in PROMPTS]
t.expect_widths(max(m.max_width for m in ms.values()))
started = time.time()
for m in ms.values():  # warm-up as runner.warm_up does: each method's graphs, to its widest verification
    t.backend.used.clear()
    m.generate(ids[0], Settings(max_new_tokens=16), 0)
    t.precompile(m.max_width, set(t.backend.used), m.verify_layer)
print(f"warm-up {time.time() - started:.0f} s, {len(t.backend.graphs)} graphs, {t.backend.compile_s:.0f} s compiling")
compiled_before, graphs_before = t.backend.compile_s, set(t.backend.graphs)
rounds = {n: [] for n in names}
per_token = {n: [] for n in names}
for rep in range(REPEATS):
    for qi, p in enumerate(ids):
        order = names[(qi + rep) % len(names):] + names[:(qi + rep) % len(names)]  # rotating, as runs do
        for n in order:
            g = ms[n].generate(p, Settings(max_new_tokens=TOKENS), 0)
            rounds[n] += g.rounds[1:]
            per_token[n].append(g.wall_time / len(g.token_ids))
print(f"compiled while timing: {t.backend.compile_s - compiled_before:.1f} s "
      f"{[k.describe() for k in t.backend.graphs - graphs_before]}")
base = statistics.mean(per_token["vanilla"])
print("\n| method | ms/token | vs vanilla | CR | drafts/round | draft ms/round | verify ms/round | accept ms/round |")
print("|---|---|---|---|---|---|---|---|")
for n in names:
    rs = rounds[n]
    med = lambda f: 1e3 * statistics.median(f(r) for r in rs)  # noqa: E731
    tok = statistics.mean(per_token[n])
    print(f"| {n} | {1e3 * tok:.2f} | {base / tok:.2f}x | {1 + statistics.mean(r.accepted for r in rs):.2f} | "
          f"{statistics.mean(r.drafted for r in rs):.2f} | {med(lambda r: r.draft_s):.2f} | "
          f"{med(lambda r: r.verify_s):.2f} | {med(lambda r: r.accept_s):.2f} |")

gbs = bandwidth_gbs()
print(f"\nbandwidth {gbs:.1f} GB/s (sum of a 540 MB float32 tensor)")


def stack_bytes(stack, a, b, head):
    """Weight bytes one forward of layers [a, b) (+ norm and head rows) of this stack reads."""
    n = sum(p.numel() * p.element_size() for name, p in stack.named_parameters()
            if any(name == f"{w}.{i}" for w in ("wqkv", "bqkv", "wo", "ln1", "ln2", "w_gate_up", "w_down")
                   for i in range(a, b)))
    in_w = getattr(stack, "in_w", None)
    if in_w is not None:
        n += in_w.numel() * in_w.element_size()
    if head:
        n += stack.head_weight.numel() * stack.head_weight.element_size()
    return n


print("\n| graph | ms per call (median of 50) | weight MB | byte roofline ms | ratio |")
print("|---|---|---|---|---|")
with torch.inference_mode():
    # getattr: the same script measures the commit before drafter stacks existed (one stack, no names)
    stacks = getattr(t.backend, "stacks", {"": t.backend.stack})
    for key in sorted((k for k in t.backend.graphs if k.width != "wide"),
                      key=lambda k: (getattr(k, "stack", ""), k.a, k.b, k.width)):
        named = {"stack": key.stack} if hasattr(key, "stack") else {}
        stack = stacks[named.get("stack", "")]
        in_w = getattr(stack, "in_w", None)
        cache = t.new_cache(512)
        x = (torch.zeros(key.width, dtype=torch.long) if key.ids else
             torch.zeros(key.width, t.hidden_size if in_w is None else in_w.shape[1], dtype=t.dtype))
        times = []
        for _ in range(55):
            cache.crop(0)
            cache.lengths[:] = [300] * len(cache.lengths)
            s = time.perf_counter()
            t.forward(x, cache, 300, key.a, key.b, head=key.head, capture=key.capture, skip=key.skip, **named)
            times.append(time.perf_counter() - s)
        step = 1e3 * statistics.median(times[5:])
        mb = stack_bytes(stack, key.a, key.b, key.head) / 1e6
        roof = mb / 1e3 / gbs * 1e3
        print(f"| {key.describe()} | {step:.2f} | {mb:.1f} | {roof:.2f} | {step / roof:.2f} |")
