"""The plugin contract: what a method plugin builds and what it exchanges with the engine.

A method plugin imports this module (and ``specharness.hookspecs`` for its registration), never the
engine or the model's internals: ``Proposal`` is what a drafter hands the engine each round,
``Verified`` what the target said about it, ``DecodeState`` what a drafter may read, ``Drafter``
the interface ``DrafterSpec.build`` returns, ``OptionSpec`` a typed method option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from .options import OptionSpec

if TYPE_CHECKING:
    from .model import KVCache, TargetModel

__all__ = ["Proposal", "Verified", "DecodeState", "Drafter", "OptionSpec"]


@dataclass
class Proposal:
    """What a drafter hands the engine; it never verifies or touches the acceptance maths.

    ``parents[i]`` is the node draft i continues: 0 = the current token, j = draft j - 1 (None: a
    chain). Sibling drafts must be distinct; when sampling, ``q[i]`` is the distribution of the
    draft's *parent* node from which its children were drawn in order without replacement (for a
    chain: the distribution draft i was drawn from), or ``q`` is None: drafts chosen
    deterministically. ``hidden`` holds the states entering layer ``layer`` for every node
    (current token first), so verification runs only layers [layer, L). ``source`` names where the
    drafts came from (sam: "text", "corpus", "fallback"; pld: "3-gram" ... "1-gram"): results keep it
    per round, and ``budget=auto`` sizes each source's rounds apart (``specharness.budget``).
    """

    tokens: list[int] = field(default_factory=list)
    q: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    layer: int = 0
    parents: list[int] | None = None
    source: str = ""


@dataclass
class Verified:
    """What the target said about a proposal, for ``Drafter.commit``."""

    start: int  # the position of the round's current token
    accepted: int  # drafts kept (the accepted path's length)
    path: tuple[int, ...]  # tree nodes of the kept drafts, in order (a chain: 1 .. accepted)
    hidden: torch.Tensor  # [accepted + 1, H] final hidden states (before the norm) of current + kept drafts
    logits: torch.Tensor  # [accepted + 1, V] the target's logits there
    captured: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [accepted + 1, H]
    tree_tokens: list[int] = field(default_factory=list)  # every verified node's token (current first)
    tree_logits: torch.Tensor | None = None  # [nodes, V] the target's logits at every verified node

    def __int__(self) -> int:
        return self.accepted


@dataclass
class DecodeState:
    """What a drafter may read: the target, the shared cache, the sequence so far and the budget."""

    target: "TargetModel"
    cache: "KVCache"
    ids: list[int]
    prompt_len: int
    max_new_tokens: int
    temperature: float
    generator: torch.Generator
    final_hidden: torch.Tensor | None = None  # final hidden state (before the norm) that chose ids[-1]
    prompt_hidden: torch.Tensor | None = None  # the prompt's final hidden states (before the norm), for begin
    prompt_captured: dict[int, torch.Tensor] | None = None  # the prompt's states after ``capture_layers``, for begin
    # most drafts this round (``budget=auto`` sizes each round; ``specharness.budget``): a drafter that
    # drafts one token at a time stops there; the engine cuts any longer proposal to its first ``budget``
    budget: int = 1 << 30

    @property
    def last_hidden(self) -> torch.Tensor | None:
        """The normed final hidden state that chose ids[-1] (Medusa's heads read it), normed when asked:
        an eager norm every round cost 0.2 ms of a vanilla round's bookkeeping."""
        return None if self.final_hidden is None else self.target.norm(self.final_hidden)

    @property
    def pos(self) -> int:
        """Position of the current token (the first position the next forward computes)."""
        return len(self.ids) - 1

    @property
    def max_draft(self) -> int:
        """Longest chain of drafts that could be kept: every round also adds the target's own token."""
        return self.max_new_tokens - (len(self.ids) - self.prompt_len) - 1


class Drafter(Protocol):
    """What ``DrafterSpec.build`` returns. Attributes marked optional may be left out."""

    exit_layer: int  # layer whose hidden states the drafter hands over (0: it hands over none)
    # optional: layers whose output hidden states ``commit`` should receive (EAGLE-3 style)
    capture_layers: tuple[int, ...]
    # optional (default 1): the widest verification forward a round can ask for (current token +
    # drafts; a tree's node count): warm-up compiles every width bucket up to it before timing
    max_width: int

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        """Called after the prefill; ``prefill_hidden`` = prompt states entering ``exit_layer``."""

    def propose(self, state: DecodeState) -> Proposal: ...

    def commit(self, state: DecodeState, verified: Verified) -> None:
        """Called after the cache was cut back to the accepted path."""

    # optional: bytes of weights one draft token reads (``specharness.model.read_bytes``); the profile
    # divides a drafted token's measured cost by these over the memory bandwidth (its byte roofline)
    draft_bytes: int

    # optional: seconds of ``begin`` that are no cost of the method (an oracle's look-ahead); the
    # engine leaves them out of the prefill round and of the wall time
    untimed_s: float
