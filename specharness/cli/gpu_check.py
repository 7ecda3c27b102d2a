"""``gpu-check``: the GPU check (``specharness.gpu_check`` runs it; this module parses). What
``bash scripts/gpu-check.sh`` runs; docs/gpu.md says how to get it onto a GPU."""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from .. import gpu_check
from ..errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("gpu-check", help="the GPU check: identity against transformers' generate, the engine "
                                         "profile and a short compare, time-boxed into one folder",
                       description=gpu_check.__doc__.split("\n\n")[0] + " See docs/gpu.md.")
    p.add_argument("--model", default="smollm2",
                   help="'smollm2', a .gguf file (scripts/gpu-pack.sh carries SmolLM2's to a GPU) or a Hugging Face "
                        "directory (default: %(default)s)")
    p.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (default: %(default)s)")
    p.add_argument("--out", default="gpu-check", help="output folder: at most 8 files (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true",
                   help="every stage on tiny sizes, eager (the test suite runs it with --device cpu)")
    p.add_argument("--budget", type=float, default=None,
                   help=f"seconds for all stages (default: {gpu_check.BUDGET_S:.0f}; dry run {gpu_check.DRY_BUDGET_S:.0f})")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: every core)")
    p.add_argument("--methods", default=",".join(gpu_check.IDENTITY_METHODS),
                   help="methods whose greedy identity against transformers' generate is checked (default: %(default)s)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="load a third-party plugin (repeatable)")
    p.add_argument("--stages", default=None,
                   help="run only these stages, comma-separated, sharing the budget (default: all: "
                        + ",".join(n for n, _ in gpu_check.STAGES) + ")")
    p.add_argument("--work", default=None, help="work folder: every stage's full output (default: a new temporary one)")
    p.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # the check's own child processes


def cmd_gpu_check(args: argparse.Namespace) -> int:
    if args.stage:
        if not args.work:
            raise UsageError("--stage runs inside a gpu-check: it needs --work")
        return gpu_check.run_stage(args.stage, Path(args.work))
    out = Path(args.out)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    stages = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages is not None else None
    config = gpu_check.check_args(args.model, args.device, args.budget, args.threads, methods, args.plugin, out,
                                  args.dry_run, stages)
    config["command"] = "python -m specharness " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["gpu-check"] else \
        "python -m specharness gpu-check"
    if args.work and Path(args.work).exists() and any(Path(args.work).iterdir()):
        raise UsageError(f"--work {args.work} is not empty: an earlier check's files would mix into this one's; "
                         "give a new folder or leave --work out")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="specharness-gpu-check-"))
    return gpu_check.run(config, out, work)
