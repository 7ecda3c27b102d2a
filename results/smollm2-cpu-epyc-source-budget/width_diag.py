"""Why budget=auto's width curve misleads it: in one process after warm-up, what a verification forward costs at
widths 2/4/8 (a) as calibrated (`width_curve.verify_seconds`: context 256, 5 repeats; the "calibrated" line),
(b) at contexts 64-1024 (15 repeats, widths round-robin), twice ("A" before, "B" after), and (c) in real pld rounds
at fixed sizes 1/3/7 on 12 questions (the 11th-12th of each Spec-Bench subtask), by padded width and context.

    python results/smollm2-cpu-epyc-source-budget/width_diag.py ../shared/specbench/question.jsonl

About 4 minutes on an idle 2-core machine (graphs loaded from the store). width_diag.txt is its output at 59bb15c
(2026-12-06, torch 2.13.0+cpu, transformers 5.25.0, 2 threads, bfloat16 max-autotune).
"""
import statistics, sys, json
from time import perf_counter
import torch
from specharness.session import Session, EngineRequest
from specharness.runner import Settings, warm_up, prompt_ids
from specharness.tasks.specbench import load_questions, select
from specharness.budget import Sizer, Costs
from specharness.engine import generate

sess = Session(EngineRequest(threads=2))
t = sess.target
m = sess.method("pld", ["budget=auto"], 0.0)
qs = load_questions(sys.argv[1])
chosen = select(qs, limit=12)
pick = [q for i, q in enumerate(chosen) if i % 12 >= 10]
s = Settings(128, 0.0, 0)
info = warm_up(t, [m], pick, s)
print("calibrated", json.dumps(info.get("budget")), "curve", info.get("verify_ms_by_width"), flush=True)

def timed(widths, context, reps=15):
    times = {w: [] for w in widths}
    with torch.inference_mode():
        cache = t.new_cache(context + max(widths) + 8)
        for rep in range(reps + 1):
            for w in widths:
                x = torch.zeros(w, dtype=torch.long)
                cache.crop(0); cache.lengths[:] = [context] * len(cache.lengths)
                st = perf_counter(); t.forward(x, cache, context, 0, head=True)
                if rep: times[w].append(perf_counter() - st)
    return {w: round(statistics.median(v) * 1e3, 2) for w, v in times.items()}

def sweep(tag):
    for c in (64, 128, 256, 512, 1024):
        print(tag, "context", c, timed([2, 4, 8], c), flush=True)

sweep("A")
spec = sess.registry.method("pld")
from specharness.options import resolve_options
opts = resolve_options("pld", spec.options, ["budget=auto"])
drafter = spec.build(t, opts)
from specharness.runner import resolve_verifier
vspec = resolve_verifier(sess.registry, None, 0.0)
by = {}
for size in (1, 3, 7):
    for q in pick:
        ids, _ = prompt_ids(t, [{"role": "user", "content": q.turns[0]}], 128)
        fixed = Sizer(Costs({2: 1.0, 4: 1.0, 8: 1.0}, {size: 0.0}), [size], t.backend.width)
        g = generate(t, drafter, vspec.accept, ids, 128, 0.0, 0, None, fixed)
        ctx = len(ids)
        for r in g.rounds[1:]:
            w = t.backend.width(r.width)
            b = "<256" if ctx < 256 else ("<512" if ctx < 512 else ">=512")
            by.setdefault((w, b), []).append(r.verify_s)
            ctx += r.accepted + 1
    print("real rounds after size", size, flush=True)
for k in sorted(by):
    print("real", k, len(by[k]), round(statistics.median(by[k]) * 1e3, 2))
sweep("B")
