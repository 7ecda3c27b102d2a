"""Medusa's hook implementations: the ``medusa`` method and the ``medusa`` trainer."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl

from . import train
from .drafter import OPTIONS, build, extra_params


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("medusa", build, OPTIONS, params=extra_params, tiny_options={"heads_path": "random"},
                        help="Medusa-1: K heads on the last hidden state draft K tokens at once, "
                             "single-sequence verification (no tree)")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("medusa", train.run, train.OPTIONS,
                        help="Medusa-1 heads by self-distillation on the shared data (target frozen, AdamW)")]
