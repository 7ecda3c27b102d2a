"""Where a round's time goes, per method: the engine's own draft / verify / accept timers, and every
``TargetModel.forward`` call timed by a wrapper (which graph, how many a round, ms a call), so that
"outside the forwards" (Python bookkeeping, eager drafter ops, host syncs) is what remains.
Methods interleaved per prompt (rotating order), after each method's warm-up and precompile.
Usage (repository root): python results/smollm2-cpu-epyc-round-profile/profile_rounds.py [METHODS] > out.txt
METHODS: comma-separated, a variant as name:key=value:key=value (e.g. eagle:total_tokens=3); vanilla first."""

import collections
import json
import statistics
import sys
import time

import torch

from specharness.model import TargetModel
from specharness.plugins import build_registry
from specharness.results import provenance
from specharness.runner import Settings, build_method, warm_up
from specharness.tasks.specbench import Question

THREADS, TOKENS, REPEATS, MODE = 2, 96, 2, "max-autotune"
PROMPTS = ["Explain in a few sentences why the sky is blue.", "Write a short poem about the sea.",
           "Summarize: The cat sat on the mat. It was a sunny day and the cat was happy to sit there all day long.",
           "List five fruits and one fact about each."]
names = (sys.argv[1] if len(sys.argv) > 1 else "vanilla,pld,recycling,lookahead,kangaroo,eagle").split(",")
torch.set_num_threads(THREADS)
print(json.dumps(provenance(command=f"python {' '.join(sys.argv)}", model="SmolLM2-135M-Instruct", dtype="bfloat16",
                            compile=MODE, threads=THREADS, tokens=TOKENS, repeats=REPEATS, prompts=len(PROMPTS))))
t = TargetModel.load(dtype="bfloat16")
t.compile(MODE)
reg = build_registry()
ms = {n: build_method(reg, n.split(":")[0], n.split(":")[1:], t, 0.0) for n in names}
ids = [t.chat_ids([{"role": "user", "content": p}]) for p in PROMPTS]
took = warm_up(t, list(ms.values()), [Question("warmup", "qa", "qa", tuple(PROMPTS[:1]))], Settings(max_new_tokens=16))
print(f"warm-up {took['warmup_s']:.0f} s, {took['graphs']} graphs")
graphs_before = set(t.backend.graphs)

calls: dict[str, collections.Counter] = {n: collections.Counter() for n in names}
spent: dict[str, collections.Counter] = {n: collections.Counter() for n in names}
forward = t.forward
current = [names[0]]


def timed_forward(x, *args, **kw):
    """The target's forward, timed; keyed by stack (drafter head or target), layer range, width and head."""
    s = time.perf_counter()
    out = forward(x, *args, **kw)
    a = args[2] if len(args) > 2 else kw.get("a", 0)
    key = (f"{kw.get('stack', '')[:12] or 'target'} from {a}{' +head' if kw.get('head') else ''}, "
           f"{'prefill' if kw.get('prefill') else x.shape[0]}")
    spent[current[0]][key] += time.perf_counter() - s
    calls[current[0]][key] += 1
    return out


t.forward = timed_forward
rounds = {n: [] for n in names}
per_token = {n: [] for n in names}
for rep in range(REPEATS):
    for qi, p in enumerate(ids):
        order = names[(qi + rep) % len(names):] + names[:(qi + rep) % len(names)]
        for n in order:
            current[0] = n
            g = ms[n].generate(p, Settings(max_new_tokens=TOKENS), 0)
            rounds[n] += g.rounds[1:]
            per_token[n].append(g.wall_time / len(g.token_ids))
t.forward = forward
new = t.backend.graphs - graphs_before
print(f"compiled while timing: {len(new)} graphs {[k.describe() for k in new]}")

base = statistics.mean(per_token["vanilla"]) if "vanilla" in per_token else None
print("\n| method | ms/token | vs vanilla | tokens/round | drafts/round | draft | verify | accept | "
      "forwards/round | in forwards | outside forwards |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for n in names:
    rs = rounds[n]
    mean = lambda f: 1e3 * statistics.mean(f(r) for r in rs)  # noqa: E731
    tok = statistics.mean(per_token[n])
    prefill = sum(v for k, v in spent[n].items() if k.endswith("prefill"))
    inside = 1e3 * (sum(spent[n].values()) - prefill) / len(rs)
    n_calls = sum(v for k, v in calls[n].items() if not k.endswith("prefill")) / len(rs)
    total = mean(lambda r: r.draft_s + r.verify_s + r.accept_s)
    print(f"| {n} | {1e3 * tok:.2f} | {f'{base / tok:.2f}x' if base else '-'} | "
          f"{1 + statistics.mean(r.accepted for r in rs):.2f} | {statistics.mean(r.drafted for r in rs):.2f} | "
          f"{mean(lambda r: r.draft_s):.2f} | {mean(lambda r: r.verify_s):.2f} | {mean(lambda r: r.accept_s):.2f} | "
          f"{n_calls:.2f} | {inside:.2f} | {total - inside:.2f} |")
print("\nms per round are means over every round after the prefill; 'outside forwards' = draft + verify + accept "
      "minus the time inside TargetModel.forward calls (Python bookkeeping, eager drafter ops, host syncs).")
print("\n| method | forward | calls/round | ms/call |")
print("|---|---|---|---|")
for n in names:
    for k in sorted(calls[n], key=lambda k: -calls[n][k]):
        if not k.endswith("prefill") and calls[n][k] / len(rounds[n]) >= 0.05:
            print(f"| {n} | {k} | {calls[n][k] / len(rounds[n]):.2f} | {1e3 * spent[n][k] / calls[n][k]:.2f} |")
