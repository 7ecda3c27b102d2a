"""How bfloat16 rounding moves SmolLM2's logits, measured on transformers' own forward (never the
engine): the evidence for the identity bound's second term (specharness/identity.py, reference_noise).

Part 1, on identity.CALIBRATION_PROMPTS' float32 greedy continuations (reference_noise's own sample):
the shift bfloat16 puts on each top-8 token's gap to the top logit, against float32, by the bucket
of the top logit's bfloat16 ulp (the ulp model's scale), and reference_noise's own value.
Part 2, for every divergence a certify run recorded (identity_certified.json of each folder given):
each token's gap in float32 and in transformers' own bfloat16 forward at that prefix.

    python results/smollm2-cpu-epyc-bf16-noise/noise.py [RUNS_DIR ...]
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

from specharness import identity
from specharness.model import TargetModel
from specharness.runner import prompt_ids
from specharness.tasks.specbench import load_questions

torch.set_num_threads(2)
target = TargetModel.load(None, "bfloat16", "cpu")
ref = identity.Reference(target)
print(f"model {target.name}, torch {torch.__version__}, threads {torch.get_num_threads()}")

shifts = []  # (|gap shift|, top logit's bfloat16 ulp): reference_noise's own sample
for exact, rounded in identity.calibration_logits(target, ref, "bfloat16"):
    for e, shift in zip(exact, identity.gap_shifts(exact, rounded)):
        top_ulp = identity.ulp(float(e.max()), "bfloat16")
        shifts += [(float(x), top_ulp) for x in shift[1:]]
xs = sorted(s for s, _ in shifts)
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]  # noqa: E731
print(f"\npart 1: {len(xs)} token pairs (top-8 of the float32 logits, {len(xs) // 7} positions)")
print(f"|gap shift|, logits: median {q(xs, .5):.3f}  p90 {q(xs, .9):.3f}  p99 {q(xs, .99):.3f}  max {xs[-1]:.3f}")
print("by the top logit's bfloat16 ulp (the ulp model's scale: 2 x 2.74 ulp at SmolLM2's depth):")
by = defaultdict(list)
for s, u in shifts:
    by[u].append(s)
for u in sorted(by):
    v = sorted(by[u])
    print(f"  ulp {u:.4f} (ulp model allows {5.477 * u:.3f}): n {len(v):5d}  median {q(v, .5):.3f}  "
          f"p99 {q(v, .99):.3f}  max {v[-1]:.3f}")
noise, positions = identity.reference_noise(target, ref, "bfloat16")
print(f"identity.reference_noise(bfloat16) = {noise:.4f} over {positions} positions (the bound's second term)")

for d in sys.argv[1:]:
    runs = Path(d)
    cert = json.loads((runs / "identity_certified.json").read_text())
    meta = json.loads(next(runs.glob("vanilla-*.meta.json")).read_text())
    qs = {x.question_id: x for x in load_questions(Path(meta["question_file"]))}  # run from the repository root
    answers = {json.loads(line)["question_id"]: json.loads(line)["choices"][0]
               for line in next(runs.glob("vanilla-*.jsonl")).read_text().splitlines()}
    print(f"\npart 2: {runs}: every recorded divergence, gaps in float32 / transformers' bfloat16")
    for label, r in cert.items():
        for m in r["mismatches"]:
            v, question = answers[m["question_id"]], qs[m["question_id"]]
            msgs = []
            for k in range(m["turn"] + 1):
                msgs.append({"role": "user", "content": question.turns[k]})
                if k < m["turn"]:
                    msgs.append({"role": "assistant", "content": v["turns"][k]})
            ids = prompt_ids(target, msgs, 128)[0] + v["token_ids"][m["turn"]][:m["position"]]
            with torch.inference_mode():
                e = ref.hf(torch.tensor([ids])).logits[0, -1].float()
                b = target.hf(torch.tensor([ids])).logits[0, -1].float()
            gap = lambda x, t: "-" if t is None else f"{float(x.max() - x[t]):.3f}"  # noqa: E731
            vt, mt = m["vanilla_token"], m["method_token"]
            print(f"  {label:24s} q{m['question_id']} t{m['turn'] + 1} p{m['position']:3d} {m['kind']:8s} "
                  f"top {float(e.max()):6.2f}  vanilla {vt} {gap(e, vt)}/{gap(b, vt)}  method {mt} "
                  f"{gap(e, mt)}/{gap(b, mt)}  bf16 argmax {int(b.argmax())}  bound {m['tolerance']:.3f}")
