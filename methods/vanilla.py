"""Vanilla decoding through the same engine: the drafter that proposes nothing.

Every round is then one one-token target forward, so its speed is the baseline every speedup in
this harness divides by.
"""

from __future__ import annotations

from specharness.api import DecodeState, Proposal
from specharness.hookspecs import DrafterSpec, hookimpl


class NoDraft:
    exit_layer = 0
    max_width = 1

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        pass

    def propose(self, state: DecodeState) -> Proposal:
        return Proposal()

    def commit(self, state: DecodeState, accepted: int) -> None:
        pass


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("vanilla", lambda target, options: NoDraft(),
                        help="plain autoregressive decoding, one target forward per token")]
