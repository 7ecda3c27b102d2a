"""Kangaroo's eta and gamma for an adapter, predicted offline before any timed run.

Teacher-forced, float32: every turn of VANILLA_JSONL is rebuilt as the runner built it and run once through
the target (as ../smollm2-kangaroo-specbench-agreement/agreement.py does); at every answer position the
adapter gives its greedy draft and that draft's confidence (top-1 probability over the draft head's rows,
temperature 1: what the drafter's early-exit test reads). A greedy round that starts at position j drafts
d1 = draft(j); it goes on while the last draft's confidence > eta and fewer than gamma are drafted. While every
draft so far equals the target's token the next draft is exactly the teacher-forced one (the adapter reads
only the target's own shallow states); after a wrong draft the round's acceptance is settled, and the later
drafts' confidences are not known offline: the teacher-forced position's confidence stands in for them
(it only sets how many wasted drafts the round pays for). The round accepts the leading matches m and
moves m + 1 positions.

Cost per round, from ROUNDS_JSONL (a compare file of this adapter at its current settings, same machine):
the median draft time by drafted count, the median verification time by width and the median accept
time; a turn also pays its prefill, the same for every setting. Width 5-8 (gamma >= 4) has no measured
time in a gamma-3 file; --width8-ms gives it (the deep layers' width-8 graph), else gamma >= 4 is skipped.
The prediction is each setting's time per token relative to the ROUNDS_JSONL file's own setting (sim'd
the same way), so the shared error cancels; the timed compare decides.

usage: python sim.py VANILLA_JSONL QUESTIONS_JSONL ROUNDS_JSONL ADAPTER_DIR OUT_JSON [--width8-ms X]
"""
import argparse
import collections
import json
import statistics

import datasets
import torch

from specharness import selfdistill as sd
from specharness.methods.kangaroo.checkpoint import load_adapter
from specharness.methods.kangaroo.train import _Batches, _step_outputs
from specharness.model import TargetModel
from specharness.runner import prompt_ids

ap = argparse.ArgumentParser()
ap.add_argument("vanilla")
ap.add_argument("questions")
ap.add_argument("rounds")
ap.add_argument("adapter")
ap.add_argument("out")
ap.add_argument("--width8-ms", type=float, default=None)
ap.add_argument("--etas", default="0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")
ap.add_argument("--gammas", default="1,2,3,4,6")
ap.add_argument("--base", default="0.6,3", help="the setting ROUNDS_JSONL ran at: eta,gamma")
ap.add_argument("--max-new-tokens", type=int, default=128)
a = ap.parse_args()
torch.set_num_threads(2)

# ---- the costs, from the timed file ----------------------------------------------------------------------
draft_ms, verify_ms, accept_ms = collections.defaultdict(list), collections.defaultdict(list), []
for line in open(a.rounds):
    for R in json.loads(line)["choices"][0]["rounds"]:
        for k, ds, vs, acs, w in zip(*(R[x][1:] for x in ("drafted", "draft_s", "verify_s", "accept_s", "width"))):
            draft_ms[k].append(1e3 * ds)
            verify_ms[w].append(1e3 * vs)
            accept_ms.append(1e3 * acs)
draft_ms = {k: statistics.median(v) for k, v in draft_ms.items() if len(v) >= 20}
per_draft = (draft_ms[max(draft_ms)] - draft_ms[1]) / (max(draft_ms) - 1)
verify_ms = {w: statistics.median(v) for w, v in verify_ms.items() if len(v) >= 20}
accept = statistics.median(accept_ms)


def round_ms(k: int) -> float | None:
    draft = draft_ms.get(k, draft_ms[1] + per_draft * (k - 1))
    w = k + 1
    verify = verify_ms.get(w) if w <= 4 else a.width8_ms
    return None if verify is None else draft + verify + accept


# ---- drafts and confidences, teacher-forced -----------------------------------------------------------
t = TargetModel.load("smollm2", dtype="float32")
qs = {q["question_id"]: q for q in map(json.loads, open(a.questions))}
rows = {"input_ids": [], "loss_mask": []}
for r in map(json.loads, open(a.vanilla)):
    if r["question_id"] not in qs:
        continue
    msgs = []
    for turn, answer in zip(qs[r["question_id"]]["turns"], r["choices"][0]["token_ids"]):
        msgs.append({"role": "user", "content": turn})
        ids, _ = prompt_ids(t, msgs, a.max_new_tokens)
        seq = ids + answer
        rows["input_ids"].append(seq)
        rows["loss_mask"].append([int(len(ids) - 1 <= i < len(seq) - 1) for i in range(len(seq))])
        msgs.append({"role": "assistant", "content": t.decode(answer)})
f = sd.compute_features(t, datasets.Dataset.from_dict(rows), (2,), 1, progress=False)
feats = {"hidden": f["hidden.2"], "ids": f["topk_ids"], "probs": f["topk_probs"], "offsets": f["offsets"]}
adapter, order, cfg = load_adapter(a.adapter, t, 2)
adapter = adapter.float()
n_rows = int((cfg.get("specharness") or {}).get("draft_vocab") or 0)  # what the drafter uses by default
head = order[:n_rows].contiguous() if n_rows and order is not None else None
subset = t.head_rows(head) if head is not None else None
batches = _Batches(feats, head, t.vocab_size, t.device)
turns = []  # per turn: (hit, confidence) at each answer position, in order
with torch.no_grad():
    for i in range(len(rows["input_ids"])):
        x, sel, _, _, top1 = batches(i)
        logits = _step_outputs(t, adapter, x, sel, subset)
        pred = logits.argmax(-1).cpu()
        pred = head.cpu()[pred] if head is not None else pred
        conf = torch.softmax(logits, -1).max(-1).values.cpu()
        turns.append(((pred == top1).tolist(), conf.tolist()))


def simulate(eta: float, gamma: int) -> dict:
    rounds = tokens = drafted = 0
    ms = 0.0
    widths = collections.Counter()
    for hit, conf in turns:
        j, n = 0, len(hit)
        while j < n:
            k, m, matching = 0, 0, True
            while True:
                p = min(j + k, n - 1)
                k += 1
                if matching and hit[p]:
                    m += 1
                else:
                    matching = False
                if conf[p] <= eta or k >= gamma or j + k >= n:
                    break
            cost = round_ms(k)
            if cost is None:
                return {}
            rounds += 1
            drafted += k
            widths[k + 1] += 1
            ms += cost
            j += m + 1
            tokens += m + 1
    return {"CR": tokens / rounds, "drafts_per_round": drafted / rounds, "ms_per_token": ms / tokens,
            "width_share": {w: c / rounds for w, c in sorted(widths.items())}}


base_eta, base_gamma = a.base.split(",")
base = simulate(float(base_eta), int(base_gamma))
out = {"costs_ms": {"draft_by_count": draft_ms, "verify_by_width": verify_ms, "accept": accept,
                    "width8": a.width8_ms}, "turns": len(turns), "base": a.base, "settings": {}}
print(f"{len(turns)} turns; base eta,gamma = {a.base}: CR {base['CR']:.3f}, {base['ms_per_token']:.2f} ms/token")
print("eta  gamma  CR     drafts/round  ms/token  speed vs base")
for g in map(int, a.gammas.split(",")):
    for e in map(float, a.etas.split(",")):
        s = simulate(e, g)
        if not s:
            continue
        s["speed_vs_base"] = base["ms_per_token"] / s["ms_per_token"]
        out["settings"][f"{e},{g}"] = s
        print(f"{e:.2f} {g:5d}  {s['CR']:.3f}  {s['drafts_per_round']:.2f}          {s['ms_per_token']:.2f}     "
              f"{s['speed_vs_base']:.3f}")
json.dump(out, open(a.out, "w"), indent=1)
