"""EAGLE-3's hook implementations: the ``eagle3`` method and the ``eagle3`` trainer."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl

from . import train
from .drafter import OPTIONS, build, extra_params, head_info


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    # budget=auto by default, as eagle: 1.04x against 1.03x at its fixed 7 nodes, paired p 0.04
    # (results/smollm2-cpu-epyc-tree-budget)
    return [DrafterSpec("eagle3", build, OPTIONS, sizable=True, budget="auto", params=extra_params, info=head_info,
                        tiny_options={"head": "untrained", "draft_vocab": 0},
                        help="EAGLE-3: EAGLE-2's dynamic tree from a head that fuses the target's low, middle and "
                             "high layers, trained on its own drafts (training-time test)")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("eagle3", train.run, train.OPTIONS, help=train.HELP)]
