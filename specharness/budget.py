"""Each round's draft size from this machine's costs and this generation's acceptance (``budget=auto``).

Why: what a wider verification costs depends on the machine, and on a CPU even on the compile.
Verifying 8 positions costs 1.09x one position on a Xeon with AMX, 1.5-2.1x on an AVX512 EPYC
(``results/smollm2-cpu-epyc-profile-v7``), and 0.7x there in another max-autotune compile
(``results/smollm2-cpu-epyc-budget``), so a method's fixed draft size (EAGLE's 7 nodes, pld's 7
tokens) cannot be right everywhere.

How: the candidate sizes are the draft counts that fill each compiled width bucket up to the
method's own size (1, 3, 7 drafts for widths 2, 4, 8). After warm-up, ``AutoBudget.calibrate``
measures once, in the run's process, a verification forward at each of those widths and the rest
of a round (drafting, accepting) at each size. Each generation then gets a fresh ``Sizer``, which picks every
round the size with the most tokens per second so far:

- a drafter that allows sizing (``DrafterSpec.sizable``) proposes, with room for n drafts, the first
  n nodes of what it proposes unbounded (parents before children, best first); the engine cuts any
  proposal to the round's size. So a round run at size n says exactly what every size m <= n would
  have kept: the accepted path's nodes numbered <= m (greedy; an estimate when sampling). A round
  whose drafter proposed fewer than n says the same for every larger size;
- from those counterfactuals each size's tokens (kept + 1) and cost (its verification width, and
  the rest of a round at that size) are summed, recent rounds weighing more (``DECAY``); a smaller
  size is chosen only when ``MARGIN`` faster than a larger one;
- the first ``FIRST`` rounds run the method's own size; later, every ``EXPLORE``-th round tries the
  next size up, so larger sizes are measured again when the text changes;
- a drafter with several sources (``Proposal.source``: SAM's long matches, short matches and fallback;
  pld's 3-, 2- and 1-gram matches) keeps a tally per source and each source gets its own size: a
  1-token match keeps 0.60 tokens, a 2-token one 1.65 (``results/smollm2-recycling-warm``), so one
  size cannot suit both. The drafter proposes with room for the largest size any source gets, and
  its proposal is cut to its source's. A source's size is the one that makes the whole generation
  fastest, the other sources' rounds as they ran: a source whose rounds keep little yields time to
  the others even where its own rounds alone would run a hair faster larger.

Lossless: the size depends only on earlier rounds, never on this round's drafts, and a cut keeps a
prefix of the drafts (a chain's first n, or a tree's first n nodes with their parents). Deterministic:
costs are fixed after calibration and a sizer starts fresh each generation, so a repeat with the same
seed reproduces its tokens.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .api import Proposal
from .model import WIDTH_BUCKETS
from .options import OptionSpec
from .width_curve import verify_seconds

if TYPE_CHECKING:
    from .model import TargetModel

CHOICES = ("max", "auto")
OPTION = OptionSpec("budget", "str", "max", "draft size per round: 'max' = the method's own size every round; "
                    "'auto' = the size (1, 3, 7 ... drafts: full width buckets) with the most tokens per second, "
                    "from verification costs measured after warm-up and this generation's acceptance, "
                    "per source where the drafter names one (pld's match length, sam's match or fallback)",
                    choices=CHOICES)
FIRST = 3  # rounds at the method's own size before choosing (every size <= it is then measured)
EXPLORE = 8  # every EXPLORE-th round tries the next size up
MARGIN = 0.03  # how much faster a smaller size must be to be chosen over a larger one
DECAY = 0.9  # a round's weight, per round since: a generation's text changes (loops start)
CALIBRATION_TOKENS = 32  # the calibration generation's length


def sizes_for(max_drafts: int, width: Callable[[int], int]) -> list[int]:
    """Draft counts that fill each width bucket up to ``max_drafts`` (plus ``max_drafts`` itself)."""
    full = {width(w) - 1 for w in WIDTH_BUCKETS if 2 <= w <= max_drafts + 1}
    return sorted({n for n in full if 1 <= n <= max_drafts} | {max_drafts})


def trim(prop: Proposal, n: int) -> Proposal:
    """The first ``n`` drafts of a proposal (parents come first, so a tree's prefix is a tree)."""
    if len(prop.tokens) <= n:
        return prop
    return Proposal(prop.tokens[:n], None if prop.q is None else prop.q[:n],
                    None if prop.hidden is None else prop.hidden[:n + 1], prop.layer,
                    None if prop.parents is None else prop.parents[:n], prop.source)


@dataclass(frozen=True)
class Costs:
    """Seconds, measured once after warm-up: a verification forward per width, and the rest of a
    round at each size (drafting + accepting, a round run at that size: how a drafter's cost grows
    with its size is its own; EAGLE's expansion costs the same at 3 nodes as at 7, Kangaroo's grows
    with each token)."""

    verify: dict[int, float]  # padded width -> seconds
    rest: dict[int, float]  # size -> seconds

    def round(self, drafts: int, size: int, width: Callable[[int], int]) -> float:
        w = width(drafts + 1)  # an eager backend runs any width: the narrowest measured one that holds it
        measured = next((v for v in sorted(self.verify) if v >= w), max(self.verify))
        return self.verify[measured] + self.rest[size]

    def describe(self) -> dict:
        return {"verify_ms": {str(w): round(s * 1e3, 3) for w, s in sorted(self.verify.items())},
                "rest_ms": {str(n): round(s * 1e3, 3) for n, s in sorted(self.rest.items())}}


@dataclass
class Tally:
    """One source's rounds, decayed sums: per size what the rounds that say so would have kept (tokens
    a round: kept + 1), cost, and how many they were, aged by the source's own rounds; and all its rounds
    at the sizes they ran, aged by every round."""

    tokens: dict[int, float] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    weight: dict[int, float] = field(default_factory=dict)
    ran_tokens: float = 0.0
    ran_seconds: float = 0.0
    ran_weight: float = 0.0
    rounds: int = 0

    def age_sizes(self) -> None:
        """Per size: a round of this source's own since weighs ``DECAY`` less."""
        for sums in self.tokens, self.seconds, self.weight:
            for n in sums:
                sums[n] *= DECAY

    def age_ran(self) -> None:
        """What ran: any round since weighs ``DECAY`` less, so this source's weight is how often it drafted lately."""
        self.ran_tokens *= DECAY
        self.ran_seconds *= DECAY
        self.ran_weight *= DECAY

    def per_round(self, n: int) -> tuple[float, float]:
        """Tokens and seconds of this source's rounds, scaled to all of them, had they run at size ``n``
        (a size measured fewer rounds, or long ago, counts at its rounds' mean, not at its faded sum)."""
        scale = self.ran_weight / self.weight[n]
        return self.tokens[n] * scale, self.seconds[n] * scale


@dataclass
class Sizer:
    """One generation's draft sizes (see the module's docstring)."""

    costs: Costs
    sizes: list[int]
    width: Callable[[int], int]
    tallies: dict[str, Tally] = field(default_factory=dict)  # source -> its rounds

    @property
    def rounds(self) -> int:
        return sum(t.rounds for t in self.tallies.values())

    def best(self, source: str = "") -> int:
        """The size with the most tokens per second for the whole generation, had ``source``'s rounds run
        at it (every other source's rounds as they ran); a smaller size must beat a larger one by
        ``MARGIN`` of this source's share of the time (rounds that draft nothing cost every size alike,
        but its measured costs differ by noise)."""
        t = self.tallies.get(source)
        if t is None:
            return self.sizes[-1]
        others = [o for s, o in self.tallies.items() if s != source]
        tokens, seconds = sum(o.ran_tokens for o in others), sum(o.ran_seconds for o in others)

        def rate(n: int) -> float:
            mine_tokens, mine_seconds = t.per_round(n)
            return (tokens + mine_tokens) / (seconds + mine_seconds) if seconds + mine_seconds else 0.0

        best = None
        for n in reversed(self.sizes):
            if n not in t.tokens:
                continue
            if best is not None:
                mine = t.per_round(best)[1]
                if not rate(n) > (1 + MARGIN * mine / (seconds + mine)) * rate(best):
                    continue
            best = n
        return self.sizes[-1] if best is None else best

    def next(self, source: str = "") -> int:
        """The size for a round whose drafts came from ``source``."""
        t = self.tallies.get(source)
        rounds = t.rounds if t else 0
        if rounds < FIRST:
            return self.sizes[-1]
        n = self.best(source)
        if rounds % EXPLORE == 0 and n < self.sizes[-1]:
            return self.sizes[self.sizes.index(n) + 1]
        return n

    def room(self) -> int:
        """The room a drafter proposes into, before its source is known: the largest size any source
        seen so far gets (the method's own size before any round)."""
        return max((self.next(s) for s in self.tallies), default=self.sizes[-1])

    def observe(self, size: int, drafted: int, path: tuple[int, ...], source: str = "") -> None:
        """A round from ``source`` run at ``size`` that verified ``drafted`` drafts and kept the nodes ``path``."""
        for other in self.tallies.values():
            other.age_ran()
        t = self.tallies.setdefault(source, Tally())
        t.age_sizes()  # a size last measured long ago yields to its next measurement; a source seen one round
        t.rounds += 1  # in four keeps its per-size means over its own last rounds, not over a faded few
        for n in self.sizes:
            if n > size and drafted >= size:
                continue  # a larger size might have drafted more: unknown
            kept = sum(1 for node in path if node <= n)  # ancestors are numbered lower: a prefix of the path
            t.tokens[n] = t.tokens.get(n, 0.0) + 1 + kept
            t.seconds[n] = t.seconds.get(n, 0.0) + self.costs.round(min(drafted, n), n, self.width)
            t.weight[n] = t.weight.get(n, 0.0) + 1
        t.ran_tokens += 1 + len(path)
        t.ran_seconds += self.costs.round(drafted, size, self.width)
        t.ran_weight += 1


class FixedSize:
    """Every round at draft size ``n``, whatever the rounds before it kept: the rounds calibration times at
    each size, and the profile's draft-cost line (a drafter's cost measured at each size, not only at the
    sizes a run happens to pick)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def room(self) -> int:
        return self.n

    def next(self, source: str = "") -> int:
        return self.n

    def observe(self, size: int, drafted: int, path: tuple[int, ...], source: str = "") -> None:
        pass


class AutoBudget:
    """``budget=auto`` for one method: its costs, measured once, and a fresh ``Sizer`` per generation."""

    def __init__(self, target: "TargetModel", max_drafts: int, verify_layer: int) -> None:
        self.target, self.verify_layer = target, verify_layer
        self.sizes = sizes_for(max_drafts, target.backend.width)
        self.costs: Costs | None = None

    def sizer(self) -> Sizer:
        assert self.costs is not None, "calibrate first"
        return Sizer(self.costs, self.sizes, self.target.backend.width)

    def calibrate(self, generate: Callable[[list[int], int, int], list], prompt_ids: list[int]) -> dict:
        """Measure the costs (untimed, after the graphs are compiled): ``generate(ids, tokens, n)`` runs
        the method with every round at size n (``FixedSize``) and returns its rounds; one short
        generation per size gives that size's median draft + accept time. Returns what was measured,
        for the header."""
        widths = sorted({self.target.backend.width(n + 1) for n in [0, *self.sizes]})  # 0: a round with no drafts
        verify = verify_seconds(self.target, self.verify_layer, widths)
        rest = {}
        for n in self.sizes:
            rounds = generate(prompt_ids, CALIBRATION_TOKENS, n)[1:]  # the prefill is no round
            rest[n] = statistics.median(r.draft_s + r.accept_s for r in rounds) if rounds else 0.0
        self.costs = Costs(verify, rest)
        return {"sizes": self.sizes, **self.costs.describe()}
