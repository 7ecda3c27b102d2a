"""SAM-Decoding's hook implementation: the ``sam`` method."""

from __future__ import annotations

from specharness.hookspecs import DrafterSpec, hookimpl

from .drafter import OPTIONS, build, extra_params, info


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("sam", build, OPTIONS, sizable=True, params=extra_params, info=info,
                        help="SAM-Decoding: draft what followed the longest earlier match of the text's suffix "
                             "(a suffix automaton over prompt + answer, optionally a corpus); a fallback "
                             "drafter (recycling, eagle) when the match is short; no training")]
