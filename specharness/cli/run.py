"""``run`` (one method, with vanilla as its baseline) and ``compare`` (several, interleaved)."""

from __future__ import annotations

import argparse

from .common import decode_args, engine_request, model_args


def add_parsers(sub) -> None:
    run = sub.add_parser("run", help="run one method over the questions and write a result file",
                         description="Run one method over Spec-Bench questions; one JSON line per question "
                                     "is appended as it finishes (Spec-Bench format), the run's header goes "
                                     "to a .meta.json beside it, and a per-subtask summary ends the run.")
    run.add_argument("--method", default="vanilla", help="a method from 'specharness list' (default: %(default)s)")
    run.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                     help="method option, repeatable (see 'specharness list')")
    run.add_argument("--out", default=None,
                     help="result file (default: results/runs/<model>/<method>[-options]-<dtype>-temp<T>-n<N>.jsonl)")
    run.add_argument("--baseline", default="vanilla", choices=("vanilla", "none"),
                     help="'vanilla': also run vanilla on the same questions, interleaved, unless a vanilla result "
                          "with the same settings beside the result file already holds them, and report the "
                          "speedup; 'none': run the method alone (default: %(default)s)")
    model_args(run)
    decode_args(run)

    cmp_ = sub.add_parser("compare", help="run several methods interleaved on the same questions",
                          description="Run several methods question by question in rotating order "
                                      "(A B C, B C A, ...) so machine drift falls on all alike; one result "
                                      "file per method.")
    cmp_.add_argument("--methods", default="vanilla,hf-generate",
                      help="comma-separated; a variant with its own options is NAME:KEY=VALUE[:KEY=VALUE], "
                           "e.g. vanilla,kangaroo,kangaroo:eta=0.4 (default: %(default)s)")
    cmp_.add_argument("-o", "--option", action="append", default=[], metavar="METHOD.KEY=VALUE",
                      help="option of one method, repeatable, e.g. -o kangaroo.eta=0.4")
    cmp_.add_argument("--out-dir", default=None, help="directory for the result files (default: results/runs/<model>/)")
    g = cmp_.add_argument_group("executor")
    g.add_argument("--executor", default="local", choices=("local", "ray"),
                   help="where questions run: here, or on Ray workers (pip install \".[ray]\"); each question goes to "
                        "one worker with all its methods, and only this process writes (default: %(default)s)")
    g.add_argument("--address", default=None, help="Ray cluster address (e.g. auto; default: a new local cluster)")
    g.add_argument("--workers", type=int, default=None, help="Ray workers (each reserves --threads CPUs or one GPU)")
    model_args(cmp_)
    decode_args(cmp_)


def cmd_run(args: argparse.Namespace) -> int:
    """``run`` and ``compare``: check the plan, set the session up, execute."""
    from ..plugins import build_registry
    from ..runner import Settings
    from ..executors import execute
    from ..session import RunPlan, Session
    registry = build_registry(args.plugin)
    methods = [args.method] if args.command == "run" else [m.strip() for m in args.methods.split(",") if m.strip()]
    plan = RunPlan.create(
        registry, engine_request(args), args.plugin,
        Settings(args.max_new_tokens, args.temperature, args.seed, args.repeats, args.warmup), methods, args.option,
        args.verifier, args.bench_file, args.bench, args.subtasks, args.limit, out=getattr(args, "out", None),
        out_dir=getattr(args, "out_dir", None), resume=args.resume, overwrite=args.overwrite,
        baseline=getattr(args, "baseline", "none"), executor=getattr(args, "executor", "local"),
        workers=getattr(args, "workers", None), address=getattr(args, "address", None))
    return execute(plan, Session(plan.engine, registry=registry))
