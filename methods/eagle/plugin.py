"""EAGLE's hook implementations: the ``eagle`` method and the ``eagle`` trainer."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl

from . import train
from .drafter import OPTIONS, build, extra_params, head_info


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    # budget=auto by default: sized per round, its tree ran 1.04x against 0.97x at its fixed 7 nodes where verifying
    # 8 positions costs more than 4 (results/smollm2-cpu-epyc-eagle-budget); where it does not, auto keeps 7
    return [DrafterSpec("eagle", build, OPTIONS, sizable=True, budget="auto", params=extra_params,
                        info=head_info,
                        tiny_options={"head": "untrained", "draft_vocab": 0},
                        help="EAGLE-2: a one-layer head over [token ; target feature] drafts a dynamic tree "
                             "(EAGLE-1's chain with -o mode=chain); the target verifies it in one forward")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("eagle", train.run, train.OPTIONS, help=train.HELP)]
