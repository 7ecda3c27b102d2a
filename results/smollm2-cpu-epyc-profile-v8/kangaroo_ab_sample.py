"""A/B: kangaroo's old drafter (two graph calls a token, eta 0.6) against the fused step at several eta,
interleaved (rotating order) on one target, on the built-in sample questions (not Spec-Bench)."""
import sys, statistics, json
sys.path.insert(0, "/tmp/kp")  # old_drafter.py there: `git show 7441086^:methods/kangaroo/drafter.py`, its relative imports made absolute
import torch
from specharness.session import Session, EngineRequest
from specharness.engine import generate
from specharness.plugins import build_registry
import specharness.methods.kangaroo.drafter as new
import old_drafter as old

s = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
t = s.target
accept = build_registry().verifier("greedy").accept
variants = {"old 0.6": old.build(t, {}), "new 0.6": new.build(t, {}), "new 0.45": new.build(t, {"eta": 0.45}),
            "new 0.3": new.build(t, {"eta": 0.3}), "vanilla": build_registry().method("vanilla").build(t, {})}
for d in variants.values():
    t.expect_widths(getattr(d, "max_width", 1))
qs = [json.loads(l) for l in open("tasks/sample_questions.jsonl")]
prompts = [t.chat_ids([{"role": "user", "content": q["turns"][0]}]) for q in qs]
with t.backend.in_background():
    for d in variants.values():
        generate(t, d, accept, prompts[0], 16)
t.precompile(7)
for d in variants.values():
    generate(t, d, accept, prompts[1], 16)
names = list(variants)
res = {n: [] for n in names}
for rep in range(2):
    for i, p in enumerate(prompts):
        k = (i + rep) % len(names)
        outs = {}
        for n in names[k:] + names[:k]:
            g = generate(t, variants[n], accept, p, 96)
            outs[n] = g.token_ids
            rs = g.rounds[1:]
            res[n].append((g.wall_time, len(g.token_ids), sum(r.draft_s for r in rs) / len(rs),
                           sum(r.drafted for r in rs) / len(rs), len(rs)))
        assert outs["old 0.6"] == outs["new 0.6"], "old and new differ"
van = res["vanilla"]
for n in names:
    sp = [ (v[0] / v[1]) / (x[0] / x[1]) for x, v in zip(res[n], van)]
    print(f"{n:9s} speedup mean {statistics.mean(sp):.3f} median {statistics.median(sp):.3f} "
          f"draft ms/round {1e3 * statistics.mean(x[2] for x in res[n]):.2f} drafted/round "
          f"{statistics.mean(x[3] for x in res[n]):.2f} tokens/round {sum(x[1] for x in res[n]) / sum(x[4] for x in res[n]):.2f}")
