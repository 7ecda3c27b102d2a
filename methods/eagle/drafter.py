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
any choice). The drafted features are replaced by the target's: the head reruns over the accepted
tokens with the verified features, which also yields the next round's first distribution. ``commit``
only notes them; that rerun is the next ``propose``'s first head pass, so the engine times it as
drafting (it is the drafter's forward), not as the round's bookkeeping.
``mode=chain`` is EAGLE-1's chain (top_k = 1, total_tokens = depth).
"""

from __future__ import annotations

import heapq

import torch

from specharness import draft_vocab
from specharness.api import DecodeState, Proposal, Verified
from specharness.options import OptionSpec
from specharness.model import TargetModel, stack_name
from specharness.training import checkpoint_summary

from .checkpoint import DEFAULT_DRAFT_VOCAB, EAGLE, UNTRAINED, HeadKind, load_head, resolve_head_path
from .head import EagleHead

OPTIONS = [
    OptionSpec("mode", "str", "tree", "'tree' (EAGLE-2's dynamic tree) or 'chain' (EAGLE-1: one token per depth)",
               choices=("tree", "chain")),
    OptionSpec("depth", "int", 3, "draft depth: the longest path the tree can propose (3: as many tokens kept as "
               "at 5 on SmolLM2, at two head passes fewer a round; results/smollm2-cpu-epyc-defaults)", min=1),
    OptionSpec("top_k", "int", 4, "children tried per expanded node, and frontier nodes expanded per depth", min=1),
    OptionSpec("total_tokens", "int", 7, "draft tokens verified per round (the tree's size; 7 + the current token "
               "= 8 positions: widths 2..8 cost one compiled bucket, the cheapest past a single token)", min=1),
    OptionSpec("head", "str", "", "head checkpoint directory; empty = the shipped head for this model, "
               "'untrained' = one started from the target's last layer, never trained"),
    OptionSpec("draft_vocab", "int", -1, "draft head rows: 0 = the full LM head, N = the N most frequent tokens "
               f"of the head's training data, -1 = what the head was trained with, at most {DEFAULT_DRAFT_VOCAB} "
               "(faster than 8192 at depths 3 and 5, at a CR 0.02 lower)", min=-1),
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
        # widest call: a frontier of top_k nodes, or a catch-up over depth accepted drafts + the target's token
        self.widest = max(top_k, depth + 1)
        self.stack = head.add_to(target, stack or stack_name(head.METHOD, None), self.subset, self.widest)
        self.capture_layers = head.capture  # EAGLE-3 reads low, middle and high layers: verification hands them back
        # one head pass (a depth of the tree, or a chain's draft): its layer, projection, norm and head rows
        self.draft_bytes = target.backend.stacks[self.stack].read_bytes()
        self.cache = None
        self.root_logp: torch.Tensor | None = None  # draft log-probs of the token after the current one
        self.root_feat: torch.Tensor | None = None  # the head's predicted feature at the current position
        # committed, not yet run through the head: tokens, the target's states the head reads (its
        # ``feature_source``; a list of rounds' rows when another drafter proposed meanwhile: sam's
        # fallback), the first position
        self.verified: tuple[list[int], list[torch.Tensor], int] | None = None

    # ---- the head over committed tokens -------------------------------------------------------------
    def _run(self, tokens: list[int], feats: torch.Tensor, start: int, head: bool = True, **layout):
        """The head's stack over (x_{t+1}, f_t) rows written at cache slots from ``start``."""
        t = self.t
        x = torch.cat([t.embed(torch.tensor(tokens, device=t.device)), feats], dim=-1)
        return t.forward(x, self.cache, start, stack=self.stack, head=head, **layout)

    def _advance(self, tokens: list[int], feats: torch.Tensor, start: int, prefill: bool = False) -> None:
        """Run the head over (x_{t+1}, f_t) for t = start .. start + n - 1 (a chain), keep its cache,
        and read off the next draft distribution. With ``prefill`` (a prompt, a backlog), the rows but the
        last run as one prefill without the LM head (only their keys and values are kept)."""
        self.cache.crop(start)
        n = len(tokens)
        if prefill and n > 1:
            self._run(tokens[:-1], feats[:-1], start, head=False, prefill=True)
            tokens, feats, start = tokens[-1:], feats[-1:], start + n - 1
        out = self._run(tokens, feats, start)
        self.root_feat = self.head.feature(out.hidden[-1:])[0]
        self.root_logp = torch.log_softmax(out.logits[-1].float(), dim=-1)

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        self.cache = self.t.new_cache(state.cache.max_len + self.depth * self.top_k, n_layers=1)
        self.verified = None
        feats = self.head.target_feature(self.t, self.head.feature_source(state.prompt_hidden, state.prompt_captured))
        self._advance(state.ids[1:state.prompt_len + 1], feats, 0, prefill=True)

    def commit(self, state: DecodeState, verified: Verified) -> None:
        p = verified.start
        tokens = state.ids[p + 1:p + verified.accepted + 2]  # the kept drafts and the target's own token
        # the engine's gathered copies: they outlive the next forward
        hidden = self.head.feature_source(verified.hidden, verified.captured)[:len(tokens)]
        if self.verified is None:
            self.verified = (tokens, [hidden], p)
        else:  # a round another drafter proposed (sam's fallback): the head runs them all at the next propose
            self.verified[0].extend(tokens)
            self.verified[1].append(hidden)

    def _catch_up(self) -> None:
        """The head over the committed tokens it has not run yet, with the target's features (``commit``'s).
        A backlog wider than the head's widest call runs its rows but the last as a prefill (the prompt's
        dynamic-width graph, built in warm-up); where that prefill would be narrow enough for a static
        graph that no warm-up builds, in calls of the widest width instead."""
        if self.verified is None:
            return
        tokens, hidden, p = self.verified
        self.verified = None
        feats = self.head.target_feature(self.t, torch.cat(hidden) if len(hidden) > 1 else hidden[0])
        n, w = len(tokens), self.widest
        if n <= w or n - 1 > self.t.backend.narrowest:
            self._advance(tokens, feats, p, prefill=n > w)
        else:
            for s in range(0, n, w):
                self._advance(tokens[s:s + w], feats[s:s + w], p + s)

    # ---- a round's tree ----------------------------------------------------------------------------
    # Candidates are Python lists indexed by creation order (depth 1's top_k, then each depth's top_k
    # frontier nodes x top_k children), read from the head once per depth: one ``tolist`` of the
    # depth's top-k, which the early stop needs anyway. At these sizes (<= 16 candidates a depth) a list
    # operation costs well under a microsecond and a tensor op 2-10 us, so a depth's bookkeeping is a
    # fixed handful of tensor ops (mask, positions, features, the head's log-softmax and top-k).
    def propose(self, state: DecodeState) -> Proposal:
        self._catch_up()  # before any early return: the head must stay level with the text
        depth, total = min(self.depth, state.max_draft), min(self.total, state.budget)
        if depth <= 0:
            return Proposal()
        tokens, parents = self._select(total, *self._expand(state.pos, depth, total))
        return Proposal(tokens, None, parents=parents)

    def _expand(self, p: int, depth: int, total: int) -> tuple[list[float], list[int], list[int], list[int]]:
        """EAGLE-2's expansion: every candidate's cumulative draft log-probability, token, parent
        (-1: the current token) and depth. At each depth the ``top_k`` best of the last depth's
        children (ties: the earlier created) run through the head together at scratch slots from
        ``p``, each seeing the prefix, its ancestors' slots and its own; it stops once no frontier
        node can enter the kept tree (a child scores at most its parent)."""
        k, dev = self.top_k, self.t.device
        top, idx = self.root_logp.topk(k)
        score, token = top.tolist(), draft_vocab.tokens(idx, self.rows).tolist()
        parent, level = [-1] * k, [1] * k
        cols: dict[int, tuple[int, ...]] = {-1: ()}  # expanded candidate -> scratch columns (slot - p) it sees
        row: dict[int, int] = {}  # expanded candidate -> its row in the head run that expanded it
        new, hidden = range(k), None  # the last depth's children; the last run's hidden states
        for d in range(2, depth + 1):
            frontier = sorted(new, key=score.__getitem__, reverse=True)[:k]  # stable: ties keep creation order
            if len(score) >= total and score[frontier[0]] < heapq.nlargest(total, score)[-1]:
                break
            width, first = (d - 1) * k, (d - 2) * k  # scratch columns so far; this frontier's first
            seen = []
            for r, c in enumerate(frontier):
                cols[c], row[c] = cols[parent[c]] + (first + r,), r
                seen.append([j in cols[c] for j in range(width)])
            mask = torch.cat([torch.ones(k, p, dtype=torch.bool, device=dev),
                              torch.tensor(seen, dtype=torch.bool, device=dev)], dim=1)
            positions = torch.full((k,), p + d - 2, device=dev)  # frontier nodes have depth d - 1
            # the parents' features: the root's at depth 2, then rows of the last run (only those expanded)
            feats = (self.root_feat.expand(k, -1) if hidden is None
                     else self.head.feature(hidden[[row[parent[c]] for c in frontier]]))
            run = self._run([token[c] for c in frontier], feats, p + first, positions=positions, mask=mask)
            hidden = run.hidden
            top, idx = torch.log_softmax(run.logits, dim=-1, dtype=torch.float32).topk(k, dim=-1)
            new = range(len(score), len(score) + k * k)
            for c, logp, toks in zip(frontier, top.tolist(), draft_vocab.tokens(idx, self.rows).tolist()):
                score.extend(score[c] + s for s in logp)
                token.extend(toks)
                parent.extend([c] * k)
            level.extend([d] * (k * k))
        return score, token, parent, level

    def _select(self, total: int, score: list[float], token: list[int], parent: list[int],
                level: list[int]) -> tuple[list[int], list[int]]:
        """Tokens and parents (0: the current token, i: draft i - 1) of the ``total`` best candidates,
        listed best first (score descending, then creation order: creation order follows depth). A node
        scores at most its parent and sorts after it on a tie, so every prefix of the list is a tree:
        the ``total`` best are the first ``total`` of any larger selection (``budget=auto`` relies on it)."""
        order = heapq.nlargest(total, range(len(score)), key=score.__getitem__)  # stable, as sorted is
        node = {c: i + 1 for i, c in enumerate(order)}
        return [token[c] for c in order], [0 if parent[c] < 0 else node[parent[c]] for c in order]

def build(target: TargetModel, options: dict, kind: HeadKind = EAGLE) -> EagleDrafter:
    path = resolve_head_path(target, options["head"], kind)
    head, rows = load_head(path, target, options["draft_vocab"], kind)
    stack = stack_name(kind.method, path, None if rows is None else rows.numel())
    return EagleDrafter(target, head, rows, options["mode"], options["depth"], options["top_k"], options["total_tokens"],
                        stack)


def extra_params(target: TargetModel, options: dict, kind: HeadKind = EAGLE) -> int:
    """The head's parameters (its draft rows of the LM head included)."""
    return load_head(resolve_head_path(target, options["head"], kind), target, options["draft_vocab"], kind)[0].n_parameters


def head_info(target: TargetModel, options: dict, kind: HeadKind = EAGLE) -> dict:
    """Tree or chain, which head, its draft rows (what ``draft_vocab=-1`` meant here), the layers it fuses
    (EAGLE-3), and (from its report.json) what that head was trained on."""
    path = resolve_head_path(target, options["head"], kind)
    trained = checkpoint_summary(path) if path != UNTRAINED else {}
    head, rows = load_head(path, target, options["draft_vocab"], kind)
    return {"tree": options["mode"], "head": options["head"] or "shipped", **draft_vocab.describe(target, rows),
            **({"layers": list(head.layers)} if head.capture else {}), **({"training": trained} if trained else {})}
