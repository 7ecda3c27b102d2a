"""A/B: kangaroo's old drafter (two graph calls a token) against the fused step, interleaved on one target."""
import sys, time, statistics, json
sys.path.insert(0, "/tmp/kp")  # old_drafter.py there: `git show 7441086^:methods/kangaroo/drafter.py`, its relative imports made absolute
import torch
from specharness.session import Session, EngineRequest
from specharness.engine import generate
from specharness.plugins import build_registry
import specharness.methods.kangaroo.drafter as new
import old_drafter as old

s = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
t = s.target
reg = build_registry()
accept = reg.verifier(sys.argv[1] if len(sys.argv) > 1 else "greedy").accept
dn, do = new.build(t, {}), old.build(t, {})
for d in (dn, do):
    t.expect_widths(d.max_width)
qs = [json.loads(l) for l in open("/work/shared/specbench/question.jsonl")]
qs = [q for i, q in enumerate(qs) if i % 40 == 7][:12]
prompts = [t.chat_ids([{"role": "user", "content": q["turns"][0]}]) for q in qs]
with t.backend.in_background():
    for d in (dn, do):
        generate(t, d, accept, prompts[0], 16)
t.precompile(7)
for d in (dn, do):
    generate(t, d, accept, prompts[1], 16)
res = {"new": [], "old": []}
tot = {"new": [], "old": []}
for rep in range(2):
    for i, p in enumerate(prompts):
        order = [("new", dn), ("old", do)] if (i + rep) % 2 == 0 else [("old", do), ("new", dn)]
        outs = {}
        for name, d in order:
            g = generate(t, d, accept, p, 96)
            outs[name] = g.token_ids
            rs = g.rounds[1:]
            res[name].append((sum(r.draft_s for r in rs) / len(rs), sum(r.drafted for r in rs) / len(rs)))
            tot[name].append(g.wall_time / len(g.token_ids))
        assert outs["new"] == outs["old"], "outputs differ"
for name in res:
    print(name, "draft ms/round mean", 1e3 * statistics.mean(x for x, _ in res[name]),
          "drafted/round", statistics.mean(k for _, k in res[name]), "time/token ms", 1e3 * statistics.mean(tot[name]))
ratio = [a / b for a, b in zip(tot["new"], tot["old"])]
print("new/old time per token: median", statistics.median(ratio), "per prompt", [round(r, 3) for r in ratio])
