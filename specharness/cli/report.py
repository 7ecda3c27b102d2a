"""``report``: paper-style tables and figures from result files (no model needed; light imports)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from ..report.looping import LoopRule


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report", help="paper-style tables and figures from result files (no model needed)",
        description="Table 1 (speedup with 95% CI and CR per subtask), detail, greedy identity, paired tests, "
                    "acceptance and cost, the share of looping turns per subtask and Table 1 without them, "
                    "Figure 1(a) CTAR curves, 1(b) speedup bars, and each method's own sections (Kangaroo: "
                    "Table 2 ablation, 3(a) exit-layer sweep, 3(b) eta sweep with the oracle stop, best eta per "
                    "subtask); Markdown, LaTeX, PNG and PDF.")
    p.add_argument("results", nargs="+", metavar="RESULT_FILE_OR_DIR",
                   help="result files (.jsonl with its .meta.json) or directories holding them")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--ctar-subtask", default="math_reasoning", help="subtask of Figure 1(a) (default: %(default)s)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="plugin contributing report sections (repeatable)")
    p.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="an engine profile ('specharness profile'): predict each file's speedup from it")
    p.add_argument("--loop-ngram", default="8", metavar="N",
                   help="n-gram length of the looping test: a turn loops when, at --loop-threshold of the positions "
                        "of vanilla's output, the N-gram ending there already ended earlier in it "
                        "(default: %(default)s)")
    p.add_argument("--loop-threshold", default="0.3", metavar="SHARE",
                   help="share of repeated N-gram positions from which a turn loops, in (0, 1] "
                        "(default: %(default)s)")


def loop_rule(args: argparse.Namespace) -> LoopRule:
    """--loop-ngram and --loop-threshold checked here, so a bad value is one line before any work."""
    from ..report.looping import LoopRule
    try:
        n = int(args.loop_ngram)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--loop-ngram must be an integer >= 1, got '{args.loop_ngram}'")
    try:
        t = float(args.loop_threshold)
    except ValueError:
        t = float("nan")
    if not 0 < t <= 1:
        raise UsageError(f"--loop-threshold must be a number in (0, 1], got '{args.loop_threshold}'")
    return LoopRule(n, t)


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import build_report
    from ..tasks.specbench import SUBTASKS
    if args.ctar_subtask not in SUBTASKS:
        raise UsageError(f"unknown subtask '{args.ctar_subtask}'; choose from {', '.join(SUBTASKS)}")
    if args.profile and Path(args.profile).is_dir():
        hint = " (it holds profile.json)" if (Path(args.profile) / "profile.json").is_file() else ""
        raise UsageError(f"--profile '{args.profile}' is a folder{hint}; give its profile.json")
    if args.profile and not Path(args.profile).is_file():
        raise UsageError(f"profile '{args.profile}' does not exist; make one with 'python -m specharness profile'")
    writer = build_report(args.results, args.out, args.plugin, args.ctar_subtask, args.profile, loop_rule(args))
    print(f"wrote {len(writer.made)} files to {writer.out}: {', '.join(writer.made)}")
    return 0
