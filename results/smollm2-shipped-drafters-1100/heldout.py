"""Held-out agreement of drafter checkpoints on ONE held-out set: the 55 conversations this folder's
data holds out (5% of 1100, seed 0), so the shipped drafters and those they replace are compared on
the same positions, each through its own trainer's evaluation (float32, the target frozen).
Usage (repository root): python results/smollm2-shipped-drafters-1100/heldout.py KIND=DIR [KIND=DIR ...]
KIND: eagle | kangaroo | medusa. Prints one JSON line per checkpoint."""

import json
import sys
from pathlib import Path

import torch

from specharness import selfdistill as sd
from specharness.methods.eagle import train as eagle_train
from specharness.methods.eagle.checkpoint import load_head
from specharness.methods.kangaroo import train as kangaroo_train
from specharness.methods.kangaroo.checkpoint import load_adapter
from specharness.methods.medusa import train as medusa_train
from specharness.methods.medusa.checkpoint import load_heads
from specharness.model import TargetModel
from specharness.options import resolve_options

torch.set_num_threads(2)
DATA = {"conversations": "1100", "held_out": "0.05"}  # the shared recipe of run.sh
target = TargetModel.load(dtype="float32")


def data(options: dict, **recipe):
    """The shared data set, its header, its directory and its held-out rows."""
    s = sd.recipe(options, **recipe)
    ds, meta, _ = sd.load_or_generate(target, s, sd.data_dir(target, options, s))
    _, held = sd.split_rows(len(ds), options)
    return ds, meta, sd.data_dir(target, options, s), held


def eagle(path: Path) -> dict:
    opts = resolve_options("eagle", eagle_train.OPTIONS, DATA)
    ds, meta, where, held = data(opts)
    feats = sd.features(target, ds, meta, where, target.n_layers, opts["topk"])
    head, rows = load_head(path, target)
    head = head.float().eval()
    subset = target.head_rows(rows) if rows is not None else None
    ev = eagle_train.evaluate(head, target, eagle_train.Conversations(ds, feats, target, rows), held, subset, rows)
    return {"top1": ev["top1_depth1"], "top1_own_prefix": ev["top1_own_prefix"], "depth2": ev["top1_depth2"],
            "depth3": ev["top1_depth3"], "positions": ev["positions"], "held_out_conversations": len(held)}


def kangaroo(path: Path) -> dict:
    opts = resolve_options("kangaroo", kangaroo_train.OPTIONS, DATA)
    l = opts["exit_layer"]
    ds, meta, where, held = data(opts, capture_layers=(l,), topk=opts["topk"])
    feats = sd.features(target, ds, meta, where, l, opts["topk"])
    adapter, vocab, cfg = load_adapter(path, target, l)
    n = int((cfg.get("specharness") or {}).get("draft_vocab") or 0)
    rows = vocab[:n].contiguous() if n and vocab is not None else None
    subset = target.head_rows(rows) if rows is not None else None
    batches = kangaroo_train._Batches(feats, rows, target.vocab_size, target.device)
    ev = kangaroo_train._evaluate(target, adapter.float().eval(), batches, held, rows, subset)
    return {"top1": ev["top1_agreement"], "top1_own_prefix": ev["top1_own_prefix"], "positions": ev["positions"],
            "held_out_conversations": len(held), "draft_vocab": n}


def medusa(path: Path) -> dict:
    opts = resolve_options("medusa", medusa_train.OPTIONS, DATA)
    ds, _, _, held = data(opts)
    heads = load_heads(path, target)
    feat = medusa_train.teacher_features(target, ds, held, heads.n_heads, opts["topk"], progress=False)
    top1 = medusa_train.evaluate(heads.float(), target, feat, False)
    return {"top1": top1[0], "top1_per_head": top1, "held_out_conversations": len(held)}


for arg in sys.argv[1:]:
    kind, path = arg.split("=", 1)
    print(json.dumps({"kind": kind, "checkpoint": path, **globals()[kind](Path(path))}), flush=True)
