"""Kangaroo adapters' top-1 agreement with the target on vanilla's own Spec-Bench answers, per subtask.

Teacher-forced, float32: every turn of VANILLA_JSONL (a compare result file: its token ids) is rebuilt as the
runner built it (chat template, earlier answers as text), run once through the target, and at every answer
position the adapter's draft (exit-layer state -> adapter -> draft head) is compared with the target's argmax,
as in the trainer's held-out agreement (`methods/kangaroo/train.py`). Also printed: how often the target's
argmax lies in each draft-head size's rows, and the target's own top-1 probability (how predictable it is).

usage: python agreement.py VANILLA_JSONL QUESTIONS_JSONL OUT_JSON NAME=ADAPTER_DIR... [--sizes 4096,0]
"""
import argparse
import collections
import json

import datasets
import torch

from specharness import selfdistill as sd
from specharness.methods.kangaroo.checkpoint import load_adapter
from specharness.methods.kangaroo.train import _Batches, _evaluate
from specharness.model import TargetModel
from specharness.runner import prompt_ids

ap = argparse.ArgumentParser()
ap.add_argument("vanilla")
ap.add_argument("questions")
ap.add_argument("out")
ap.add_argument("adapters", nargs="+")
ap.add_argument("--sizes", default="4096")
ap.add_argument("--max-new-tokens", type=int, default=128)
a = ap.parse_args()
torch.set_num_threads(2)
t = TargetModel.load("smollm2", dtype="float32")
qs = {q["question_id"]: q for q in map(json.loads, open(a.questions))}
rows, subs = {"input_ids": [], "loss_mask": []}, []
for r in map(json.loads, open(a.vanilla)):
    msgs = []
    for turn, answer in zip(qs[r["question_id"]]["turns"], r["choices"][0]["token_ids"]):
        msgs.append({"role": "user", "content": turn})
        ids, _ = prompt_ids(t, msgs, a.max_new_tokens)
        seq = ids + answer
        rows["input_ids"].append(seq)
        rows["loss_mask"].append([int(len(ids) - 1 <= i < len(seq) - 1) for i in range(len(seq))])
        subs.append(r["subtask"])
        msgs.append({"role": "assistant", "content": t.decode(answer)})
f = sd.compute_features(t, datasets.Dataset.from_dict(rows), (2,), 1, progress=False)
feats = {"hidden": f["hidden.2"], "ids": f["topk_ids"], "probs": f["topk_probs"], "offsets": f["offsets"]}
o = f["offsets"].tolist()
by_sub = collections.defaultdict(list)
for i, s in enumerate(subs):
    by_sub[s].append(i)
groups = {**by_sub, "all": list(range(len(subs)))}


def answer_positions(idx):
    return [j for i in idx for j in range(o[i], o[i + 1]) if int(f["topk_ids"][j, 0]) >= 0]


result = {"turns": len(subs), "answer_positions": len(answer_positions(groups["all"])),
          "target_top1_prob": {g: float(f["topk_probs"][answer_positions(idx), 0].mean()) for g, idx in groups.items()},
          "adapters": {}}
for spec in a.adapters:
    name, path = spec.split("=", 1)
    adapter, order, _ = load_adapter(path, t, 2)
    adapter = adapter.float()
    for n in map(int, a.sizes.split(",")):
        head = order[:n].contiguous() if n and order is not None else None
        subset = t.head_rows(head) if head is not None else None
        batches = _Batches(feats, head, t.vocab_size, t.device)
        got = {g: _evaluate(t, adapter, batches, idx, head, subset) for g, idx in groups.items()}
        inside = None
        if head is not None:
            member = torch.zeros(t.vocab_size, dtype=torch.bool)
            member[head.cpu()] = True
            inside = {g: float(member[f["topk_ids"][answer_positions(idx), 0].long()].float().mean())
                      for g, idx in groups.items()}
        result["adapters"][f"{name} rows={n or 'all'}"] = {
            "path": path, "draft_rows": n, "top1": {g: v["top1_agreement"] for g, v in got.items()},
            "own_prefix": got["all"]["top1_own_prefix"], "target_argmax_in_rows": inside}
        print(f"{name} rows={n or 'all'}: top-1 {got['all']['top1_agreement']:.3f} ("
              + ", ".join(f"{g} {v['top1_agreement']:.3f}" for g, v in got.items() if g != "all") + ")", flush=True)
json.dump(result, open(a.out, "w"), indent=1)
