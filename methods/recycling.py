"""``recycling``: Token Recycling (Luo et al., arXiv:2408.08696): no training, no extra weights.

An adjacency matrix holds each token's ``top_k`` most likely successors, read off the target's
logits: every round, the rows of every token the target just verified (the current token and all
drafted nodes, accepted or not) are refreshed from its logits at that node. Drafting walks a
static tree template from the current token: a node at rank r under a parent with token x takes
x's r-th successor; nodes whose parent row is still empty are left out. The matrix starts empty for
each question (``warm=false``, the default) or is kept across questions (``warm=true``: then the
question order matters, and the header says so). Warm, a prompt seen again (a benchmark's warm-up
and timed repeats of one turn) starts from the matrix it started from the first time, never from
what generating that same answer taught it. Drafts are deterministic; sampling verifies them as
point masses (lossless).

Successors can be taken among the ``draft_vocab`` tokens the target writes most often
(``specharness.draft_vocab``'s ranking), lossless since verification is exact. The default is every
token, as measured (``results/smollm2-cpu-epyc-recycling-vocab``): the round's ``topk`` over every
verified node's logits (0.25 ms over 8 x 49,152) only gives way to a column gather nearly as dear
(0.15 ms for 8,192 columns), so bookkeeping did not fall, and acceptance did.

The matrix is a dict of Python lists, not a [vocabulary, top_k] tensor: a round's commit is then one
``topk`` and one ``tolist``, and drafting is dict lookups. Right after a target forward every torch
call is slow (the first 40-90 us on a 2-core EPYC, the next about 8 us; a reading: the forward's
weights push the interpreter's and the kernels' code and data out of cache), so indexing a tensor
matrix per node and writing it by tensor index cost two calls more a round
(``results/smollm2-cpu-epyc-bookkeeping``).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from specharness import draft_vocab
from specharness.api import DecodeState, Proposal, Verified
from specharness.hookspecs import DrafterSpec, hookimpl
from specharness.model import topk_indices
from specharness.options import OptionSpec

# the template: paths of successor ranks, most likely first (breadth on the first levels, depth on
# the top-ranked branch), as in the paper's static tree, cut to the widths this engine verifies cheaply
TEMPLATE = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (2, 0), (0, 1, 0), (1, 0, 0),
            (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0), (3,), (0, 2), (1, 1), (0, 0, 2),
            (0, 0, 0, 0, 1), (0, 0, 0, 0, 0, 0, 0), (4,), (2, 1), (0, 1, 1), (1, 0, 0, 0), (0, 0, 1, 0),
            (0, 1, 0, 0), (0, 0, 0, 1, 0), (0, 0, 0, 0, 0, 1), (0, 0, 0, 0, 0, 0, 0, 0), (5,))

DEFAULT_DRAFT_VOCAB = 0  # every token: a smaller set was measured no faster (the module's docstring)
WARM_PROMPTS = 4  # prompts whose starting matrix is kept (a two-turn question's turns, with room to spare)

OPTIONS = [
    OptionSpec("top_k", "int", 8, "successors kept per token (the matrix's width)", min=1),
    OptionSpec("nodes", "int", 7, "nodes of the static tree drafted per round (the first of its template: "
               "7 + the current token = 8 positions, one compiled width bucket)", min=1, max=len(TEMPLATE)),
    OptionSpec("warm", "bool", False, "keep the matrix across questions (false: reset for each question); a prompt "
               "run again (warm-up, repeats) starts from the matrix its first run started from"),
    draft_vocab.option(DEFAULT_DRAFT_VOCAB),
]


class TokenRecycling:
    exit_layer = 0

    def __init__(self, target, top_k: int, nodes: int, warm: bool, rows: torch.Tensor | None = None) -> None:
        self.rows = rows  # successors among these token ids (None: every token)
        n_vocab = target.vocab_size if rows is None else rows.numel()
        self.k, self.warm = min(top_k, n_vocab), warm  # no token has more successors than the vocabulary
        self.paths = sorted((p for p in TEMPLATE[:nodes] if max(p) < self.k), key=len)  # parents first
        self.max_width = len(self.paths) + 1
        self.successors: dict[int, list[int]] = {}  # token -> its top_k successors, most likely first
        # warm: the matrix each recent prompt started from (a question's turns, each run again for its repeats)
        self.starts: OrderedDict[tuple[int, ...], dict[int, list[int]]] = OrderedDict()

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        if not self.warm:
            self.successors = {}
            return
        prompt = tuple(state.ids[:state.prompt_len])
        if prompt in self.starts:  # a repeat: the state it first started from, not what its own answer taught
            self.successors = dict(self.starts[prompt])  # rows are replaced whole, never changed in place
            self.starts.move_to_end(prompt)
        else:
            self.starts[prompt] = dict(self.successors)
            if len(self.starts) > WARM_PROMPTS:
                self.starts.popitem(last=False)

    def propose(self, state: DecodeState) -> Proposal:
        depth = state.max_draft
        if depth <= 0:
            return Proposal()
        successors = self.successors
        token_of = {(): state.ids[-1]}
        tokens, parents, index = [], [], {(): 0}
        for p in self.paths:
            up = p[:-1]
            if len(p) > depth or up not in index or token_of[up] not in successors:
                continue
            nxt = successors[token_of[up]][p[-1]]
            token_of[p] = nxt
            parents.append(index[up])
            tokens.append(nxt)
            index[p] = len(tokens)
        return Proposal(tokens, parents=parents) if tokens else Proposal()

    def commit(self, state: DecodeState, verified: Verified) -> None:
        logits = verified.tree_logits if self.rows is None else verified.tree_logits.index_select(-1, self.rows)
        rows = draft_vocab.tokens(topk_indices(logits, self.k), self.rows).tolist()
        self.successors.update(zip(verified.tree_tokens, rows))


def _rows(target, options: dict) -> torch.Tensor | None:
    return draft_vocab.rows(target, "recycling", options["draft_vocab"], DEFAULT_DRAFT_VOCAB)


def build(target, options: dict) -> TokenRecycling:
    return TokenRecycling(target, options["top_k"], options["nodes"], options["warm"], _rows(target, options))


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    # budget=auto by default: 1.05x budget=max's speed on a CPU with AVX2 only (results/smollm2-cpu-epyc-avx2-budget),
    # within 1% on the AVX512-BF16 EPYC (results/smollm2-cpu-epyc-budget; results/smollm2-cpu-epyc-n10-v12: max / auto
    # 1.004, p 0.37)
    return [DrafterSpec("recycling", build, OPTIONS, sizable=True, budget="auto", params=lambda target, options: 0,
                        info=lambda target, options: {"matrix": "warm across questions" if options["warm"]
                                                      else "reset per question",
                                                      **draft_vocab.describe(target, _rows(target, options))},
                        help="Token Recycling: each token's top-k successors from the verify logits, drafted "
                             "along a static tree; no training")]
