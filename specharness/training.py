"""What the epoch-based trainers (Kangaroo's adapter, EAGLE's head) share, so each keeps only its
model and loss: the output-directory contract (a run is started once and continued with
``--resume``), AdamW with linear warm-up and cosine decay, and the epoch loop that evaluates,
logs and checkpoints after every epoch so an interrupted run loses at most one epoch."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .checkpoint import save_atomic
from .errors import UsageError

STATE_FILE = "train_state.pt"
SUMMARY_KEY = "held_out_summary"  # in every trainer's report.json: what a result header quotes


def held_out_summary(train_rows: list[int], held_rows: list[int], top1: float, top1_own_prefix: float | None,
                     positions: int) -> dict:
    """The few numbers a data-scaling comparison needs from a trained drafter, named alike for every
    trainer: held-out top-1 agreement on the target's own continuation, and on the drafter's own
    drafted prefix (depth 2 after a right depth-1 draft): their difference is the off-policy gap."""
    return {"train_conversations": len(train_rows), "held_out_conversations": len(held_rows),
            "top1": top1, "top1_own_prefix": top1_own_prefix, "positions": positions}


def checkpoint_summary(path: str | Path | None) -> dict:
    """``held_out_summary`` from the report.json beside a checkpoint (empty when there is none), so
    result headers say what each checkpoint was trained on and a report needs no checkpoint."""
    try:
        return dict(json.loads((Path(path) / "report.json").read_text()).get(SUMMARY_KEY) or {})
    except (OSError, TypeError, ValueError):
        return {}


def check_held_out(options: dict, trainer: str) -> None:
    """An epoch trainer measures its drafter on held-out conversations, and its report and every
    result header quote that agreement: a run holding none out would quote a 0 it never measured."""
    if not options["held_out"]:
        raise UsageError(f"option {trainer}.held_out=0 holds no conversation out to measure the drafter's agreement "
                         "on (its report and result headers quote it); give a share above 0 (default 0.05)")


def claim_out_dir(out: Path, resume: bool) -> Path:
    """``out`` made ready for a run: a fresh run refuses a directory holding one, ``--resume``
    needs one. Returns the state file's path."""
    from .results import check_folder
    state_file = out / STATE_FILE
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out '{out}' is a file; a training run writes a folder: name a new one")
    if resume and not state_file.is_file():
        raise UsageError(f"--resume: no checkpoint in '{out}' ({STATE_FILE}); run without --resume first")
    if not resume and state_file.is_file():
        raise UsageError(f"'{out}' already holds a training run; pass --resume to continue it or choose another --out")
    check_folder(out)
    return state_file


def adamw_cosine(params, options: dict, n_items: int) -> tuple[torch.optim.Optimizer, object, int]:
    """AdamW (betas 0.9/0.95) with ``min(50, 10%)`` warm-up steps then cosine decay to zero over
    ``epochs`` passes of ``n_items`` in steps of ``seqs_per_step``. Returns (optimizer, schedule, steps)."""
    opt = torch.optim.AdamW(params, lr=options["lr"], weight_decay=options["weight_decay"], betas=(0.9, 0.95))
    total = math.ceil(n_items / options["seqs_per_step"]) * options["epochs"]
    warmup = max(1, min(50, total // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, k / max(1, total)))))
    return opt, sched, total


@dataclass
class Progress:
    """A run's state across epochs and invocations. The loss function adds to ``flops`` and may draw
    from ``rng`` (which also shuffles the epochs and is checkpointed)."""
    epoch: int = 0
    history: list = field(default_factory=list)
    train_s: float = 0.0
    flops: float = 0.0
    rng: torch.Generator = field(default_factory=torch.Generator)


def train_epochs(module: torch.nn.Module, opt, sched, state_file: Path, options: dict, resume: bool,
                 train_idx: list[int], load: Callable, positions: Callable, loss_of: Callable,
                 evaluate: Callable[[], dict], summary: Callable[[dict], str], name: str,
                 after_epoch: Callable[[int], None] | None = None, progress: Progress | None = None) -> Progress:
    """Train ``module`` for ``options['epochs']`` epochs (continuing a checkpoint when ``resume``).

    Each epoch shuffles ``train_idx`` (seeded by ``options['seed']``; the generator is
    checkpointed so a resumed run draws the same orders), runs :func:`train_epoch`, then
    ``evaluate()`` on held-out data, prints ``summary(evaluation)``, calls ``after_epoch(epoch)``
    and saves module, optimizer, schedule and progress atomically to ``state_file``. Pass
    ``progress`` to share its ``flops`` counter and ``rng`` with ``loss_of``."""
    prog = progress or Progress()
    g = prog.rng.manual_seed(options["seed"])
    if resume:
        st = torch.load(str(state_file), map_location="cpu", weights_only=True)
        if st["options"] != {k: options.get(k) for k in st["options"]}:
            raise UsageError(f"--resume: '{state_file.parent}' was trained with other options "
                             f"({st['options']}); repeat them or start a new --out")
        module.load_state_dict(st["module"])
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        prog.epoch, prog.history = st["epoch"], json.loads(st["history"])
        prog.train_s, prog.flops = st["train_s"], st["train_flops"]
        torch.set_rng_state(st["rng"])
        g.set_state(st["order_rng"])
    for epoch in range(prog.epoch, options["epochs"]):
        t0 = time.perf_counter()
        module.train()
        perm = [train_idx[j] for j in torch.randperm(len(train_idx), generator=g).tolist()]
        loss = train_epoch(perm, load, positions, loss_of, list(module.parameters()), opt, sched,
                           options["seqs_per_step"], f"{name} epoch {epoch + 1}/{options['epochs']}")
        module.eval()
        ev = evaluate()
        prog.epoch = epoch + 1
        prog.train_s += time.perf_counter() - t0
        prog.history.append({"epoch": prog.epoch, "train_loss": loss, "held_out": ev,
                             "seconds": time.perf_counter() - t0})
        print(f"epoch {prog.epoch}: train loss {loss:.4f}, {summary(ev)}", flush=True)
        if after_epoch is not None:
            after_epoch(prog.epoch)
        save_atomic({"module": module.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                     "epoch": prog.epoch, "history": json.dumps(prog.history), "train_s": prog.train_s,
                     "train_flops": prog.flops, "rng": torch.get_rng_state(), "order_rng": g.get_state(),
                     "options": dict(options)}, state_file)
    return prog


def train_epoch(items: list, load, positions, loss_of, params, opt, sched, seqs_per_step: int, desc: str) -> float:
    """One pass over ``items`` (already shuffled) in steps of ``seqs_per_step`` conversations;
    ``loss_of(conv)`` is a conversation's summed loss, averaged over the step's ``positions``;
    gradients clipped to norm 1. Returns the epoch's mean loss per position."""
    from tqdm import tqdm
    bar = tqdm(range(0, len(items), seqs_per_step), desc=desc, unit="step")
    run_loss, run_n = 0.0, 0
    for b0 in bar:
        chunk = [load(i) for i in items[b0:b0 + seqs_per_step]]
        n_pos = sum(positions(c) for c in chunk)
        if not n_pos:
            continue
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for conv in chunk:
            if positions(conv):
                loss = loss_of(conv) / n_pos
                loss.backward()
                step_loss += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        run_loss, run_n = run_loss + step_loss * n_pos, run_n + n_pos
        bar.set_postfix(loss=f"{run_loss / run_n:.3f}")
    bar.close()
    return run_loss / max(run_n, 1)
