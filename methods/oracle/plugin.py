"""The ``kangaroo-oracle`` method: Kangaroo with the perfect draft stop (see ``drafter.py``)."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, hookimpl
from specharness.methods.kangaroo import drafter as kangaroo

from .drafter import OPTIONS, build


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("kangaroo-oracle", build, OPTIONS,
                        params=lambda target, options: kangaroo.extra_params(target, options),
                        info=lambda target, options: kangaroo.adapter_info(target, options),
                        tiny_options={"adapter": "random"}, greedy_only=True,
                        help="Kangaroo with the oracle draft stop (greedy only): an upper bound on any "
                             "confidence stop; its look-ahead is left out of the timings")]
