"""``report``: paper-style tables and figures from result files (no model needed; light imports)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report", help="paper-style tables and figures from result files (no model needed)",
        description="Table 1 (speedup with 95% CI and CR per subtask), detail, greedy identity, paired tests, "
                    "acceptance and cost, Figure 1(a) CTAR curves, 1(b) speedup bars, and each method's own "
                    "sections (Kangaroo: Table 2 ablation, 3(a) exit-layer sweep, 3(b) eta sweep with the oracle "
                    "stop, best eta per subtask); Markdown, LaTeX, PNG and PDF.")
    p.add_argument("results", nargs="+", metavar="RESULT_FILE_OR_DIR",
                   help="result files (.jsonl with its .meta.json) or directories holding them")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--ctar-subtask", default="math_reasoning", help="subtask of Figure 1(a) (default: %(default)s)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="plugin contributing report sections (repeatable)")
    p.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="an engine profile ('specharness profile'): predict each file's speedup from it")


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import build_report
    from ..tasks.specbench import SUBTASKS
    if args.ctar_subtask not in SUBTASKS:
        raise UsageError(f"unknown subtask '{args.ctar_subtask}'; choose from {', '.join(SUBTASKS)}")
    if args.profile and not Path(args.profile).is_file():
        raise UsageError(f"profile '{args.profile}' does not exist; make one with 'python -m specharness profile'")
    writer = build_report(args.results, args.out, args.plugin, args.ctar_subtask, args.profile)
    print(f"wrote {len(writer.made)} files to {writer.out}: {', '.join(writer.made)}")
    return 0
