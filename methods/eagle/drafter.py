"""EAGLE-2 drafting (Li et al., arXiv:2406.16858): a dynamic tree from the EAGLE head, verified
in one target forward through the engine's tree verification.

State per sequence: the head's one-layer KV cache holds, for every committed position t < pos,
the head's pass over (token x_{t+1}, the target's *true* feature f_t); its output at the last one
gives the distribution of the first draft. A round:

1. depth 1: the ``top_k`` most likely tokens of that distribution;
2. depth 2..``depth``: the ``top_k`` frontier nodes with the highest cumulative draft
   log-probability are run through the head together (each at its own position, attending to the
   committed prefix, its ancestors and itself), and each gets its ``top_k`` most likely children;
3. the ``total_tokens`` candidates with the highest cumulative log-probability form the tree
   (log-probabilities only fall along a path, so the set is connected: a node is kept only after
   its parent).

The drafts are chosen deterministically, so sampling verifies them as point masses (lossless for
any choice). ``commit`` replaces the drafted features by the target's: it reruns the head over the
accepted tokens with the verified features, which also yields the next round's first distribution.
``mode=chain`` is EAGLE-1's chain (top_k = 1, total_tokens = depth).
"""

from __future__ import annotations

import torch

from specharness.api import DecodeState, Proposal, Verified
from specharness.options import OptionSpec
from specharness.model import TargetModel, stack_name

from .checkpoint import load_head, resolve_head_path
from .head import EagleHead

OPTIONS = [
    OptionSpec("mode", "str", "tree", "'tree' (EAGLE-2's dynamic tree) or 'chain' (EAGLE-1: one token per depth)",
               choices=("tree", "chain")),
    OptionSpec("depth", "int", 5, "draft depth: the longest path the tree can propose", min=1),
    OptionSpec("top_k", "int", 4, "children tried per expanded node, and frontier nodes expanded per depth", min=1),
    OptionSpec("total_tokens", "int", 7, "draft tokens verified per round (the tree's size; 7 + the current token "
               "= 8 positions: widths 2..8 cost one compiled bucket, the cheapest past a single token)", min=1),
    OptionSpec("head", "str", "", "head checkpoint directory; empty = the shipped head for this model, "
               "'untrained' = one started from the target's last layer, never trained"),
    OptionSpec("draft_vocab", "int", -1, "draft head rows: 0 = the full LM head, N = the N most frequent tokens "
               "of the head's training data, -1 = what the head was trained with", min=-1),
]


class EagleDrafter:
    exit_layer = 0  # drafts are verified from the embeddings, by the whole target

    def __init__(self, target: TargetModel, head: EagleHead, rows: torch.Tensor | None, mode: str, depth: int,
                 top_k: int, total_tokens: int, stack: str = "") -> None:
        self.t, self.head, self.rows = target, head, rows
        self.subset = target.head_rows(rows) if rows is not None else None
        if mode == "chain":
            top_k, total_tokens = 1, depth
        self.depth, self.top_k, self.total = depth, top_k, max(1, min(total_tokens, top_k * depth))
        self.max_width = self.total + 1
        # the head -> its norm -> the LM head rows as a stack of the target's, run through its backend; its
        # widest call: a frontier of top_k nodes, or a commit of depth accepted drafts + the target's token
        self.stack = head.add_to(target, stack or stack_name("eagle", None), self.subset, max(top_k, depth + 1))
        self.cache = None
        self.root_logp: torch.Tensor | None = None  # draft log-probs of the token after the current one
        self.root_feat: torch.Tensor | None = None  # the head's predicted feature at the current position

    # ---- the head over committed tokens -------------------------------------------------------------
    def _run(self, tokens: list[int], feats: torch.Tensor, start: int, head: bool = True, **layout):
        """The head's stack over (x_{t+1}, f_t) rows written at cache slots from ``start``."""
        t = self.t
        x = torch.cat([t.embed(torch.tensor(tokens, device=t.device)), feats], dim=-1)
        return t.forward(x, self.cache, start, stack=self.stack, head=head, **layout)

    def _advance(self, tokens: list[int], feats: torch.Tensor, start: int, prompt: bool = False) -> None:
        """Run the head over (x_{t+1}, f_t) for t = start .. start + n - 1 (a chain), keep its cache,
        and read off the next draft distribution. A ``prompt``'s rows but the last run as one prefill
        without the LM head (only their keys and values are kept)."""
        self.cache.crop(start)
        n = len(tokens)
        if prompt and n > 1:
            self._run(tokens[:-1], feats[:-1], start, head=False, prefill=True)
            tokens, feats, start = tokens[-1:], feats[-1:], start + n - 1
        out = self._run(tokens, feats, start)
        self.root_feat = self.head.feature(out.hidden[-1:])[0]
        self.root_logp = torch.log_softmax(out.logits[-1].float(), dim=-1)

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        self.cache = self.t.new_cache(state.cache.max_len + self.depth * self.top_k, n_layers=1)
        feats = self.t.norm(state.prompt_hidden)  # f_t, t = 0 .. P-1
        self._advance(state.ids[1:state.prompt_len + 1], feats, 0, prompt=True)

    def commit(self, state: DecodeState, verified: Verified) -> None:
        p = verified.start
        tokens = state.ids[p + 1:p + verified.accepted + 2]  # the kept drafts and the target's own token
        self._advance(tokens, self.t.norm(verified.hidden[:len(tokens)]), p)

    # ---- a round's tree ----------------------------------------------------------------------------
    def _token(self, j: torch.Tensor) -> list[int]:
        return (self.rows[j] if self.rows is not None else j).tolist()

    def propose(self, state: DecodeState) -> Proposal:
        depth = min(self.depth, state.max_draft)
        if depth <= 0:
            return Proposal()
        t, p, k = self.t, state.pos, self.top_k
        # candidates: (score, depth, token, parent candidate index or -1 for the root, head slot or None)
        logp, idx = self.root_logp.topk(k)
        cands = [[float(s), 1, tok, -1, None] for s, tok in zip(logp.tolist(), self._token(idx))]
        frontier = list(range(len(cands)))
        feats = {-1: self.root_feat}  # candidate -> the head's predicted feature after it
        slot = p  # head cache slots from the current position on are this round's scratch
        for d in range(2, depth + 1):
            frontier = sorted(frontier, key=lambda c: -cands[c][0])[:k]
            if len(cands) >= self.total:  # a child scores at most its parent: stop once none can enter the kept tree
                cutoff = sorted((c[0] for c in cands), reverse=True)[self.total - 1]
                if cands[frontier[0]][0] < cutoff:
                    break
            n = len(frontier)
            rows, cols = [], []  # (frontier row, scratch slot it sees): ancestors and itself, set in one op
            for row, c in enumerate(frontier):
                a = cands[c][3]
                while a >= 0:
                    rows.append(row)
                    cols.append(cands[a][4] - p)
                    a = cands[a][3]
                rows.append(row)
                cols.append(slot - p + row)
                cands[c][4] = slot + row
            anc = torch.zeros(n, slot - p + n, dtype=torch.bool, device=t.device)
            anc[rows, cols] = True  # one indexing op: an element assignment per ancestor cost ~10 us each
            mask = torch.cat([torch.ones(n, p, dtype=torch.bool, device=t.device), anc], dim=1)
            positions = torch.tensor([p + cands[c][1] - 1 for c in frontier], device=t.device)
            feat_in = torch.stack([feats[cands[c][3]] for c in frontier])
            run = self._run([cands[c][2] for c in frontier], feat_in, slot, positions=positions, mask=mask)
            out = self.head.feature(run.hidden)
            slot += n
            child_logp = torch.log_softmax(run.logits.float(), dim=-1)
            top, top_idx = child_logp.topk(k, dim=-1)
            new = []
            for row, c in enumerate(frontier):
                feats[c] = out[row]
                for s, tok in zip(top[row].tolist(), self._token(top_idx[row])):
                    cands.append([cands[c][0] + s, d, tok, c, None])
                    new.append(len(cands) - 1)
            frontier = new
        # the best total_tokens candidates, parents before children
        kept: dict[int, int] = {}  # candidate -> its draft index
        for c in sorted(range(len(cands)), key=lambda c: (-cands[c][0], cands[c][1])):
            if len(kept) == self.total:
                break
            if cands[c][3] == -1 or cands[c][3] in kept:
                kept[c] = -1
        order = sorted(kept, key=lambda c: (cands[c][1], -cands[c][0]))
        for i, c in enumerate(order):
            kept[c] = i
        tokens = [cands[c][2] for c in order]
        parents = [0 if cands[c][3] == -1 else kept[cands[c][3]] + 1 for c in order]
        return Proposal(tokens, None, parents=parents)


def build(target: TargetModel, options: dict) -> EagleDrafter:
    path = resolve_head_path(target, options["head"])
    head, rows = load_head(path, target, options["draft_vocab"])
    stack = stack_name("eagle", path, None if rows is None else rows.numel())
    return EagleDrafter(target, head, rows, options["mode"], options["depth"], options["top_k"], options["total_tokens"],
                        stack)
