"""Why budget=auto's width curve misleads it: in one process after warm-up, what a verification forward costs at
widths 2/4/8 (a) as calibrated (`width_curve.verify_seconds`: context 256, 5 repeats; the "calibrated" line),
(b) at contexts 64-1024 (15 repeats, widths round-robin), twice ("A" before, "B" after), and (c) in real pld rounds
at fixed sizes 1/3/7 on 12 questions (the 11th-12th of each Spec-Bench subtask), by padded width and context.

    python results/smollm2-cpu-epyc-source-budget/width_diag.py ../shared/specbench/question.jsonl

About 4 minutes on an idle 2-core machine (graphs loaded from the store). width_diag.txt is its output at 59bb15c
(2026-12-06, torch 2.13.0+cpu, transformers 5.25.0, 2 threads, bfloat16 max-autotune), when the sweeps timed
with a copy of ``verify_seconds``'s loop (same forwards, order and repeats); they now call it with a context.
"""
import statistics, sys, json
from specharness.session import Session, EngineRequest
from specharness.runner import Settings, warm_up, prompt_ids
from specharness.tasks.specbench import load_questions, select
from specharness.budget import Sizer, Costs
from specharness.engine import generate
from specharness.width_curve import verify_seconds

sess = Session(EngineRequest(threads=2))
t = sess.target
m = sess.method("pld", ["budget=auto"], 0.0)
qs = load_questions(sys.argv[1])
chosen = select(qs, limit=12)
pick = [q for i, q in enumerate(chosen) if i % 12 >= 10]
s = Settings(128, 0.0, 0)
info = warm_up(t, [m], pick, s)
print("calibrated", json.dumps(info.get("budget")), "curve", info.get("verify_ms_by_width"), flush=True)

def timed(widths, context, reps=15):  # the calibration's own timing loop, at another context and more repeats
    return {w: round(v * 1e3, 2) for w, v in verify_seconds(t, 0, widths, reps, context).items()}

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
