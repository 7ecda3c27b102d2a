"""python -m specharness {run,compare,list,train,report,lossless,profile} — the command line.

Every user error becomes one line on stderr and exit code 2; Ctrl-C keeps every finished question
on disk and says how to resume.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import lossless, profile, report
from .errors import UsageError
from .options import method_variants

RESULTS_DIR = Path("results") / "runs"


def _common_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and machine")
    g.add_argument("--model", default="smollm2",
                   help="'smollm2' (embedded default), a .gguf file, or a local Hugging Face directory "
                        "(LLaMA, Mistral or Qwen2 family) (default: %(default)s)")
    g.add_argument("--dtype", default="auto",
                   help="auto | float32 | bfloat16 | float16; auto = the dtype of the fastest vanilla on this "
                        "machine, measured once and cached ($SPECHARNESS_ENGINE=DTYPE/MODE pins it) (default: %(default)s)")
    g.add_argument("--compile", default="auto", choices=("auto", "none", "default", "max-autotune"),
                   help="run the target compiled (torch.compile; inductor freezing on CPU) or eagerly ('none'); "
                        "auto = measured with --dtype auto; compilation happens in warm-up, never timed "
                        "(default: %(default)s)")
    g.add_argument("--device", default="cpu", help="cpu | cuda (default: %(default)s)")
    g.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads, recorded in every result (default: every core this process may run on)")
    g.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="load a third-party plugin (repeatable)")


def _decode_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("questions and decoding")
    g.add_argument("--bench", default=None, choices=("sample", "spec-bench"),
                   help="question set: 'sample' (built in, 2 per subtask) or 'spec-bench' (Spec-Bench's 480 "
                        "questions, downloaded once from a pinned commit and checked by sha256) "
                        "(default: $SPECHARNESS_SPECBENCH if set, else sample)")
    g.add_argument("--bench-file", default=None,
                   help="a Spec-Bench-format question.jsonl to use instead")
    g.add_argument("--subtasks", default=None,
                   help="comma-separated: multi_turn,translation,summarization,qa,math_reasoning,rag (default: all)")
    g.add_argument("--limit", type=int, default=None, help="first N questions of each subtask (default: all)")
    g.add_argument("--max-new-tokens", type=int, default=128, help="per turn (default: %(default)s)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="base seed; each question derives its own (default: %(default)s)")
    g.add_argument("--verifier", default=None,
                   help="acceptance rule (default: greedy at temperature 0, speculative-sampling above)")
    g.add_argument("--repeats", type=int, default=3, help="timed runs per question and method; the median is kept (default: %(default)s)")
    g.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs before the first question (default: %(default)s)")
    g.add_argument("--resume", action="store_true", help="continue an existing result file, skipping finished questions")
    g.add_argument("--overwrite", action="store_true", help="replace an existing result file")


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block): the same shape as every other bad input."""

    def error(self, message: str):
        self.exit(2, f"specharness: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specharness",
        description="Benchmark self-drafting speculative decoding methods on Spec-Bench: speed with "
                    "confidence intervals, acceptance statistics, and checked losslessness.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

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
    _common_model_args(run)
    _decode_args(run)

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
    _common_model_args(cmp_)
    _decode_args(cmp_)

    ls = sub.add_parser("list", help="methods with their options, subtasks, verifiers, trainers")
    ls.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py")

    tr = sub.add_parser("train", help="train what a drafter needs (e.g. 'train kangaroo')",
                        description="Train a drafter's parameters with the target frozen; see 'specharness list' "
                                    "for each trainer's options.")
    tr.add_argument("trainer", help="trainer name, e.g. kangaroo")
    tr.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE")
    tr.add_argument("--out", default=None, help="output directory (default: the trainer's cache directory)")
    tr.add_argument("--resume", action="store_true", help="continue from the last epoch checkpoint")
    _common_model_args(tr)
    tr.set_defaults(dtype="float32", compile="none")  # trainers run in float32, eagerly (autograd)
    report.add_report_parser(sub)
    lossless.add_lossless_parser(sub)
    profile.add_profile_parser(sub)
    return parser


def _check_threads(threads: int | None) -> int:
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}; leave it out to use every core")
    return threads or usable_cores()


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's cpuset, a test
    worker pinned to one core), not every core of the machine, so threads never outnumber them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity on this OS (macOS, Windows)
        return os.cpu_count() or 1


def _setup_threads(threads: int | None) -> int:
    import torch
    n = _check_threads(threads)
    torch.set_num_threads(n)
    return n


def _load_target(args, threads: int):
    """The target in the dtype and compile mode the flags ask for, or the fastest measured here."""
    from .model import engine_choice
    from .model import TargetModel
    config = engine_choice.choose(args.dtype, getattr(args, "compile", "none"), args.model, args.device, threads,
                            lambda dtype: TargetModel.load(args.model, dtype, args.device))
    target = TargetModel.load(args.model, config.dtype, args.device)
    mode, why = engine_choice.apply(target, config.compile)
    if why:
        print(f"note: cannot compile here ({why}); running eagerly", file=sys.stderr)
    target.engine = {"dtype": config.dtype, "compile": mode, "chosen": config.source, **target.kernel_flags(),
                     **({"compile_failed": why} if why else {})}
    return target


def _default_name(method, settings, target) -> str:
    opts = "".join(f"-{k}={Path(str(v)).name}" for k, v in sorted(method.changed.items()))
    mode = target.engine["compile"]
    engine = target.engine["dtype"] + ("" if mode == "none" else f"-{mode}")
    return f"{method.name}{opts}-{engine}-temp{settings.temperature:g}-n{settings.max_new_tokens}.jsonl"


def cmd_run(args, methods_arg: list[str]) -> int:
    from tqdm import tqdm

    from .hookspecs import hookimpl
    from .options import resolve_options
    from .plugins import build_registry
    from .results import ResultWriter, check_writable, provenance
    from .executors import RunSpec, check_executor_args, hardware, run_on_ray
    from .runner import Settings, build_method, check_settings, pending, resolve_verifier, run_all, warm_up
    from .tasks.specbench import Question
    from .summary import print_summary
    from .timing import instrumentation_cost_s
    from .tasks.specbench import describe_selection, find_question_file, load_questions, parse_subtasks, select, \
        sha256_of

    settings = Settings(args.max_new_tokens, args.temperature, args.seed, args.repeats, args.warmup)
    check_settings(settings)
    check_executor_args(getattr(args, "executor", "local"), getattr(args, "workers", None), getattr(args, "address", None))
    _check_threads(args.threads)
    registry = build_registry(args.plugin)
    if len(set(methods_arg)) != len(methods_arg):
        raise UsageError("a method is listed twice in --methods; list each once")
    variants = method_variants(methods_arg, args.option)
    for name, opts in variants.values():  # fail on a bad method, option or verifier before loading
        resolve_options(name, registry.method(name).options, opts)
    resolve_verifier(registry, args.verifier, settings.temperature)
    out = getattr(args, "out", None)
    if out and Path(out).exists() and not (args.resume or args.overwrite):
        raise UsageError(f"{out} already exists; add --resume to continue it, --overwrite to start again, "
                         "or --out to write elsewhere")
    for target_path in filter(None, (out, getattr(args, "out_dir", None) and Path(args.out_dir) / "x")):
        check_writable(Path(target_path))
    source = find_question_file(args.bench_file, args.bench)
    available = load_questions(source.path)
    subtasks = parse_subtasks(args.subtasks)
    questions = select(available, subtasks, args.limit)
    threads = _setup_threads(args.threads)
    target = _load_target(args, threads)
    methods = []
    for label, (name, opts) in variants.items():
        m = build_method(registry, name, opts, target, settings.temperature, args.verifier)
        m.label = label
        methods.append(m)

    if out:
        paths = {methods[0].label: Path(out)}
    else:
        base = Path(args.out_dir) if getattr(args, "out_dir", None) else RESULTS_DIR / target.name
        paths = {m.label: base / _default_name(m, settings, target) for m in methods}
    if len(set(paths.values())) != len(paths):
        raise UsageError("two entries of --methods resolve to the same method and options; drop one")

    def header(m) -> dict:
        return provenance(model=target.name, model_source=target.source, dtype=target.engine["dtype"],
                          compile=target.engine["compile"], engine=target.engine, device=args.device,
                          threads=threads, method=m.name, label=m.label, options=m.options,
                          option_defaults=m.defaults, options_changed=m.changed, verifier=m.verifier,
                          max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                          seed=settings.seed, repeats=settings.repeats, warmup=settings.warmup,
                          question_file=str(source.path), question_source=source.origin,
                          questions_sha256=sha256_of(source.path), extra_params=m.extra_params,
                          drafter_info=m.info, target_params=target.n_parameters, target_layers=target.n_layers,
                          compared_with=[x.label for x in methods])

    # the default location is a store of results by method and settings: a file there is continued
    # (finished questions skipped) unless --overwrite; a file the user named must be asked to resume
    store = not out and not getattr(args, "out_dir", None)
    resume = {m.label: args.resume or (store and paths[m.label].exists()) for m in methods}
    overwrite = {m.label: args.overwrite for m in methods}
    for m in methods:
        if store and resume[m.label] and not args.resume and not args.overwrite:
            print(f"continuing {paths[m.label]} (finished questions are kept; --overwrite starts again)",
                  file=sys.stderr)
    summary_paths = list(paths.values())
    if getattr(args, "baseline", "none") == "vanilla" and methods[0].name != "vanilla":
        vanilla = build_method(registry, "vanilla", [], target, settings.temperature, args.verifier)
        found, holds_all = _vanilla_baseline(paths[methods[0].label].parent, header(vanilla), questions,
                                             _default_name(vanilla, settings, target))
        summary_paths.insert(0, found)
        if holds_all:
            print(f"baseline: vanilla results with the same settings in {found}", file=sys.stderr)
        else:
            methods.insert(0, vanilla)
            paths[vanilla.label] = found
            resume[vanilla.label], overwrite[vanilla.label] = found.exists(), False
            print(f"baseline: vanilla runs on the same questions, interleaved, into {found} "
                  "(--baseline none to skip it)", file=sys.stderr)
    writers = {m.label: ResultWriter(paths[m.label], header(m), resume=resume[m.label],
                                     overwrite=overwrite[m.label]) for m in methods}
    done = {name: w.done for name, w in writers.items()}
    for line in describe_selection(source, available, subtasks, args.limit):
        print(line, file=sys.stderr)
    n_pending = sum(q.question_id not in done[m.label] for q in questions for m in methods)

    bar = tqdm(total=n_pending, unit="answer", desc=",".join(m.label for m in methods), dynamic_ncols=True)
    stats: dict[str, Any] = {"truncated": 0}

    class Observer:  # the result writer and the progress bar are observers like any other
        @hookimpl
        def specharness_question_done(self, result):
            writers[result.method].append(result)
            stats["truncated"] += sum(result.truncated)
            toks = sum(len(g.token_ids) for g in result.generations)
            secs = sum(g.wall_time for g in result.generations)
            bar.set_postfix_str(f"{result.method} {result.subtask} {toks / secs:.1f} tok/s")
            bar.update(1)

    observer = Observer()
    registry.pm.register(observer, name="cli-observer")
    hook = registry.pm.hook
    on_round = ((lambda rd, ctx: hook.specharness_round(record=rd, context=ctx)) if _has_round_observers(registry)
                else None)
    cost = instrumentation_cost_s(args.device)
    executor = getattr(args, "executor", "local")
    here = hardware(args.device, threads)

    def on_result(result) -> None:
        result.worker = result.worker or here
        hook.specharness_question_done(result=result)

    graphs_before = 0
    try:
        if executor == "ray":
            spec = RunSpec(args.model, args.device, target.engine["dtype"], target.engine["compile"], threads,
                           list(args.plugin), {m.label: variants[m.label] if m.label in variants else ("vanilla", [])
                                               for m in methods}, args.verifier, settings,
                           Question("warmup", "qa", "qa", questions[0].turns[:1]) if settings.warmup and questions
                           else None)
            items = [(qi, q, [m.label for m in todo]) for qi, q, todo in pending(methods, questions, done)]
            workers = args.workers or 1
            print(f"executor: ray, {workers} worker(s) x {threads} thread(s); each loads the model once and warms "
                  "up untimed", file=sys.stderr)
            info = run_on_ray(spec, items, on_result, args.address, workers,
                              progress=lambda text: print(f"\n{text}", file=sys.stderr))
            for w in writers.values():
                w.update_meta(instrumentation_s_per_round=cost, executor={"name": "ray", "workers": workers,
                                                                          "address": args.address, **info})
        else:
            warm_started = time.perf_counter()

            def compiling(key) -> None:  # warm-up may compile for many minutes: say what, and for how long
                bar.set_postfix_str(f"warm-up: compiling graph {len(target.backend.graphs) + 1} ({key.describe()}), "
                                    f"{time.perf_counter() - warm_started:.0f} s so far", refresh=True)

            target.backend.on_new_graph = compiling
            try:
                warm = warm_up(target, methods, questions, settings)
            finally:
                target.backend.on_new_graph = None
            if target.backend.compiled:
                print(f"engine: {target.engine['dtype']} compiled ({target.engine['compile']}): {warm['graphs']} "
                      f"graphs, {warm['compile_s'] + warm['compile_s_before_warmup']:.0f} s compiling before timing "
                      f"({warm['warmup_s']:.0f} s of warm-up)", file=sys.stderr)
            for w in writers.values():
                w.update_meta(instrumentation_s_per_round=cost, warmup=warm, executor={"name": "local"})
            graphs_before = len(target.backend.graphs)
            run_all(target, methods, questions, settings, done, on_result=on_result, on_round=on_round)
    except KeyboardInterrupt:
        bar.close()
        for w in writers.values():
            w.close()
        files = ", ".join(str(p) for p in paths.values())
        print(f"\ninterrupted: finished questions are saved in {files}; rerun the same command with "
              "--resume to continue", file=sys.stderr)
        return 130
    finally:
        registry.pm.unregister(observer)
    bar.close()
    late = len(target.backend.graphs) - graphs_before if executor == "local" else 0
    for w in writers.values():  # this process's count, 0 included: a resumed file must not keep an older one
        w.update_meta(graphs_compiled_while_timing=late)  # > 0: those questions' times include compiling
        w.close()
    if late:
        print(f"warning: {late} graph(s) compiled during timed runs; those questions' times include compiling "
              "(raise --warmup, or rerun: compiled graphs are cached on disk)", file=sys.stderr)
    if stats["truncated"]:
        print(f"warning: {stats['truncated']} prompt(s) were longer than the context and left-truncated", file=sys.stderr)
    print_summary(summary_paths, questions=[q.question_id for q in questions])
    return 0


def _vanilla_baseline(directory: Path, meta: dict, questions: list, default_name: str) -> tuple[Path, bool]:
    """The vanilla result file for a run's baseline: (path, whether it already holds every question).

    A file in ``directory`` whose header matches this run's settings (``results.same_baseline``) is
    used, resumed if it lacks questions; otherwise a new file under the default name. A file of that
    name with other settings is never overwritten: the run stops and says what to do.
    """
    from .results import iter_result_files, read_results, same_baseline
    wanted = {q.question_id for q in questions}
    best: tuple[Path, int] | None = None
    for p in iter_result_files(directory):
        other, records = read_results(p)
        if other.get("method") == "vanilla" and not other.get("options") and same_baseline(other, meta):
            have = len(wanted & {r.question_id for r in records})
            if best is None or have > best[1]:
                best = (p, have)
    if best:
        return best[0], best[1] == len(wanted)
    path = directory / default_name
    if path.exists():
        raise UsageError(f"{path} holds vanilla results with other settings (threads, seed, question file...); "
                         "rerun with those settings, move the file, or pass --baseline none")
    return path, False


def _has_round_observers(registry) -> bool:
    return bool(registry.pm.hook.specharness_round.get_hookimpls())


def cmd_list(args) -> int:
    from .plugins import build_registry
    from .tasks.specbench import SUBTASKS
    reg = build_registry(args.plugin)
    print("methods:")
    for name in reg.methods:
        spec = reg.method(name)
        print(f"  {name:24s} {spec.help}")
        for o in spec.options:
            print(f"      -o {o.name}=<{o.type}>  default {o.default!r}, {o.describe_range()}: {o.help}")
    print("verifiers:")
    for name, v in sorted(reg.verifiers.items()):
        print(f"  {name:24s} {v.help}")
    print("trainers:")
    for name, t in sorted(reg.trainers.items()):
        print(f"  {name:24s} {t.help}")
        for o in t.options:
            print(f"      -o {o.name}=<{o.type}>  default {o.default!r}, {o.describe_range()}: {o.help}")
    print("subtasks:\n  " + ", ".join(SUBTASKS))
    return 0


def cmd_train(args) -> int:
    import json

    from .options import resolve_options
    from .plugins import build_registry
    reg = build_registry(args.plugin)
    spec = reg.trainer(args.trainer)
    options = resolve_options(args.trainer, spec.options, args.option)
    threads = _setup_threads(args.threads)
    target = _load_target(args, threads)
    report = spec.run(target, options, Path(args.out) if args.out else None, args.resume)
    report = {**(report or {}), "threads": threads}
    print(json.dumps(report, indent=1, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a one-line parse error already printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command == "run":
            return cmd_run(args, [args.method])
        if args.command == "compare":
            return cmd_run(args, [m.strip() for m in args.methods.split(",") if m.strip()])
        if args.command == "list":
            return cmd_list(args)
        if args.command == "train":
            return cmd_train(args)
        if args.command == "profile":
            return profile.cmd_profile(args, _setup_threads(args.threads))
        if args.command in ("report", "lossless"):
            return report.cmd_report(args) if args.command == "report" else lossless.cmd_lossless(args)
    except UsageError as exc:
        print(f"specharness: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 2
