"""Train a Kangaroo adapter by self-distillation: ``python -m specharness train kangaroo``.

1. Data (``specharness.selfdistill``): the target writes its own conversations; the hidden states
   entering the exit layer and the top-k (``topk``, default 32) of the target's next-token
   distribution at every answer position are captured during that same generation, so no second
   pass over the data is needed. The dataset is reused when it exists with the same recipe.
2. Training: the frozen target's shallow states go through the adapter (its attention runs through
   ``TargetModel.attention_block``, the very code the drafter uses at inference) and the shared LM head
   restricted to the ``draft_vocab`` most frequent answer tokens (0 = full head). The loss is the
   paper's cross-entropy against the target's distribution (soft labels), truncated to its top-k:
   ``-sum_{v in topk ∩ draft vocab} p(v) log q(v)``. AdamW, linear warm-up, cosine decay, grad-norm
   clip 1.0; one sequence per forward, ``seqs_per_step`` sequences per optimizer step.
3. Reported (printed and saved as report.json): wall time and FLOPs of data generation and of
   training, tokens used, adapter parameters and their share of the target's, final loss, held-out
   top-1 agreement of the draft with the target (and of the untrained adapter, for scale), and the
   peak resident memory.

FLOPs of training count matmuls only: per position, the adapter forward is 2 x adapter weights +
4 x context x heads x head_dim (attention), the head 2 x hidden x draft rows (trained positions);
backward is counted as twice the forward.
"""

from __future__ import annotations

import copy
import json
import resource
import time
from pathlib import Path

import torch

from specharness import draft_vocab
from specharness import selfdistill as sd
from specharness import training
from specharness.errors import UsageError
from specharness.options import OptionSpec
from specharness.paths import cache_root, model_slug
from specharness.model import TargetModel

from .adapter import Adapter
from .checkpoint import adapter_config, load_adapter, save_adapter, shipped_adapter_dir

OPTIONS = [
    OptionSpec("exit_layer", "int", 2, "early-exit layer l the adapter reads (1..L-1)", min=1),
    OptionSpec("draft_vocab", "int", 4096, "draft head rows: the N most frequent answer tokens (0 = full head)", min=0),
    OptionSpec("epochs", "int", 4, "passes over the training conversations", min=1),
    OptionSpec("lr", "float", 2e-3, "AdamW peak learning rate", min=0.0),
    OptionSpec("weight_decay", "float", 0.0, "AdamW weight decay", min=0.0),
    OptionSpec("seqs_per_step", "int", 8, "conversations per optimizer step", min=1),
    OptionSpec("topk", "int", 32, "soft labels keep the target's top-k probabilities", min=1, max=1024),
    OptionSpec("init", "str", "layer", "adapter start: 'layer' = the target's layer-l attention, input norm "
               "and final norm; 'random' = a random block with unit norms; 'shipped' or a checkpoint directory = "
               "that adapter's weights (fine-tuning; same exit layer and architecture)"),
    OptionSpec("ffn", "bool", False, "ablation (paper Table 2): add a SwiGLU feed-forward block to the adapter, "
               "initialised from the target's layer l"),
    OptionSpec("head", "str", "shared", "ablation (paper Table 2): 'shared' = the target's LM head (the method); "
               "'own' = a trained copy of its draft-vocabulary rows", choices=("shared", "own")),
    *sd.RECIPE_OPTIONS,
]
HELP = "self-distil a Kangaroo adapter (Magpie-style self-generated data, soft-label CE)"


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


class _Batches:
    """Per-conversation tensors for training: states, trained positions, soft labels in head rows."""

    def __init__(self, feats: dict, rows: torch.Tensor | None, vocab_size: int, device) -> None:
        self.f = feats
        self.device = device
        self.lookup = None
        if rows is not None:  # full-vocabulary id -> index in the draft head, -1 outside it
            self.lookup = torch.full((vocab_size,), -1, dtype=torch.long)
            self.lookup[rows.cpu()] = torch.arange(rows.numel())

    def __call__(self, i: int):
        o = self.f["offsets"]
        a, b = int(o[i]), int(o[i + 1])
        x = self.f["hidden"][a:b]
        ids = self.f["ids"][a:b].long()
        probs = self.f["probs"][a:b].float()
        sel = (ids[:, 0] >= 0).nonzero()[:, 0]
        ids, probs = ids[sel], probs[sel]
        top1 = ids[:, 0].clone()
        if self.lookup is not None:
            ids = self.lookup[ids.clamp(min=0)]
            probs = torch.where(ids >= 0, probs, torch.zeros_like(probs))
            ids = ids.clamp(min=0)
        return x.to(self.device), sel.to(self.device), ids.to(self.device), probs.to(self.device), top1


def _step_outputs(target, adapter, x, sel, subset):
    cache = target.new_cache(x.shape[0], n_layers=1)
    hn = adapter(target, x.to(target.dtype), cache, 0)
    return adapter.logits(target, hn[sel], subset).float()


def _evaluate(target, adapter, batches, indices, rows, subset) -> dict:
    """Held-out loss and top-1 agreement (draft argmax over its head == target argmax).

    ``top1_own_prefix``: agreement at the next answer position among positions whose draft agreed.
    That is what a drafted chain meets at depth 2: the adapter reads only the target's own shallow
    states, so once its first draft is right its second sees exactly the teacher-forced input.
    """
    tot, agree, loss_sum, after, after_hit = 0, 0, 0.0, 0, 0
    with torch.no_grad():
        for i in indices:
            x, sel, ids, probs, top1 = batches(i)
            if not len(sel):
                continue
            logits = _step_outputs(target, adapter, x, sel, subset)
            logp = torch.log_softmax(logits, -1)
            loss_sum += float(-(probs * logp.gather(1, ids)).sum())
            pred = logits.argmax(-1).cpu()
            if rows is not None:
                pred = rows.cpu()[pred]
            hit = pred == top1
            agree += int(hit.sum())
            tot += len(sel)
            pos = sel.cpu()
            chained = hit[:-1] & (pos[1:] == pos[:-1] + 1)  # right here, and the next position is trained
            after += int(chained.sum())
            after_hit += int((chained & hit[1:]).sum())
    return {"positions": tot, "loss": loss_sum / max(tot, 1), "top1_agreement": agree / max(tot, 1),
            "top1_own_prefix": after_hit / max(after, 1)}


def _checkpoint_to_tune(target: TargetModel, l: int, options: dict) -> Adapter | None:
    """The checkpoint ``init`` names (None for 'layer' and 'random'), loaded and matched to the options
    before the minutes of data generation, so a wrong path or a checkpoint of another shape fails at once."""
    init = options["init"]
    if init in ("layer", "random"):
        return None
    path = shipped_adapter_dir(target, l) if init == "shipped" else Path(init).expanduser()
    if init == "shipped" and not path.is_dir():
        raise UsageError(f"option kangaroo.init=shipped: no adapter ships for '{target.name}' at exit_layer {l}; "
                         "use init=layer")
    adapter = load_adapter(path, target, l)[0]
    rows = 0 if options["head"] == "shared" else (options["draft_vocab"] or target.vocab_size)  # as _n_rows counts
    if adapter.ffn != options["ffn"] or adapter.own_head_rows != rows:
        raise UsageError(f"option kangaroo.init={init}: that adapter (ffn={adapter.ffn}, own head rows "
                         f"{adapter.own_head_rows}) differs from the options (ffn={options['ffn']}, own head rows "
                         f"{rows}); match -o ffn, -o head and -o draft_vocab to it")
    return adapter


def _initial_adapter(target: TargetModel, l: int, options: dict, own, tuned: Adapter | None) -> Adapter:
    """The adapter training starts from (``init``; ``tuned`` when it names a checkpoint), in float32."""
    if tuned is not None:
        adapter = tuned
    elif options["init"] == "layer":
        adapter = Adapter.from_target_layer(target, l, ffn=options["ffn"], head_rows=own)
    else:
        adapter = Adapter.for_target(target, seed=options["seed"], ffn=options["ffn"], head_rows=own)
    return adapter.float() if target.dtype != torch.float32 else adapter


def run(target: TargetModel, options: dict, out_dir: Path | None, resume: bool) -> dict:
    l = options["exit_layer"]
    if not 1 <= l < target.n_layers:
        raise UsageError(f"option kangaroo.exit_layer={l} is outside [1, {target.n_layers - 1}] for "
                         f"'{target.name}' ({target.n_layers} layers)")
    if options["draft_vocab"] >= target.vocab_size:
        raise UsageError(f"option kangaroo.draft_vocab={options['draft_vocab']} is not below the vocabulary "
                         f"({target.vocab_size}); use 0 for the full head")
    variant = ("-ffn" if options["ffn"] else "") + ("-ownhead" if options["head"] == "own" else "")
    out = Path(out_dir) if out_dir else cache_root() / "adapters" / "kangaroo" / f"{model_slug(target.name)}-l{l}{variant}"
    tuned = _checkpoint_to_tune(target, l, options)
    training.check_held_out(options, "kangaroo")
    state_file = training.claim_out_dir(out, resume)
    started = time.perf_counter()

    # 1. data
    s = sd.recipe(options, capture_layers=(l,), topk=options["topk"])
    data_dir = sd.data_dir(target, options, s)
    ds, meta, reused = sd.load_or_generate(target, s, data_dir)
    t_data = time.perf_counter() - started
    feats = sd.features(target, ds, meta, data_dir, l, options["topk"])
    train_idx, held_idx = sd.split_rows(len(ds), options)
    n_v = options["draft_vocab"]
    freq = sd.token_frequencies(ds.select(train_idx), target.vocab_size)
    order = draft_vocab.rank(freq)
    rows = order[:n_v].to(target.device).contiguous() if n_v else None
    subset = target.head_rows(rows) if rows is not None else None  # the draft head's rows, gathered once
    coverage = float(freq[order[:n_v]].sum() / freq.sum()) if n_v else 1.0

    # 2. model, optimizer, schedule
    torch.manual_seed(options["seed"])
    own = None
    if options["head"] == "own":  # its rows: the draft vocabulary (empty = every token)
        own = rows.cpu() if rows is not None else torch.empty(0, dtype=torch.long)
    adapter = _initial_adapter(target, l, options, own, tuned)
    opt, sched, total_steps = training.adamw_cosine(adapter.parameters(), options, len(train_idx))
    batches = _Batches(feats, rows, target.vocab_size, target.device)
    baseline = _evaluate(target, adapter, batches, held_idx, rows, subset)  # untrained: ~raw early exit

    H, d = target.hidden_size, target.head_dim
    w_adapter = sum(p.numel() for n, p in adapter.named_parameters() if "proj" in n)
    head_rows = n_v or target.vocab_size
    prog = training.Progress()

    def conv_loss(conv) -> torch.Tensor:
        x, sel, ids, probs, _ = conv
        logp = torch.log_softmax(_step_outputs(target, adapter, x, sel, subset), -1)
        n = x.shape[0]
        prog.flops += 3 * (n * (2 * w_adapter + 4 * (n / 2) * target.n_heads * d) + len(sel) * 2 * H * head_rows)
        return -(probs * logp.gather(1, ids)).sum()

    def save_epoch(epoch: int) -> None:  # a copy in the target's dtype; the trained weights stay float32
        save_adapter(copy.deepcopy(adapter).to(target.dtype), out / f"epoch-{epoch}",
                     adapter_config(target, l, n_v, {"epoch": epoch}), order)

    training.train_epochs(
        adapter, opt, sched, state_file, options, resume, train_idx, batches, lambda c: len(c[1]), conv_loss,
        lambda: _evaluate(target, adapter, batches, held_idx, rows, subset),
        lambda ev: f"held-out loss {ev['loss']:.4f}, top-1 agreement {ev['top1_agreement']:.3f}",
        "kangaroo", after_epoch=save_epoch, progress=prog)
    history, train_s, train_flops = prog.history, prog.train_s, prog.flops

    final = history[-1]["held_out"] if history else baseline
    report = {
        "trainer": "kangaroo", "model": target.name, "exit_layer": l, "out_dir": str(out),
        "data_dir": str(data_dir), "data_reused": reused,
        "data": {**sd.data_summary(meta, train_idx, held_idx), "settings": meta["settings"]},
        "draft_vocab": n_v, "draft_vocab_coverage_of_answer_tokens": coverage,
        "soft_labels": f"target top-{options['topk']} probabilities (temperature 1)",
        "epochs": options["epochs"], "optimizer_steps": total_steps,
        "train_wall_s": train_s, "train_flops": train_flops,
        "train_positions_per_epoch": int(sum(int(batches.f['ids'][int(batches.f['offsets'][i]):int(batches.f['offsets'][i + 1]), 0].ge(0).sum()) for i in train_idx)),
        "adapter_params": adapter.n_parameters,
        "adapter_share_of_target_params": adapter.n_parameters / target.n_parameters,
        "final_train_loss": history[-1]["train_loss"] if history else None,
        "final_held_out_loss": final["loss"], "held_out_top1_agreement": final["top1_agreement"],
        "untrained_held_out_top1_agreement": baseline["top1_agreement"],
        training.SUMMARY_KEY: training.held_out_summary(train_idx, held_idx, final["top1_agreement"],
                                                        final.get("top1_own_prefix"), final["positions"]),
        "history": history, "options": options,
        "wall_s_this_invocation": time.perf_counter() - started,
        "data_wall_s_this_invocation": t_data,
        "peak_rss_gb": _peak_rss_gb(),
    }
    cfg = adapter_config(target, l, n_v, {"epochs": options["epochs"], "ffn": options["ffn"], "head": options["head"],
                                          "held_out_top1_agreement": final["top1_agreement"]})
    save_adapter(adapter.to(target.dtype), out, cfg, order)
    load_adapter(out, target, l)  # what we ship must load through the drafter's own loader
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report

