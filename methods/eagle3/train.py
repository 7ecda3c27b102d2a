"""``python -m specharness train eagle3``: an EAGLE-3 head by self-distillation, target frozen.

What differs from ``train eagle`` (same data, draft vocabulary, optimiser and checkpoints):

1. **Features**: the target's states entering the head's low, middle and high layers
   (``-o layers``), captured while generating the data or teacher-forced once, and cached beside it.
2. **Training-time test** (``-o steps``, default 3): the head is unrolled on its own outputs, as it
   drafts. Step 0 reads (token x_{t+1}, fused target feature g_t) at every position t, causally.
   Step j reads (x_{t+1+j}, the head's own step-(j-1) output at row t) at position t + j, attending to
   the step-0 keys of positions <= t and to its own earlier steps' keys of row t: exactly what a
   depth-(j+1) draft sees (the committed prefix, its ancestors, itself). Tokens are the data's: on
   self-distilled greedy answers they are the target's own, which is what an accepted draft is.
3. **Loss**: only the tokens. Step j's cross-entropy against the target's top-k distribution of
   x_{t+2+j} (restricted to the draft vocabulary) at answer positions, weighted ``step_decay ** j``;
   no feature regression and no input noise (the unrolled steps supply the head's own errors).
4. **Held-out agreement**, drafting-exact: top-1 agreement with the target's argmax at steps 0, 1, 2
   (depths 1-3), and ``top1_own_prefix``: depth 2 after a right depth 1. ``evaluate`` serves EAGLE's
   head as well, so the two compare on one measure (``results/smollm2-eagle3``).

The head is stored in ``-o dtype`` (bfloat16 by default: a SmolLM2 head is then 10 MB, not 21).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specharness import selfdistill as sd
from specharness import training
from specharness.model import TargetModel
from specharness.options import OptionSpec
from specharness.paths import cache_root, model_slug

from ..eagle.checkpoint import save_head
from ..eagle.head import EagleHead
from ..eagle import train as eagle_train
from ..eagle.train import Conversations, _rows, logits_of
from .head import Eagle3Head, parse_layers

# EAGLE's optimiser, labels and draft vocabulary (its feature-regression weight and input noise have no
# place here), its 10 epochs included: what the shipped head trained for (each epoch unrolls ``steps`` passes;
# at 4 epochs the head agreed less than EAGLE's at every depth: results/smollm2-eagle3)
SHARED = ("epochs", "lr", "weight_decay", "seqs_per_step", "topk", "draft_vocab")
OPTIONS = [
    *(o for o in eagle_train.OPTIONS if o.name in SHARED),
    OptionSpec("steps", "int", 3, "training-time test: steps the head is unrolled on its own outputs (1 = none)",
               min=1, max=8),
    OptionSpec("step_decay", "float", 0.8, "step j's loss weight is step_decay ** j (the authors' 0.8)", min=0.0),
    OptionSpec("layers", "str", "", "the target layers fused, LOW,MID,HIGH (the states entering them); empty = "
               "2, L/2, L-3 (the authors' choice for LLaMA, scaled to the target's depth L)"),
    OptionSpec("dtype", "str", "bfloat16", "dtype the head is stored in", choices=("bfloat16", "float32")),
    *sd.RECIPE_OPTIONS,
]
HELP = "self-distil an EAGLE-3 head (fused low/mid/high features, training-time test, token loss only)"


def unroll(head: EagleHead, target: TargetModel, ids: torch.Tensor, feat0: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The head's outputs (normed features [m, H], m = len(ids) - 1) at each of ``steps`` unrolled steps
    (training-time test, see the module's docstring). Row t of step j is at position t + j and reads
    token x_{t+1+j} (the last token past the end: its outputs have no label) and, for j > 0, the
    head's own step-(j-1) output at row t. Each step's keys go into a new buffer holding the earlier
    steps' (autograd forbids writing into one an earlier step's attention read)."""
    n, m = len(ids), len(ids) - 1
    t = torch.arange(m)
    causal, own = torch.ones(m, m, dtype=torch.bool).tril(), torch.eye(m, dtype=torch.bool)
    keys = values = torch.zeros(1, target.n_kv_heads, 0, target.head_dim)
    outs, feat = [], feat0
    for j in range(steps):
        emb = F.embedding(ids[(t + 1 + j).clamp(max=n - 1)], target.embed_weight).float()
        keys = torch.cat([keys, keys.new_zeros(1, target.n_kv_heads, m, target.head_dim)], dim=2)
        values = torch.cat([values, values.new_zeros(1, target.n_kv_heads, m, target.head_dim)], dim=2)
        feat = head(target, emb, feat, t + j, j * m + t, torch.cat([causal] + [own] * j, dim=1), keys, values)
        outs.append(feat)
    return outs


def step_rows(sel: torch.Tensor, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step j's labelled rows and which of step 0's labels they take: row t of step j predicts the
    token step 0's row t + j does."""
    k = sel >= j
    return sel[k] - j, k


def agree(scores: torch.Tensor, rows: torch.Tensor | None, labels: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the head's argmax is the label, and the label is among its ``top`` best (scores over the
    draft rows; ``rows`` maps them to token ids, None = every token)."""
    first, best = scores.argmax(-1), scores.topk(min(top, scores.shape[-1]), -1).indices
    if rows is not None:
        first, best = rows[first], rows[best]
    return first == labels, (best == labels.unsqueeze(-1)).any(-1)


@torch.no_grad()
def evaluate(head: EagleHead, target: TargetModel, convs: Conversations, indices: list[int], subset, rows,
             steps: int = 3, top: int = 4) -> dict:
    """Held-out top-1 agreement with the target's argmax at depths 1..``steps``, the head unrolled on its
    own outputs as it drafts, and ``top1_own_prefix`` (depth 2 where depth 1 was right). Also
    ``top{top}_depth{j}``: the argmax among the head's ``top`` best at that depth (still unrolled on its
    top 1), what a tree's ``top_k`` siblings can catch and a top-1 chain cannot."""
    hits, within, total = [0] * steps, [0] * steps, [0] * steps
    after, after_hit = 0, 0
    for i in indices:
        ids, raw, sel, _, _, argmax = convs(i)
        if not len(sel):
            continue
        m = len(ids) - 1
        outs = unroll(head, target, ids, head.target_feature(target, raw[:m]), steps)
        right = []
        for j, out in enumerate(outs):
            r, k = step_rows(sel, j)
            first, among = agree(logits_of(target, out[r], subset), rows, argmax[k], top)
            ok = torch.zeros(m, dtype=torch.bool)
            ok[r] = first
            hits[j] += int(ok.sum())
            within[j] += int(among.sum())
            total[j] += len(r)
            valid = torch.zeros(m, dtype=torch.bool)
            valid[r] = True
            right.append((ok, valid))
        if steps > 1:
            (ok0, _), (ok1, valid1) = right[0], right[1]
            after += int((ok0 & valid1).sum())
            after_hit += int((ok0 & ok1).sum())
    out = {f"top1_depth{j + 1}": hits[j] / max(total[j], 1) for j in range(steps)}
    out.update({f"top{top}_depth{j + 1}": within[j] / max(total[j], 1) for j in range(steps)})
    return {**out, "top1_own_prefix": after_hit / max(after, 1) if steps > 1 else None, "positions": total[0]}


def held_out_features(target: TargetModel, ds, held_idx: list[int], layers: tuple[int, ...], topk: int) -> dict:
    """Teacher-forced states entering ``layers`` for the held-out rows only (a comparison's evaluation
    needs no pass over the training data), laid out as ``Conversations`` reads them."""
    f = sd.compute_features(target, ds.select(held_idx), layers, topk)
    return side_by_side({**f, "ids": f["topk_ids"], "probs": f["topk_probs"]}, layers)


def side_by_side(f: dict, layers: tuple[int, ...]) -> dict:
    """``layer_features``' tensors as ``Conversations`` reads them: ``hidden`` = the layers' states
    side by side [N, len(layers) x H], with the labels and offsets."""
    return {"hidden": torch.cat([f[f"hidden.{x}"] for x in layers], dim=-1),
            **{k: f[k] for k in ("ids", "probs", "offsets")}}


def run(target: TargetModel, options: dict, out_dir: Path | None, resume: bool) -> dict:
    layers = parse_layers(options["layers"], target.n_layers)
    out = Path(out_dir) if out_dir else cache_root() / "eagle3" / model_slug(target.name)
    training.check_held_out(options, "eagle3")
    state_file = training.claim_out_dir(out, resume)
    started = time.perf_counter()

    # 1. data and the teacher's states (entering each fused layer), soft labels
    s = sd.recipe(options)
    data_dir = sd.data_dir(target, options, s)
    ds, meta, reused = sd.load_or_generate(target, s, data_dir)
    t_data = time.perf_counter() - started
    t0 = time.perf_counter()
    feats = side_by_side(sd.layer_features(target, ds, meta, data_dir, layers, options["topk"]), layers)
    t_teacher = time.perf_counter() - t0
    train_idx, held_idx = sd.split_rows(len(ds), options)
    order, rows, coverage = _rows(ds, train_idx, target.vocab_size, options["draft_vocab"])
    subset = target.head_rows(rows) if rows is not None else None
    convs = Conversations(ds, feats, target, rows, normed=False)

    # 2. head, optimizer, schedule
    torch.manual_seed(options["seed"])
    head = Eagle3Head.for_target(target, layers).float().train()
    opt, sched, total_steps = training.adamw_cosine(head.parameters(), options, len(train_idx))
    steps, decay = options["steps"], options["step_decay"]
    ev_steps = max(3, steps)

    def evaluation() -> dict:
        return evaluate(head, target, convs, held_idx, subset, rows, ev_steps)

    baseline = evaluation()
    n_head = head.n_parameters
    head_rows = options["draft_vocab"] or target.vocab_size
    prog = training.Progress()

    def conv_loss(conv) -> torch.Tensor:
        ids, raw, sel, lab_ids, lab_p, _ = conv
        m = len(ids) - 1
        outs = unroll(head, target, ids, head.target_feature(target, raw[:m]), steps)
        loss = raw.new_zeros(())
        for j, pred in enumerate(outs):
            r, k = step_rows(sel, j)
            logp = torch.log_softmax(logits_of(target, pred[r], subset), -1)
            loss = loss + decay ** j * -(lab_p[k] * logp.gather(1, lab_ids[k])).sum()
            prog.flops += 3 * (m * 2 * n_head + len(r) * 2 * target.hidden_size * head_rows)
        return loss

    training.train_epochs(
        head, opt, sched, state_file, options, resume, train_idx, convs, lambda c: len(c[2]), conv_loss, evaluation,
        lambda ev: "held-out top-1 agreement " + " / ".join(f"{ev[f'top1_depth{j + 1}']:.3f}" for j in range(ev_steps))
                   + f" (depth 1..{ev_steps}), own prefix {ev['top1_own_prefix']:.3f}",
        "eagle3", progress=prog)
    history = prog.history
    final = history[-1]["held_out"] if history else baseline
    report = {
        "trainer": "eagle3", "model": target.name, "out_dir": str(out), "data_dir": str(data_dir),
        "data_reused": reused, "layers": list(layers), "steps": steps, "step_decay": decay,
        "data": sd.data_summary(meta, train_idx, held_idx),
        "teacher_wall_s": t_teacher, "teacher_flops": sd.forward_flops(target, meta["tokens"], 256),
        "draft_vocab": options["draft_vocab"], "draft_vocab_coverage_of_answer_tokens": coverage,
        "epochs": options["epochs"], "optimizer_steps": total_steps, "train_wall_s": prog.train_s,
        "train_flops": prog.flops, "head_params": n_head, "head_share_of_target_params": n_head / target.n_parameters,
        "held_out": final, "untrained_held_out": baseline, "history": history, "options": options,
        training.SUMMARY_KEY: training.held_out_summary(train_idx, held_idx, final["top1_depth1"],
                                                        final.get("top1_own_prefix"), final["positions"]),
        "wall_s_this_invocation": time.perf_counter() - started, "data_wall_s_this_invocation": t_data,
    }
    save_head(head.to(getattr(torch, options["dtype"])), out, target, order, options["draft_vocab"],
              {"training": {k: report[k] for k in ("epochs", "held_out", "draft_vocab_coverage_of_answer_tokens",
                                                   "steps")}})
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report
