"""``python -m specharness train eagle``: an EAGLE head by self-distillation, target frozen.

1. Data: the shared self-distillation conversations (``specharness.selfdistill``, the recipe every
   trainer offers), and from one teacher-forced target pass over them: the target's final hidden
   state at every position (after the final norm: the feature the LM head reads) and its top-k
   next-token probabilities at trained positions. Both are cached beside the data.
2. Training, as the authors do: at position t the head reads (token x_{t+1}, feature f_t + uniform
   noise in [-noise, noise]) over the whole conversation (causal, its own cache) and predicts
   f_{t+1}; the loss is smooth-L1 between predicted and true features (averaged over dimensions,
   summed over positions) plus ``ce_weight`` x the
   cross-entropy of the shared LM head over the predicted feature against the target's top-k
   distribution of x_{t+2} (restricted to the draft vocabulary), at positions whose x_{t+2} is an
   answer token. AdamW, warm-up then cosine decay, gradient clipping 1.0.
3. Held-out agreement: the head's argmax equals the target's, (a) with the target's own features
   (depth 1, on-policy), (b) one step later on the head's own predicted feature (depth 2) and (c)
   two steps later (depth 3): the off-policy gap the drafting tree meets.

Progress bars, a checkpoint per epoch, ``--resume``, and report.json (wall time and FLOPs of data,
teacher pass and training; parameters; losses; agreements).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specharness import draft_vocab
from specharness import selfdistill as sd
from specharness import training
from specharness.options import OptionSpec
from specharness.paths import cache_root, model_slug
from specharness.model import KVCache, TargetModel, attention_mask
from specharness.tree import Tree

from .checkpoint import save_head
from .head import EagleHead

OPTIONS = [
    OptionSpec("epochs", "int", 10, "passes over the training conversations", min=1),
    OptionSpec("lr", "float", 3e-3, "AdamW peak learning rate", min=0.0),
    OptionSpec("weight_decay", "float", 0.0, "AdamW weight decay", min=0.0),
    OptionSpec("seqs_per_step", "int", 8, "conversations per optimizer step", min=1),
    OptionSpec("topk", "int", 16, "soft labels keep the target's top-k probabilities", min=1, max=1024),
    OptionSpec("draft_vocab", "int", 8192, "draft head rows: the N most frequent answer tokens (0 = full head)", min=0),
    OptionSpec("ce_weight", "float", 0.1, "weight of the token cross-entropy beside the feature regression", min=0.0),
    OptionSpec("noise", "float", 0.1, "uniform noise on the input features (+-noise)", min=0.0),
    *sd.RECIPE_OPTIONS,
]
HELP = "self-distil an EAGLE head (feature regression + token cross-entropy, noise on features)"


def _rows(ds, train_idx: list[int], vocab_size: int, n: int) -> tuple[torch.Tensor, torch.Tensor | None, float]:
    freq = sd.token_frequencies(ds.select(train_idx), vocab_size)
    order = draft_vocab.rank(freq)
    rows = order[:n].contiguous() if n else None
    coverage = float(freq[order[:n]].sum() / freq.sum()) if n else 1.0
    return order, rows, coverage


class Conversations:
    """Per conversation: tokens, true features, trained positions, soft labels in draft-head rows.
    ``feats["hidden"]`` holds the states a head reads per position: EAGLE's final ones (normed here, by
    the target's final norm), or, with ``normed=False``, what a head turns into features itself (EAGLE-3's
    low, middle and high layers side by side)."""

    def __init__(self, ds, feats: dict, target: TargetModel, rows: torch.Tensor | None, normed: bool = True) -> None:
        self.ds, self.f, self.target, self.normed = ds, feats, target, normed
        self.lookup = None
        if rows is not None:
            self.lookup = torch.full((target.vocab_size,), -1, dtype=torch.long)
            self.lookup[rows] = torch.arange(rows.numel())

    def __call__(self, i: int):
        a, b = int(self.f["offsets"][i]), int(self.f["offsets"][i + 1])
        ids = torch.tensor(self.ds[i]["input_ids"])
        feat = self.f["hidden"][a:b].to(self.target.dtype)
        feat = (self.target.norm(feat) if self.normed else feat).float()
        top_ids, top_p = self.f["ids"][a:b].long(), self.f["probs"][a:b].float()
        n = len(ids)
        # training position t (reads x_{t+1}, f_t) predicts f_{t+1} and x_{t+2}: labels of position t+1
        t = torch.arange(n - 2)
        keep = top_ids[t + 1, 0] >= 0
        lab_ids, lab_p = top_ids[t + 1], top_p[t + 1]
        if self.lookup is not None:
            lab_ids = self.lookup[lab_ids.clamp(min=0)]
            lab_p = lab_p * (lab_ids >= 0)
        lab_p = lab_p / lab_p.sum(-1, keepdim=True).clamp(min=1e-9)
        argmax = top_ids[t + 1, 0]
        return ids, feat, t[keep], lab_ids[keep].clamp(min=0), lab_p[keep], argmax[keep]


def run_head(head: EagleHead, target: TargetModel, tokens: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
    """The head over a whole conversation, causally: position t reads (x_{t+1}, f_t)."""
    n = feats.shape[0]
    cache = KVCache(1, target.n_kv_heads, target.head_dim, n, torch.float32, target.device)  # trains in float32
    cache.claim(0, 1, 0, n)
    pos = torch.arange(n)
    return head(target, F.embedding(tokens, target.embed_weight).float(), feats, pos, pos,
                attention_mask(0, Tree.chain(n - 1), n, feats.device), cache.keys, cache.values)


def logits_of(target: TargetModel, feats: torch.Tensor, subset: torch.Tensor | None) -> torch.Tensor:
    return F.linear(feats, (target.head_weight if subset is None else subset).float())


@torch.no_grad()
def evaluate(head, target, convs: Conversations, indices: list[int], subset, rows) -> dict:
    """Held-out top-1 agreement at draft depth 1 (true features), 2 and 3 (the head's own).

    ``top1_own_prefix``: depth-2 agreement among positions whose depth-1 draft agreed, i.e. on the
    head's own drafted prefix (its token right, its feature its own), as a chain meets it.
    """
    hits, total, loss = [0, 0, 0], [0, 0, 0], 0.0
    after, after_hit = 0, 0
    to_id = (lambda j: rows[j]) if rows is not None else (lambda j: j)
    for i in indices:
        ids, feat, sel, _, _, argmax = convs(i)
        if not len(sel):
            continue
        x = ids[1:len(feat)]
        f = feat[:len(x)]
        for depth in range(3):
            if len(x) < 2:
                break
            out = run_head(head, target, x, f)
            pred = to_id(logits_of(target, out, subset).argmax(-1))  # prediction of x_{t+2} from position t
            n = len(pred) - 1 - depth
            if n <= 0:
                break
            want = torch.full((len(feat),), -1, dtype=torch.long)
            want[sel] = argmax  # the target's argmax of x_{t+2}, indexed by training position t
            got = pred[:n]
            w = want[depth:depth + n]
            valid = w >= 0
            hits[depth] += int((got[valid] == w[valid]).sum())
            total[depth] += int(valid.sum())
            if depth == 1:
                chained = first_hit[:n] & valid
                after += int(chained.sum())
                after_hit += int((chained & (got == w)).sum())
            if depth == 0:
                first_hit = valid & (got == w)
                loss += float(F.smooth_l1_loss(out[:len(feat) - 1], feat[1:len(out) + 1], reduction="none").mean(-1).sum())
            # next depth: position t now reads the head's own feature of t + depth + 1
            x, f = x[1:], out[:-1]
    return {"top1_depth1": hits[0] / max(total[0], 1), "top1_depth2": hits[1] / max(total[1], 1),
            "top1_depth3": hits[2] / max(total[2], 1), "top1_own_prefix": after_hit / max(after, 1),
            "positions": total[0],
            "feature_loss": loss / max(total[0], 1)}


def run(target: TargetModel, options: dict, out_dir: Path | None, resume: bool) -> dict:
    out = Path(out_dir) if out_dir else cache_root() / "eagle" / model_slug(target.name)
    training.check_held_out(options, "eagle")
    state_file = training.claim_out_dir(out, resume)
    started = time.perf_counter()
    L = target.n_layers

    # 1. data and the teacher pass
    s = sd.recipe(options)
    data_dir = sd.data_dir(target, options, s)
    ds, meta, reused = sd.load_or_generate(target, s, data_dir)
    t_data = time.perf_counter() - started
    t0 = time.perf_counter()
    feats = sd.features(target, ds, meta, data_dir, L, options["topk"])
    t_teacher = time.perf_counter() - t0
    train_idx, held_idx = sd.split_rows(len(ds), options)
    order, rows, coverage = _rows(ds, train_idx, target.vocab_size, options["draft_vocab"])
    subset = target.head_rows(rows) if rows is not None else None
    convs = Conversations(ds, feats, target, rows)

    # 2. head, optimizer, schedule, resume
    torch.manual_seed(options["seed"])
    head = EagleHead.for_target(target).float().train()
    opt, sched, total_steps = training.adamw_cosine(head.parameters(), options, len(train_idx))
    baseline = evaluate(head, target, convs, held_idx, subset, rows)

    # 3. train
    n_head = sum(p.numel() for n, p in head.named_parameters())
    head_rows = options["draft_vocab"] or target.vocab_size
    prog = training.Progress()

    def conv_loss(conv) -> torch.Tensor:
        ids, feat, sel, lab_ids, lab_p, _ = conv
        x, f = ids[1:len(feat)], feat[:len(feat) - 1]
        noisy = f + (torch.rand(f.shape, generator=prog.rng) * 2 - 1) * options["noise"]
        pred = run_head(head, target, x, noisy)[sel]
        vloss = F.smooth_l1_loss(pred, feat[sel + 1], reduction="none").mean(-1).sum()  # per position
        logp = torch.log_softmax(logits_of(target, pred, subset), -1)
        ploss = -(lab_p * logp.gather(1, lab_ids)).sum()
        prog.flops += 3 * (len(x) * 2 * n_head + len(sel) * 2 * target.hidden_size * head_rows)
        return vloss + options["ce_weight"] * ploss

    training.train_epochs(
        head, opt, sched, state_file, options, resume, train_idx, convs, lambda c: len(c[2]), conv_loss,
        lambda: evaluate(head, target, convs, held_idx, subset, rows),
        lambda ev: (f"held-out top-1 agreement {ev['top1_depth1']:.3f} / {ev['top1_depth2']:.3f} / "
                    f"{ev['top1_depth3']:.3f} (depth 1/2/3)"),
        "eagle", progress=prog)
    history, train_s, train_flops = prog.history, prog.train_s, prog.flops

    final = history[-1]["held_out"] if history else baseline
    report = {
        "trainer": "eagle", "model": target.name, "out_dir": str(out), "data_dir": str(data_dir),
        "data_reused": reused,
        "data": sd.data_summary(meta, train_idx, held_idx),
        "teacher_wall_s": t_teacher, "teacher_flops": sd.forward_flops(target, meta["tokens"], 256),
        "draft_vocab": options["draft_vocab"], "draft_vocab_coverage_of_answer_tokens": coverage,
        "epochs": options["epochs"], "optimizer_steps": total_steps, "train_wall_s": train_s, "train_flops": train_flops,
        "head_params": n_head, "head_share_of_target_params": n_head / target.n_parameters,
        "held_out": final, "untrained_held_out": baseline, "history": history, "options": options,
        training.SUMMARY_KEY: training.held_out_summary(train_idx, held_idx, final["top1_depth1"],
                                                        final.get("top1_own_prefix"), final["positions"]),
        "wall_s_this_invocation": time.perf_counter() - started, "data_wall_s_this_invocation": t_data,
    }
    save_head(head.to(target.dtype), out, target, order, options["draft_vocab"],
              {"training": {k: report[k] for k in ("epochs", "held_out", "draft_vocab_coverage_of_answer_tokens")}})
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report
