"""Where a Kangaroo round's time goes on the default engine, and whether its first draft is worth drafting.

    python results/smollm2-cpu-epyc-kangaroo-round/round.py > round.txt   (alone on the machine, ~3 min
    with the graphs in the store; the README's first command puts them there)

1. The verification forwards Kangaroo and vanilla run (layers [2, 30) and [0, 30) with the head), at
   widths 2, 4 and 8, context 256: round-robin, the median of 5, in 5 rounds.
2. The drafter's step (2 layers + adapter + 4096 head rows, one graph call) hot (called back to back)
   and as a round calls it: the round's draft time split into steps, draws and the rest, over greedy
   generations of the built-in sample questions (not Spec-Bench's), 128 tokens.
3. The same generations: the first draft's confidence (its top-1 draft probability, what eta is compared
   with) against how often the target kept it. Drafting it costs one more step; it pays where it is
   kept more often than that step's share of a round's target forward.
"""
import collections, statistics, time

import torch

from specharness.engine import generate
from specharness.engine_ab import compiled_target
from specharness.methods.kangaroo import drafter as kangaroo
from specharness.model.engine_choice import cpu_name
from specharness.results import provenance
from specharness.tasks.specbench import load_questions
from specharness.verify import greedy
from specharness.width_curve import verify_seconds

torch.set_num_threads(2)
t = compiled_target("default", widths=(2, 4, 8), log=lambda line: None)
d = kangaroo.build(t, {})
print("#", provenance(model=t.name, device="cpu", threads=torch.get_num_threads(), cpu=cpu_name(),
                      command="python results/smollm2-cpu-epyc-kangaroo-round/round.py",
                      engine=f"{str(t.dtype).removeprefix('torch.')}/{t.backend.mode}", kernels=t.kernel_flags()))

curve: dict = {}
for _ in range(5):
    for layer in (0, 2):
        for w, s in verify_seconds(t, layer, [2, 4, 8]).items():
            curve.setdefault((layer, w), []).append(s * 1e3)
print("1. verification forward, ms (median of 5 rounds):")
for (layer, w), v in sorted(curve.items()):
    print(f"   layers [{layer}, 30) width {w}: {statistics.median(v):.2f}   rounds {[round(x, 2) for x in v]}")

# 2. the step hot, then the rounds' split
spent, calls = collections.defaultdict(float), collections.Counter()


def timed(name, f):
    def run(*a, **k):
        start = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[name] += time.perf_counter() - start
            calls[name] += 1
    return run


with torch.inference_mode():
    d.cache = t.new_cache(512, n_layers=d.exit_layer + 1)
    d.cache.lengths[:] = [256] * len(d.cache.lengths)
    hot = []
    for i in range(60):
        d.cache.crop(256)
        start = time.perf_counter()
        d._step(100, 256)
        hot.append(time.perf_counter() - start)
print(f"2. the draft step called back to back (weights cached): {statistics.median(hot[10:]) * 1e3:.3f} ms")

first: dict = {}
keep = d.keep_drafting


def keep_drafting(state, i, token, confidence):
    if i == 0:
        first["confidence"] = confidence
    return keep(state, i, token, confidence)


kept_first = []  # (confidence, kept)
commit = d.commit


def on_commit(state, verified):
    kept_first.append((first.pop("confidence", None), len(verified.path) >= 1))
    return commit(state, verified)


d.keep_drafting, d.commit = keep_drafting, on_commit
d._step = timed("steps", d._step)
kangaroo.draft_vocab.draw = timed("draws", kangaroo.draft_vocab.draw)
d.propose = timed("propose", d.propose)
rounds = []
for q in load_questions("tasks/sample_questions.jsonl"):
    ids = t.chat_ids([{"role": "user", "content": q.turns[0]}])
    generate(t, d, greedy, ids, 128)  # warm
    spent.clear(), calls.clear(), kept_first.clear()
    g = generate(t, d, greedy, ids, 128)
    rounds.append((g.rounds[1:], dict(spent), dict(calls), list(kept_first)))
n = sum(len(r) for r, *_ in rounds)
total = {k: sum(s[k] for _, s, _, _ in rounds) for k in ("steps", "draws", "propose")}
count = {k: sum(c[k] for _, _, c, _ in rounds) for k in ("steps", "draws")}
print(f"   in the rounds ({n} rounds of {len(rounds)} answers): draft {total['propose'] / n * 1e3:.3f} ms a round = "
      f"{count['steps'] / n:.2f} steps x {total['steps'] / count['steps'] * 1e3:.3f} ms + {count['draws'] / n:.2f} draws x "
      f"{total['draws'] / count['draws'] * 1e3:.3f} ms + {(total['propose'] - total['steps'] - total['draws']) / n * 1e3:.3f} ms other")
all_rounds = [x for r, *_ in rounds for x in r]
for k in sorted({x.drafted for x in all_rounds}):
    xs = [x for x in all_rounds if x.drafted == k]
    print(f"   rounds drafting {k}: {len(xs):4d}, median draft {statistics.median(x.draft_s for x in xs) * 1e3:.2f} ms, "
          f"verify {statistics.median(x.verify_s for x in xs) * 1e3:.2f} ms, accept {statistics.median(x.accept_s for x in xs) * 1e3:.2f} ms")

print("3. the first draft's confidence against how often the target kept it:")
pairs = [p for *_, ps in rounds for p in ps if p[0] is not None]
edges = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.01]
for lo, hi in zip(edges, edges[1:]):
    kept = [k for c, k in pairs if lo <= c < hi]
    if kept:
        print(f"   confidence [{lo:.1f}, {min(hi, 1):.1f}): {len(kept):4d} rounds ({len(kept) / len(pairs):.0%}), kept {sum(kept) / len(kept):.3f}")
