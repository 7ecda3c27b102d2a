"""``python -m specharness train medusa``: Medusa-1 heads by self-distillation, target frozen.

Data: the shared self-distillation conversations of ``specharness.selfdistill`` (the same recipe
and directory the Kangaroo trainer uses, generated once and reused). From them this trainer derives
its own teacher features in one frozen, teacher-forced target pass per conversation: the normed
final hidden state h_t at every position (what the heads read at inference, ``state.last_hidden``)
and the target's top-``topk`` next-token distribution at every trained position.

Loss: head k (1..K) reads h_t and is trained against the target's distribution of token t+1+k
(the distribution at position t+k), as soft cross-entropy over the target's top-k renormalised,
at every t whose token t+1+k is one of the target's answer tokens (selfdistill's loss mask). The
heads are independent parameters, so no per-head loss weights are needed with AdamW.

Budget: ``max_minutes`` (default 45) bounds the teacher pass plus training on this CPU; when it
runs out the heads are saved as they are, marked in the report, and ``--resume`` continues from
the last checkpoint (heads, optimizer, position in the epoch). Heads go to
``cache_root()/medusa/<model>`` in the official Medusa-1 layout (``medusa_lm_head.pt`` +
``config.json``), where ``run --method medusa`` finds them; they are never committed.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specharness import selfdistill, training
from specharness.checkpoint import save_atomic
from specharness.errors import UsageError
from specharness.options import OptionSpec

from .checkpoint import default_heads_dir, save_heads
from .heads import MedusaHeads

STATE_FILE = "train_state.pt"
TEACHER_FILE = "teacher.pt"

OPTIONS = [
    OptionSpec("heads", "int", 4, "Medusa heads to train", min=1),
    OptionSpec("layers", "int", 1, "residual blocks per head", min=1),
    OptionSpec("epochs", "int", 2, "passes over the training positions", min=1),
    OptionSpec("lr", "float", 1e-3, "AdamW learning rate", min=0.0),
    OptionSpec("weight_decay", "float", 0.0, "AdamW weight decay", min=0.0),
    OptionSpec("batch", "int", 256, "positions per optimisation step", min=1),
    OptionSpec("topk", "int", 32, "the target's top-k probabilities used as the soft label", min=1),
    OptionSpec("max_minutes", "float", 45.0, "wall-time budget for the teacher pass + training "
               "(0 = none); when spent, heads are saved and --resume continues", min=0.0),
    OptionSpec("bf16", "str", "auto", "bfloat16 autocast for the head matmuls: auto (when the CPU has AMX "
               "or a CUDA device), true, false", choices=("auto", "true", "false")),
    OptionSpec("checkpoint_minutes", "float", 10.0, "write a resumable checkpoint this often", min=0.0),
    OptionSpec("lm_head", "str", "shared", "'own': each head has its own LM head, initialised from the target's "
               "(Medusa-1 as published; 85% of SmolLM2's size for 4 heads); 'shared': residual blocks feeding the "
               "target's own head (a few MB)", choices=("own", "shared")),
    *selfdistill.RECIPE_OPTIONS,
]


def _use_bf16(option: str, target) -> bool:
    if option != "auto":
        return option == "true"
    if target.device.type == "cuda":
        return True
    try:  # bf16 matmuls are ~2x faster than float32 only with AMX tiles
        return "amx_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# ---- teacher features --------------------------------------------------------------------------------
@torch.inference_mode()
def teacher_features(target, dataset, rows: list[int], n_heads: int, topk: int, progress: bool = True) -> dict:
    """Per stored position: h (normed final hidden), the target's top-k for the next token (or -1).

    Positions kept per row: from ``prompt_len - 1 - n_heads`` (the earliest whose k-th head target
    can be an answer token) to the second last; ``row_end[i]`` marks each position's row end.
    """
    from tqdm import tqdm
    L = target.n_layers
    xs, ids_all, probs_all, ends = [], [], [], []
    tokens, ctx = 0, 0.0
    for input_ids, loss_mask in tqdm(selfdistill.examples(dataset, rows), total=len(rows),
                                     desc="medusa teacher", unit="conv", disable=not progress):
        n = len(input_ids)
        trained = loss_mask.nonzero()[:, 0]
        if len(trained) == 0 or n < 2:
            continue
        cache = target.new_cache(n)
        hn = target.norm(target.layers(target.embed(input_ids.to(target.device)), 0, 0, L, cache))
        tokens, ctx = tokens + n, ctx + n * n / 2
        a, b = max(0, int(trained[0]) - n_heads), n - 1
        ids = torch.full((b - a, topk), -1, dtype=torch.int32)
        probs = torch.zeros((b - a, topk), dtype=torch.float16)
        sel = trained[trained < b]
        if len(sel):
            p = torch.softmax(target.head(hn[sel]).float(), -1)
            tp, ti = p.topk(topk, -1)
            ids[sel - a], probs[sel - a] = ti.to(torch.int32).cpu(), tp.to(torch.float16).cpu()
        xs.append(hn[a:b].float().cpu())
        ids_all.append(ids)
        probs_all.append(probs)
        ends.append(torch.full((b - a,), (sum(len(x) for x in xs)), dtype=torch.int64))
    if not xs:
        raise UsageError("the self-distillation data holds no trained positions")
    flops = selfdistill.forward_flops(target, tokens, ctx / max(tokens, 1))
    return {"x": torch.cat(xs), "ids": torch.cat(ids_all), "probs": torch.cat(probs_all),
            "row_end": torch.cat(ends), "tokens": tokens, "flops": flops}


def valid_targets(feat: dict, n_heads: int) -> torch.Tensor:
    """[K, N] bool: position i has a target for head k (i + k in the same row and trained)."""
    N = len(feat["x"])
    idx = torch.arange(N)
    out = torch.zeros((n_heads, N), dtype=torch.bool)
    for k in range(1, n_heads + 1):
        j = idx + k
        ok = j < feat["row_end"]
        jj = j.clamp(max=N - 1)
        out[k - 1] = ok & (feat["ids"][jj, 0] >= 0)
    return out


def head_losses(heads, target, x: torch.Tensor, feat: dict, idx: torch.Tensor, valid: torch.Tensor,
                bf16: bool) -> tuple[list[torch.Tensor], list[tuple[int, int]]]:
    """Soft cross-entropy of each head on the positions ``idx``; also (top-1 hits, count) per head."""
    losses, hits = [], []
    for k in range(heads.n_heads):
        m = valid[k, idx]
        if not m.any():
            losses.append(None)
            hits.append((0, 0))
            continue
        pos = idx[m]
        tgt_ids = feat["ids"][pos + k + 1].long()
        tgt_p = feat["probs"][pos + k + 1].float()
        tgt_p = tgt_p / tgt_p.sum(-1, keepdim=True)
        with torch.autocast(device_type=target.device.type, dtype=torch.bfloat16, enabled=bf16):
            h = x[m]
            for block in list(heads.heads[k])[:heads.n_layers]:
                h = block(h)
            z = heads.heads[k][-1](h) if heads.own_head else target.head(h)
        logp = F.log_softmax(z.float(), -1)
        losses.append(-(tgt_p * logp.gather(1, tgt_ids)).sum(-1).mean())
        hits.append((int((z.argmax(-1) == tgt_ids[:, 0]).sum()), int(m.sum())))
    return losses, hits


# ---- the trainer -------------------------------------------------------------------------------------
def _key(meta: dict, rows: list[int], options: dict) -> str:
    blob = json.dumps([meta.get("settings"), meta.get("model"), meta.get("tokens"), rows,
                       options["heads"], options["topk"]], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run(target, options: dict, out_dir: Path | None, resume: bool, progress: bool = True) -> dict:
    from tqdm import tqdm

    started = time.perf_counter()
    K, layers = options["heads"], options["layers"]
    out = Path(out_dir) if out_dir else default_heads_dir(target, options["lm_head"])
    out.mkdir(parents=True, exist_ok=True)
    budget = options["max_minutes"] * 60 or math.inf
    bf16 = _use_bf16(options["bf16"], target)

    # 1. the shared self-distillation data (generated once, reused by every trainer)
    settings = selfdistill.recipe(options)
    data_dir = selfdistill.data_dir(target, options, settings)
    t0 = time.perf_counter()
    dataset, meta, reused = selfdistill.load_or_generate(target, settings, data_dir, progress)
    data_wall = time.perf_counter() - t0
    train_rows, held_rows = selfdistill.split_rows(len(dataset), options)

    # 2. teacher features (cached beside the heads, keyed by data and options)
    state_path, teacher_path = out / STATE_FILE, out / TEACHER_FILE
    key = _key(meta, train_rows + [-1] + held_rows, options)
    feats = None
    if teacher_path.is_file():
        cached = torch.load(teacher_path, weights_only=True)
        if cached.get("key") == key:
            feats = cached
    t0 = time.perf_counter()
    if feats is None:
        feats = {"key": key, "train": teacher_features(target, dataset, train_rows, K, options["topk"], progress),
                 "held": teacher_features(target, dataset, held_rows, K, options["topk"], progress)
                 if held_rows else None}
        feats["wall_s"] = time.perf_counter() - t0
        save_atomic(feats, teacher_path)
    teacher_wall = feats["wall_s"]
    train, held = feats["train"], feats["held"]
    valid = valid_targets(train, K)
    order_pool = valid.any(0).nonzero()[:, 0]

    # 3. heads, optimizer, resume
    with torch.random.fork_rng(devices=[]):  # the blocks' biases start random (as Medusa's): seed them
        torch.manual_seed(options["seed"])
        own = options["lm_head"] == "own"
        heads = MedusaHeads(target.hidden_size, target.vocab_size, K, layers, own_head=own,
                            init_head=target.head_weight.float() if own else None).to(target.device)
    opt = torch.optim.AdamW(heads.parameters(), lr=options["lr"], weight_decay=options["weight_decay"])
    steps_per_epoch = math.ceil(len(order_pool) / options["batch"])
    total_steps = steps_per_epoch * options["epochs"]
    sched = torch.optim.lr_scheduler.LambdaLR(  # short warm-up, then cosine to 10%
        opt, lambda s: min(1.0, (s + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))))
    step, train_wall, history = 0, 0.0, []
    if resume and not state_path.is_file():
        raise UsageError(f"--resume: no checkpoint in '{out}' ({STATE_FILE}); run without --resume first")
    if not resume and state_path.is_file():
        raise UsageError(f"'{out}' already holds a Medusa training run; pass --resume to continue it, or "
                         "choose another --out (or delete that directory) to start over")
    if resume:
        st = torch.load(state_path, weights_only=True)
        if st.get("key") != key or st.get("options_key") != _options_key(options):
            raise UsageError(f"the checkpoint in {out} was trained with other data or options; drop "
                             "--resume to start over, or give the same -o options")
        heads.load_state_dict(st["heads"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        step, train_wall, history = st["step"], st["train_wall"], st["history"]

    def checkpoint() -> None:
        save_atomic({"key": key, "options_key": _options_key(options), "heads": heads.state_dict(),
                      "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step,
                      "train_wall": train_wall, "history": history}, state_path)

    # 4. train
    x_all = train["x"].to(target.device)
    flops_per_example = 6 * (layers * (target.hidden_size ** 2 + target.hidden_size)
                             + target.vocab_size * target.hidden_size)
    spent = lambda: teacher_wall + train_wall  # noqa: E731  (data generation is shared, not counted)
    stopped_by_budget = False
    last_ckpt = time.perf_counter()
    bar = tqdm(total=total_steps, initial=step, desc="medusa heads", unit="step", disable=not progress)
    heads.train()
    try:
        while step < total_steps:
            if spent() >= budget:
                stopped_by_budget = True
                break
            epoch, s_in = divmod(step, steps_per_epoch)
            g = torch.Generator().manual_seed(options["seed"] * 1000 + epoch)
            perm = order_pool[torch.randperm(len(order_pool), generator=g)]
            idx = perm[s_in * options["batch"]:(s_in + 1) * options["batch"]]
            t_step = time.perf_counter()
            losses, hits = head_losses(heads, target, x_all[idx], train, idx, valid, bf16)
            loss = sum(l for l in losses if l is not None)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            train_wall += time.perf_counter() - t_step
            history.append({"step": step, "loss": [None if l is None else round(float(l.detach()), 4) for l in losses],
                            "top1": [round(h / n, 4) if n else None for h, n in hits]})
            bar.update(1)
            bar.set_postfix_str(f"loss {float(loss.detach()):.3f} top1 " + " ".join(
                f"{h / n:.2f}" if n else "-" for h, n in hits))
            if options["checkpoint_minutes"] and time.perf_counter() - last_ckpt > options["checkpoint_minutes"] * 60:
                checkpoint()
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        bar.close()
        checkpoint()
        print(f"\nspecharness: interrupted at step {step}/{total_steps}; checkpoint saved in {out}; rerun "
              "with --resume to continue", flush=True)
        raise
    bar.close()
    heads.eval()
    if step < total_steps:
        checkpoint()
    elif state_path.is_file():  # finished: nothing left to resume (the optimizer state is ~3x the heads)
        state_path.unlink()

    # 5. evaluate and save
    held_top1 = evaluate(heads, target, held, bf16) if held is not None else None
    examples = int(valid.sum()) * step / max(total_steps, 1) * options["epochs"]
    n_params = heads.n_parameters
    report = {
        "heads_dir": str(out),
        "heads": K, "layers_per_head": layers,
        "parameters": n_params,
        "parameters_per_head": n_params // K,
        "target_parameters": target.n_parameters,
        "steps": step, "total_steps": total_steps, "epochs": options["epochs"],
        "completed": step >= total_steps, "stopped_by_budget": stopped_by_budget,
        "bf16_autocast": bf16,
        "train_positions": len(order_pool), "held_out_positions": len(held["x"]) if held else 0,
        "held_out_top1_agreement_per_head": held_top1,
        "last_train_loss_per_head": history[-1]["loss"] if history else None,
        "wall_time_s": {"data_generation_shared": meta.get("wall_time_s", {}).get("total"),
                        "data_reused": reused, "data_load": data_wall, "teacher": teacher_wall,
                        "train": train_wall, "this_invocation": time.perf_counter() - started},
        "flops": {"data_generation_shared": meta.get("flops", {}).get("total"),
                  "teacher": train["flops"] + (held["flops"] if held else 0),
                  "train": examples * flops_per_example},
        "data": {"dir": str(data_dir), "conversations": meta.get("conversations"),
                 "answer_tokens": meta.get("answer_tokens")},
        "options": options,
        training.SUMMARY_KEY: training.held_out_summary(train_rows, held_rows, held_top1[0] if held_top1 else None,
                                                        None, len(held["x"]) if held else 0),
    }
    save_heads(heads, out, target, {"specharness_training": {
        k: report[k] for k in ("steps", "total_steps", "completed", "held_out_top1_agreement_per_head")}})
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    if not report["completed"]:
        print(f"specharness: training stopped after {step}/{total_steps} steps (budget); heads saved in {out}; "
              "rerun with --resume to continue", flush=True)
    return report


def _options_key(options: dict) -> str:
    keep = {k: options[k] for k in ("heads", "layers", "epochs", "lr", "weight_decay", "batch", "topk",
                                    "held_out", "seed", "conversations", "max_answer_tokens")}
    return json.dumps(keep, sort_keys=True)


@torch.no_grad()
def evaluate(heads, target, feat: dict, bf16: bool) -> list[float | None]:
    """Held-out top-1 agreement of head k with the target's own next token at offset k."""
    K = heads.n_heads
    valid = valid_targets(feat, K)
    totals = [[0, 0] for _ in range(K)]
    x_all = feat["x"].to(target.device)
    for s in range(0, len(x_all), 512):
        idx = torch.arange(s, min(s + 512, len(x_all)))
        _, hits = head_losses(heads, target, x_all[idx], feat, idx, valid, bf16)
        for k, (h, n) in enumerate(hits):
            totals[k][0] += h
            totals[k][1] += n
    return [round(h / n, 4) if n else None for h, n in totals]
