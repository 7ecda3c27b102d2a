"""Speculative sampling keeps the target distribution for any draft distribution; a broken rule is caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specharness.verify import Acceptance, greedy, speculative_sampling, target_probs

V = 6


def always_accept(logits, drafts, q, temperature, generator):
    """A deliberately wrong rule: keeps every draft, as a buggy verifier would."""
    p = target_probs(logits, temperature)
    return Acceptance(len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=generator)))


def first_token_counts(rule, n=6000, seed=0, deterministic_draft=False):
    """Emit one token per trial through ``rule`` with a draft from a deliberately wrong q."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0], [0.0] * V])
    q = torch.tensor([[0.02, 0.08, 0.1, 0.2, 0.3, 0.3]])  # mass where p has little
    counts = np.zeros(V)
    for _ in range(n):
        draft = 5 if deterministic_draft else int(torch.multinomial(q[0], 1, generator=g))
        acc = rule(logits, [draft], None if deterministic_draft else q, 1.0, g)
        counts[draft if acc.accepted else acc.next_token] += 1
    return counts, target_probs(logits[0], 1.0).numpy()


@pytest.mark.parametrize("deterministic", [False, True])
def test_speculative_sampling_keeps_target_distribution(deterministic):
    counts, p = first_token_counts(speculative_sampling, deterministic_draft=deterministic)
    assert chisquare(counts, p * counts.sum()).pvalue > 1e-3


def test_broken_rule_is_caught_by_the_same_test():
    counts, p = first_token_counts(always_accept)
    assert chisquare(counts, p * counts.sum()).pvalue < 1e-6


def test_all_accepted_gives_bonus_from_last_position():
    logits = torch.full((3, V), -20.0)
    logits[0, 2] = logits[1, 4] = logits[2, 1] = 20.0
    acc = speculative_sampling(logits, [2, 4], None, 1.0, torch.Generator().manual_seed(0))
    assert acc == Acceptance(2, 1, (1, 2))
    assert greedy(logits, [2, 4], None, 0.0, None) == Acceptance(2, 1, (1, 2))
    assert greedy(logits, [2, 3], None, 0.0, None) == Acceptance(1, 4, (1,))
    assert greedy(logits[:1], [], None, 0.0, None) == Acceptance(0, 2, ())
