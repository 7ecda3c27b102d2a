"""The acceptance maths: greedy exact match and speculative sampling, for chains and trees. Nowhere else.

A verifier takes the target's logits at the T verified nodes (node 0 = the current token, node i
= draft i - 1), the drafts, their draft distributions (sampling) and, for a tree, the drafts'
parents (``specharness.tree``; a chain passes none). It returns the accepted path and the one
token the target adds after it (the correction on a rejection, the bonus after a full path).

Greedy: from the root, step to the child whose token is the target's argmax at the current node,
while there is one: the longest root-to-node path that matches the target.

Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), generalised to trees as in
SpecInfer / EAGLE: at a node with children x_1..x_m drawn in order without replacement from the
draft distribution q (or chosen deterministically: q = a point mass on each x_i), and the target's
distribution p there, accept x_i with probability min(1, p(x_i) / q(x_i)); on rejection set
p <- norm(max(0, p - q)) and q <- q with x_i removed, renormalised, and try the next sibling; when
every child is rejected sample the target's token from the remaining p. Each step is one
speculative-sampling step on (p, q) as they stand, so the output is distributed exactly as
sampling from p alone, whatever q is. A chain is the tree where every node has one child.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .hookspecs import VerifierSpec, hookimpl
from .model.layers import argmax
from .tree import Tree


@dataclass(frozen=True)
class Acceptance:
    accepted: int  # drafts accepted: the accepted path's length
    next_token: int  # the target's own token after them
    path: tuple[int, ...] | None = None  # tree nodes of the accepted drafts (None: a chain's first ``accepted``)


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The target's sampling distribution at temperature T (float32 for stable ratios)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def greedy(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None, temperature: float,
           generator: torch.Generator | None, parents: list[int] | None = None) -> Acceptance:
    """The longest root-to-node path whose drafts equal the target's argmax, taken only at the nodes
    the walk reaches: a round that verifies 8 nodes and keeps one draft reads 2 rows of logits, not 8
    (SmolLM2's 49,152 in bfloat16 on a 2-core EPYC: 51 us one row, 187 us eight; ``layers.argmax``)."""
    tree = Tree.from_drafts(parents, len(drafts))
    node, path = 0, []
    while True:
        best = int(argmax(logits[node]))
        nxt = next((c for c in tree.children[node] if drafts[c - 1] == best), None)
        if nxt is None:
            return Acceptance(len(path), best, tuple(path))
        path.append(nxt)
        node = nxt


def reject(p: torch.Tensor, q: torch.Tensor | None, x: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(p, q) after draft ``x`` drawn from q was rejected: the target's residual norm(max(0, p - q)),
    and q without x, renormalised, for the next sibling was drawn from it. ``q`` None is a point mass
    on x, whose residual is p without x. The one step that keeps the output distributed as p; the
    sampling tests mutate it (``tests/test_sampling_power.py``). ``q`` is the caller's copy and is
    zeroed at x in place."""
    if q is None:
        residual = p.clone()
        residual[x] = 0.0
    else:
        residual = (p - q).clamp_(min=0)
        q[x] = 0.0
        total_q = q.sum()
        q = q / total_q if total_q > 0 else q
    total = residual.sum()
    return (residual / total if total > 0 else p), q  # p == q up to rounding: any sample from p is exact


def speculative_sampling(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None,
                         temperature: float, generator: torch.Generator | None,
                         parents: list[int] | None = None) -> Acceptance:
    """Lossless acceptance for sampled decoding (see the module docstring)."""
    tree = Tree.from_drafts(parents, len(drafts))
    node, path = 0, []
    while True:
        kids = tree.children[node]
        p = target_probs(logits[node], temperature)  # at the nodes the walk reaches only
        if kids:
            qn = q[kids[0] - 1].float().clone() if q is not None else None
            u = torch.rand(len(kids), generator=generator, device=p.device).tolist()
            for c, u_c in zip(kids, u):
                x = drafts[c - 1]
                q_x = float(qn[x]) if qn is not None else 1.0
                if q_x <= 0.0:  # u * 0 <= p[x] would accept it whatever p says
                    raise RuntimeError(f"draft token {x} (node {c}) has probability 0 under the q it came with: a "
                                       "drafter's q must be the distribution its drafts were drawn from")
                if u_c * q_x <= float(p[x]):  # accept with min(1, p/q), without dividing by a tiny q
                    break
                p, qn = reject(p, qn, x)
            else:
                return Acceptance(len(path), int(torch.multinomial(p, 1, generator=generator)), tuple(path))
            path.append(c)
            node = c
            continue
        return Acceptance(len(path), int(torch.multinomial(p, 1, generator=generator)), tuple(path))


@hookimpl
def specharness_verifiers() -> list[VerifierSpec]:
    return [
        VerifierSpec("greedy", greedy, sampling=False,
                     help="exact match against the target's argmax, along the longest matching path of a tree"),
        VerifierSpec("speculative-sampling", speculative_sampling, sampling=True,
                     help="accept with min(1, p/q), else resample from norm(max(0, p - q)); siblings in turn"),
    ]
