"""Medusa's hook implementations: the ``medusa`` method and the ``medusa`` trainer."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl

from . import train
from .drafter import OPTIONS, build, extra_params, heads_info


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    # budget=auto by default, as eagle: its sized tree ran 1.05x against 1.00x at its fixed 7 nodes, paired p 7e-6
    # (results/smollm2-cpu-epyc-tree-budget)
    return [DrafterSpec("medusa", build, OPTIONS, sizable=True, budget="auto", params=extra_params, info=heads_info,
                        tiny_options={"heads_path": "random"},
                        help="Medusa-1: K heads on the last hidden state draft K tokens at once, verified as a tree "
                             "(sized, mc_sim_7b_63) or as one sequence (tree=chain)")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("medusa", train.run, train.OPTIONS,
                        help="Medusa-1 heads by self-distillation on the shared data (target frozen, AdamW)")]
