"""EAGLE heads' top-1 agreement with the target on vanilla's own Spec-Bench answers (depths 1-3, own prefix).

The EAGLE trainer's held-out metric (`methods/eagle/train.py:evaluate`: depth 1 on the target's true last states,
depths 2-3 on the head's own features) on the benchmark's text, as agreement.py does for Kangaroo: every turn of
VANILLA_JSONL rebuilt as the runner built it, one float32 teacher-forced pass for the last states and the argmax.
usage: python eagle_agreement.py VANILLA_JSONL QUESTIONS_JSONL OUT_JSON NAME=HEAD_DIR...
"""
import collections
import json
import sys

import datasets
import torch

from specharness import selfdistill as sd
from specharness.methods.eagle.checkpoint import load_head
from specharness.methods.eagle.train import Conversations, evaluate
from specharness.model import TargetModel
from specharness.runner import prompt_ids

vanilla, questions, out = sys.argv[1:4]
torch.set_num_threads(2)
t = TargetModel.load("smollm2", dtype="float32")
qs = {q["question_id"]: q for q in map(json.loads, open(questions))}
rows, subs = {"input_ids": [], "loss_mask": []}, []
for r in map(json.loads, open(vanilla)):
    msgs = []
    for turn, answer in zip(qs[r["question_id"]]["turns"], r["choices"][0]["token_ids"]):
        msgs.append({"role": "user", "content": turn})
        ids, _ = prompt_ids(t, msgs, 128)
        seq = ids + answer
        rows["input_ids"].append(seq)
        rows["loss_mask"].append([int(len(ids) - 1 <= i < len(seq) - 1) for i in range(len(seq))])
        subs.append(r["subtask"])
        msgs.append({"role": "assistant", "content": t.decode(answer)})
ds = datasets.Dataset.from_dict(rows)
L = t.n_layers
f = sd.compute_features(t, ds, (L,), 1, progress=False)
feats = {"hidden": f[f"hidden.{L}"], "ids": f["topk_ids"], "probs": f["topk_probs"], "offsets": f["offsets"]}
groups = collections.defaultdict(list)
for i, s in enumerate(subs):
    groups[s].append(i)
groups["all"] = list(range(len(subs)))
result = {}
for spec in sys.argv[4:]:
    name, path = spec.split("=", 1)
    head, head_rows = load_head(path, t)
    head = head.float()
    convs = Conversations(ds, feats, t, head_rows)
    subset = t.head_rows(head_rows) if head_rows is not None else None
    got = {g: evaluate(head, t, convs, idx, subset, head_rows) for g, idx in groups.items()}
    result[name] = {"path": path, **got}
    a = got["all"]
    print(f"{name}: depth 1 {a['top1_depth1']:.3f}, depth 2 {a['top1_depth2']:.3f}, depth 3 {a['top1_depth3']:.3f}, "
          f"own prefix {a['top1_own_prefix']:.3f} (depth 1: "
          + ", ".join(f"{g} {v['top1_depth1']:.3f}" for g, v in got.items() if g != "all") + ")", flush=True)
json.dump(result, open(out, "w"), indent=1)
