"""Held-out agreement of EAGLE and EAGLE-3 heads on ONE measure: ``methods/eagle3/train.py``'s
``evaluate`` (the head unrolled on its own outputs exactly as it drafts), on the held-out
conversations of the shared self-distillation set. Each trainer's report.json measures its own head
its own way (EAGLE's depth 2 reruns every position on the head's features, not what a draft meets);
this puts both on the drafting-exact one.

    python results/smollm2-eagle3/agreement.py --out DIR [--conversations N] [-o KEY=VALUE ...] NAME=HEAD_DIR_OR_'shipped' ...

NAME starts with 'eagle3' for an EAGLE-3 head. Writes DIR/agreement.json and DIR/agreement.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from specharness import selfdistill as sd
from specharness.cli.common import engine_request
from specharness.methods.eagle.checkpoint import EAGLE, load_head, resolve_head_path
from specharness.methods.eagle.train import Conversations
from specharness.methods.eagle3 import drafter as eagle3
from specharness.methods.eagle3.train import evaluate, held_out_features
from specharness.options import resolve_options
from specharness.session import Session


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heads", nargs="+", metavar="NAME=DIR")
    ap.add_argument("--out", required=True)
    ap.add_argument("--conversations", type=int, default=1100)
    ap.add_argument("-o", dest="recipe", action="append", default=[], metavar="KEY=VALUE",
                    help="another option of the data's recipe (gen_dtype=bfloat16 for the 2200-conversation set)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    session = Session(engine_request(argparse.Namespace(model="smollm2", dtype="float32", compile="none", device="cpu",
                                                        threads=args.threads, engine="auto")))
    target = session.target
    opts = resolve_options("agreement", sd.RECIPE_OPTIONS, [f"conversations={args.conversations}", *args.recipe])
    ds, meta, _ = sd.load_or_generate(target, sd.recipe(opts), sd.data_dir(target, opts, sd.recipe(opts)))
    _, held = sd.split_rows(len(ds), opts)
    rows_ds = ds.select(held)
    results, features = {}, {}
    for item in args.heads:
        name, ref = item.split("=", 1)
        kind = eagle3.KIND if name.startswith("eagle3") else EAGLE
        path = resolve_head_path(target, "" if ref == "shipped" else ref, kind)
        head, rows = load_head(path, target, 8192, kind)  # the trained rows, all 8192 of them
        head = head.float()
        layers = head.layers if head.capture else (target.n_layers,)  # EAGLE: the state after the last layer
        if layers not in features:
            features[layers] = held_out_features(target, ds, held, layers, 16)
        convs = Conversations(rows_ds, features[layers], target, rows, normed=False)
        t0 = time.perf_counter()
        ev = evaluate(head, target, convs, list(range(len(held))), target.head_rows(rows).float(), rows, args.steps)
        report = json.loads((Path(path) / "report.json").read_text())
        results[name] = {"head": str(path), "layers": list(layers), "evaluation": ev, "seconds": time.perf_counter() - t0,
                         "trainer_summary": report.get("held_out_summary"), "epochs": report.get("epochs"),
                         "steps": report.get("steps", 1)}
        print(name, json.dumps(ev), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    header = {"command": " ".join([sys.executable.split("/")[-1], *sys.argv]), "commit": commit,
              "model": target.name, "dtype": "float32", "threads": args.threads, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "held_out_conversations": len(held)}
    (out / "agreement.json").write_text(json.dumps({"header": header, "heads": results}, indent=1))
    lines = ["| head | training conv. | epochs x unrolled steps | depth 1 | depth 2 | depth 3 | own prefix | positions |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        ev, tr = r["evaluation"], r["trainer_summary"] or {}
        lines.append(f"| {name} | {tr.get('train_conversations', '?')} | {r['epochs']} x {r['steps']} | "
                     + " | ".join(f"{100 * ev[f'top1_depth{j + 1}']:.1f}%" for j in range(args.steps))
                     + f" | {100 * ev['top1_own_prefix']:.1f}% | {ev['positions']} |")
    (out / "agreement.md").write_text(f"Held-out top-1 agreement, drafting-exact (`{header['command']}` at {commit}, "
                                      f"float32, {len(held)} held-out conversations)\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
