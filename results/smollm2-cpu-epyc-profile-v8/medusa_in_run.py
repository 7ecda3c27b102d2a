import time, statistics, torch
from specharness.session import Session, EngineRequest
from specharness.engine import generate
from specharness.plugins import build_registry
from specharness.methods.medusa import drafter as md
s = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
t = s.target
reg = build_registry()
accept = reg.verifier("greedy").accept
d = md.build(t, {o.name: o.default for o in md.OPTIONS})
t.expect_widths(d.max_width)
prompt = t.chat_ids([{"role": "user", "content": "Explain why the sky is blue, in detail, for a child."}])
with t.backend.in_background():
    generate(t, d, accept, prompt, 16)
t.precompile(d.max_width)
times = {"step": [], "propose": []}
orig_run, orig_prop = t.backend.run_module, md.MedusaDrafter.propose
def run(m, *a):
    t0 = time.perf_counter(); r = orig_run(m, *a); times["step"].append(time.perf_counter() - t0); return r
def prop(self, st):
    t0 = time.perf_counter(); r = orig_prop(self, st); times["propose"].append(time.perf_counter() - t0); return r
t.backend.run_module = run
md.MedusaDrafter.propose = prop
g = generate(t, d, accept, prompt, 128)
for k, v in times.items(): print(k, f"{1e3*statistics.median(v):.3f} ms", len(v))
print("draft_s median", 1e3 * statistics.median(r.draft_s for r in g.rounds[1:]))
