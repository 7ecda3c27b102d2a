"""EAGLE's and EAGLE-3's shipped heads on vanilla's own Spec-Bench answers: top-1 and top-4 agreement with the
target's argmax at depths 1-3, unrolled on their own outputs as they draft (``methods/eagle3/train.py``'s
``evaluate``, the measure ``agreement/`` used on held-out self-distilled text), per subtask.

Why: on the self-distilled held-out text the EAGLE-3 head agrees more than EAGLE's (``agreement/agreement.md``),
yet on Spec-Bench its trees keep no more a round (n10-v9, n10-v10: CR level). A tree keeps any of its top-k, and
Spec-Bench is not the self-distilled text; this says which of the two it is. Every turn of VANILLA_JSONL is rebuilt
as the runner built it (chat template, earlier answers as text) and run once, float32, teacher-forced; heads at the
table's draft vocabulary (4096 rows).
usage: python specbench_agreement.py VANILLA_JSONL QUESTIONS_JSONL OUT_DIR"""
import collections
import json
import sys
from pathlib import Path

import datasets
import torch

from specharness.methods.eagle.checkpoint import EAGLE, load_head, resolve_head_path
from specharness.methods.eagle.train import Conversations
from specharness.methods.eagle3 import drafter as eagle3
from specharness.methods.eagle3.train import evaluate, held_out_features
from specharness.model import TargetModel
from specharness.runner import recorded_turns
from specharness.tasks.specbench import load_questions

vanilla, questions, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
max_new = json.load(open(vanilla.removesuffix(".jsonl") + ".meta.json"))["max_new_tokens"]  # as the run cut prompts
torch.set_num_threads(2)
torch.manual_seed(0)
t = TargetModel.load("smollm2", dtype="float32")
qs = {q.question_id: q for q in load_questions(questions)}
rows, subs = {"input_ids": [], "loss_mask": []}, []
for rec in map(json.loads, open(vanilla)):
    for prompt, answer in recorded_turns(t, rec, qs[rec["question_id"]], max_new):
        seq = prompt + answer  # labelled: every prediction of an answer token
        rows["input_ids"].append(seq)
        rows["loss_mask"].append([int(len(prompt) - 1 <= i < len(seq) - 1) for i in range(len(seq))])
        subs.append(rec["subtask"])
ds = datasets.Dataset.from_dict(rows)
everything = list(range(len(subs)))
groups = collections.defaultdict(list)
for i, s in enumerate(subs):
    groups[s].append(i)
groups["all"] = everything
result, features = {}, {}
for name, kind in (("eagle", EAGLE), ("eagle3", eagle3.KIND)):
    path = resolve_head_path(t, "", kind)
    head, head_rows = load_head(path, t, 4096, kind)
    head = head.float()
    layers = head.layers if head.capture else (t.n_layers,)  # EAGLE reads the state after the last layer
    if layers not in features:
        features[layers] = held_out_features(t, ds, everything, layers, 1)
    convs = Conversations(ds, features[layers], t, head_rows, normed=False)
    subset = t.head_rows(head_rows).float()
    result[name] = {"head": str(path), **{g: evaluate(head, t, convs, idx, subset, head_rows) for g, idx in groups.items()}}
    print(name, json.dumps(result[name]["all"]), flush=True)
out.mkdir(parents=True, exist_ok=True)
(out / "specbench_agreement.json").write_text(json.dumps({"command": " ".join(sys.argv), "turns": len(subs),
                                                          "heads": result}, indent=1))
lines = ["| head | subtask | top-1 depth 1 | 2 | 3 | top-4 depth 1 | 2 | 3 | own prefix | positions |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for g in ["all", *sorted(k for k in groups if k != "all")]:
    for name in result:
        ev = result[name][g]
        lines.append(f"| {name} | {g} | " + " | ".join(f"{100 * ev[f'top{k}_depth{j}']:.1f}%" for k in (1, 4) for j in (1, 2, 3))
                     + f" | {100 * ev['top1_own_prefix']:.1f}% | {ev['positions']} |")
(out / "specbench_agreement.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
