"""``eagle3``: EAGLE-2's dynamic tree (``methods/eagle/drafter.py``, the same drafter) from an EAGLE-3
head. Verification hands back the target's states after the head's low, middle and high layers
(``capture_layers``); the head fuses them into the feature of each committed position."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specharness.model import TargetModel

from ..eagle import drafter as eagle
from ..eagle.checkpoint import HeadKind
from .head import Eagle3Head

KIND = HeadKind(Eagle3Head, "EAGLE-3", Path(__file__).with_name("heads"))

OPTIONS = [replace(o, help=o.help.replace("the target's last layer", "the target's last layer, fusing the high "
                                           "layer alone")) if o.name == "head" else o for o in eagle.OPTIONS]


def build(target: TargetModel, options: dict) -> eagle.EagleDrafter:
    return eagle.build(target, options, KIND)


def extra_params(target: TargetModel, options: dict) -> int:
    return eagle.extra_params(target, options, KIND)


def head_info(target: TargetModel, options: dict) -> dict:
    return eagle.head_info(target, options, KIND)
