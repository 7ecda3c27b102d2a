"""python -m specharness {run,compare,list,train,report,lossless,profile,gpu-check}: the command line, one
module per command (each adds its parser and runs it).

Every user error becomes one line on stderr and exit code 2; Ctrl-C keeps every finished question
on disk and says how to resume.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UsageError
from . import gpu_check, listing, lossless, profile, report, run, train
from .common import Parser

COMMANDS = {"run": run.cmd_run, "compare": run.cmd_run, "list": listing.cmd_list, "train": train.cmd_train,
            "report": report.cmd_report, "lossless": lossless.cmd_lossless, "profile": profile.cmd_profile,
            "gpu-check": gpu_check.cmd_gpu_check}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="specharness",
        description="Benchmark self-drafting speculative decoding methods on Spec-Bench: speed with "
                    "confidence intervals, acceptance statistics, and checked losslessness.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    run.add_parsers(sub)
    listing.add_parser(sub)
    train.add_parser(sub)
    report.add_parser(sub)
    lossless.add_parser(sub)
    profile.add_parser(sub)
    gpu_check.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a one-line parse error already printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"specharness: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader closed the pipe (list | head): it has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
