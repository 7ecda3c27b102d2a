"""``train NAME``: train what a drafter needs (an adapter, heads) with the target frozen."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import engine_request, model_args


def add_parser(sub) -> None:
    tr = sub.add_parser("train", help="train what a drafter needs (e.g. 'train kangaroo')",
                        description="Train a drafter's parameters with the target frozen; see 'specharness list' "
                                    "for each trainer's options.")
    tr.add_argument("trainer", help="trainer name, e.g. kangaroo")
    tr.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE")
    tr.add_argument("--out", default=None, help="output directory (default: the trainer's cache directory)")
    tr.add_argument("--resume", action="store_true", help="continue from the last epoch checkpoint")
    model_args(tr)
    tr.set_defaults(dtype="float32", compile="none")  # trainers run in float32, eagerly (autograd)


def cmd_train(args: argparse.Namespace) -> int:
    from ..options import resolve_options
    from ..plugins import build_registry
    from ..session import Session, check_threads
    registry = build_registry(args.plugin)
    spec = registry.trainer(args.trainer)
    options = resolve_options(args.trainer, spec.options, args.option)
    check_threads(args.threads)
    session = Session(engine_request(args), registry=registry)
    report = spec.run(session.target, options, Path(args.out) if args.out else None, args.resume)
    print(json.dumps({**(report or {}), "threads": session.threads}, indent=1, default=str))
    return 0
