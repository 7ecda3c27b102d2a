"""``list``: methods with their options, verifiers, trainers and subtasks."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    ls = sub.add_parser("list", help="methods with their options, subtasks, verifiers, trainers")
    ls.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py")


def _options(options) -> None:
    for o in options:
        print(f"      -o {o.name}=<{o.type}>  default {o.default!r}, {o.describe_range()}: {o.help}")


def cmd_list(args: argparse.Namespace) -> int:
    from ..plugins import build_registry
    from ..tasks.specbench import SUBTASKS
    reg = build_registry(args.plugin)
    print("methods:")
    for name in reg.methods:
        spec = reg.method(name)
        print(f"  {name:24s} {spec.help}")
        _options(spec.options)
    print("verifiers:")
    for name, v in sorted(reg.verifiers.items()):
        print(f"  {name:24s} {v.help}")
    print("trainers:")
    for name, t in sorted(reg.trainers.items()):
        print(f"  {name:24s} {t.help}")
        _options(t.options)
    print("subtasks:\n  " + ", ".join(SUBTASKS))
    return 0
