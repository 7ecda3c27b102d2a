"""EAGLE's hook implementations: the ``eagle`` method and the ``eagle`` trainer."""

from __future__ import annotations

from specharness import draft_vocab
from specharness.hookspecs import DrafterSpec, TrainerSpec, hookimpl
from specharness.training import checkpoint_summary

from . import train
from .checkpoint import UNTRAINED, load_head, resolve_head_path
from .drafter import OPTIONS, build, extra_params


def _info(target, options: dict) -> dict:
    """Tree or chain, which head, its draft rows (what ``draft_vocab=-1`` meant here), and (from its
    report.json) what that head was trained on."""
    path = resolve_head_path(target, options["head"])
    trained = checkpoint_summary(path) if path != UNTRAINED else {}
    rows = load_head(path, target, options["draft_vocab"])[1]
    return {"tree": options["mode"], "head": options["head"] or "shipped", **draft_vocab.describe(target, rows),
            **({"training": trained} if trained else {})}


@hookimpl
def specharness_drafters() -> list[DrafterSpec]:
    return [DrafterSpec("eagle", build, OPTIONS, sizable=True, params=extra_params,
                        info=_info,
                        tiny_options={"head": "untrained", "draft_vocab": 0},
                        help="EAGLE-2: a one-layer head over [token ; target feature] drafts a dynamic tree "
                             "(EAGLE-1's chain with -o mode=chain); the target verifies it in one forward")]


@hookimpl
def specharness_trainers() -> list[TrainerSpec]:
    return [TrainerSpec("eagle", train.run, train.OPTIONS, help=train.HELP)]
