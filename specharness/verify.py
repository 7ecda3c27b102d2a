"""The acceptance maths: greedy exact match and speculative sampling. Nowhere else.

Both verifiers take the target's logits at the k+1 verified positions (the current token and the
k drafts) and return how many drafts were accepted and the one token the target adds after them
(the correction on a rejection, the bonus when all were accepted).

Speculative sampling (Leviathan et al., 2023; Chen et al., 2023): accept draft x_i with
probability min(1, p_i(x_i) / q_i(x_i)); on the first rejection sample from
norm(max(0, p_i - q_i)); when all k are accepted sample the bonus from p_k. The output is then
distributed exactly as sampling from p alone, for any draft distribution q. A drafter that gives
no q proposed deterministically, so q is the point mass on its token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .hookspecs import VerifierSpec, hookimpl


@dataclass(frozen=True)
class Acceptance:
    accepted: int  # drafts accepted, 0..k
    next_token: int  # the target's own token after them


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The target's sampling distribution at temperature T (float32 for stable ratios)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def greedy(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None, temperature: float,
           generator: torch.Generator | None) -> Acceptance:
    """Accept the longest prefix of drafts equal to the target's argmax."""
    best = logits.argmax(dim=-1).tolist()
    n = 0
    while n < len(drafts) and drafts[n] == best[n]:
        n += 1
    return Acceptance(n, best[n])


def speculative_sampling(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None,
                         temperature: float, generator: torch.Generator | None) -> Acceptance:
    """Lossless acceptance for sampled decoding (see the module docstring)."""
    p = target_probs(logits, temperature)
    k = len(drafts)
    if k:
        idx = torch.arange(k, device=p.device)
        tok = torch.tensor(drafts, device=p.device)
        p_x = p[idx, tok]
        q_x = q.float()[idx, tok] if q is not None else torch.ones_like(p_x)
        u = torch.rand(k, generator=generator, device=p.device)
        ok = (u * q_x <= p_x).tolist()  # u < p/q without dividing by a tiny q
        for i in range(k):
            if not ok[i]:
                residual = p[i].clone()
                if q is not None:
                    residual = (residual - q[i].float()).clamp_(min=0)
                else:
                    residual[drafts[i]] = 0.0
                if residual.sum() <= 0:  # p == q up to rounding: any sample from p is exact
                    residual = p[i]
                return Acceptance(i, int(torch.multinomial(residual, 1, generator=generator)))
    return Acceptance(k, int(torch.multinomial(p[k], 1, generator=generator)))


@hookimpl
def specharness_verifiers() -> list[VerifierSpec]:
    return [
        VerifierSpec("greedy", greedy, sampling=False,
                     help="exact match against the target's argmax (temperature 0)"),
        VerifierSpec("speculative-sampling", speculative_sampling, sampling=True,
                     help="accept with min(1, p/q), else resample from norm(max(0, p - q))"),
    ]
