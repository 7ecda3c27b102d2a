"""Kangaroo's hook implementations: the ``kangaroo`` method and the ``kangaroo`` trainer."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl

from . import train
from .drafter import OPTIONS, adapter_info, build, extra_params


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("kangaroo", build, OPTIONS, sizable=True, params=extra_params, info=adapter_info,
                        tiny_options={"adapter": "random"},
                        help="double early exiting: shallow layers + trained adapter draft, deep layers verify")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("kangaroo", train.run, train.OPTIONS, help=train.HELP)]
