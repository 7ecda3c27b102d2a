"""``kangaroo-oracle``: Kangaroo with the perfect draft stop, an upper bound on any confidence stop.

The paper stops drafting after the first token whose confidence is <= eta and never asks how far
that is from the best possible stop. This drafter is Kangaroo (same adapter, exit layer, gamma,
draft head) except for the stop: it keeps drafting exactly while its drafts equal what the target
would produce and stops after the first one that differs (still proposed, as Kangaroo proposes its
low-confidence token), or at gamma. So every round costs what a Kangaroo round with that many
drafts costs, and no stop rule that reads only the drafter's own confidence can accept more.

Greedy only: the target's own continuation is the reference, decoded by vanilla greedy decoding
of the same prompt in ``begin`` (memoised per prompt, so repeats and gamma variants share it).
That look-ahead is no cost a real method could pay; the engine leaves it out of the timings
(``untimed_s``), so the oracle's measured speed is that of its rounds.
"""

from __future__ import annotations

from collections import OrderedDict

from specharness.api import DecodeState
from specharness.errors import UsageError
from specharness.methods.kangaroo import drafter as kangaroo
from specharness.options import resolve_options
from specharness.model import TargetModel
from specharness.timing import clock_for

OPTIONS = [o for o in kangaroo.OPTIONS if o.name not in ("eta", "first_eta")]  # the oracle stops by the target
_KEEP = 256  # memoised continuations (prompts) kept per target


def target_continuation(target: TargetModel, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The target's greedy continuation of ``prompt`` (``TargetModel.greedy_continuation``: what
    vanilla decoding emits), memoised."""
    memo: OrderedDict = target.memo.setdefault("oracle-continuations", OrderedDict())
    key = (tuple(prompt), max_new_tokens)
    if key not in memo:
        memo[key] = target.greedy_continuation(list(prompt), max_new_tokens)
        while len(memo) > _KEEP:
            memo.popitem(last=False)
    return memo[key]


class OracleDrafter(kangaroo.KangarooDrafter):
    """Kangaroo's drafter whose stop knows the target's answer (see the module docstring)."""

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        if state.temperature > 0:
            raise UsageError("kangaroo-oracle is greedy only (its stop compares drafts with the target's "
                             "greedy continuation); use --temperature 0")
        clock = clock_for(self.t.device)
        t0 = clock()
        self.reference = target_continuation(self.t, state.ids[:state.prompt_len], state.max_new_tokens)
        self.untimed_s = clock() - t0
        super().begin(state, prefill_hidden)

    def keep_drafting(self, state: DecodeState, i: int, token: int, confidence: float) -> bool:
        at = state.pos + 1 + i - state.prompt_len  # index of draft i in the generated continuation
        return at < len(self.reference) and self.reference[at] == token


def build(target: TargetModel, options: dict) -> OracleDrafter:
    return kangaroo.build(target, resolve_options("kangaroo-oracle", OPTIONS, options), OracleDrafter)
