"""The one owner of a run: a validated ``RunPlan`` and the ``Session`` that sets the machine up once.

Every command that decodes on a real target (``run``, ``compare``, a Ray worker, ``lossless``'s
greedy and (b) levels, ``profile``, ``train``) goes through ``Session``: threads -> engine options
-> registry -> engine choice -> target -> compile -> methods, in that order, in one place. ``RunPlan.create`` checks everything
a user can get wrong (settings, methods and their options, the verifier, the executor, the
question file, the outputs) before anything slow is loaded, so a bad input costs a second.
``executors.execute(plan, session)`` then runs the plan; its result files are written by an
observer (``outputs.ResultFiles``) like any other.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .compile_progress import CompileProgress, read_times, times_file
from .engine_options import EngineOptions
from .errors import UsageError
from .options import method_variants, resolve_options
from .plugins import Registry, build_registry
from .runner import Method, Settings, build_method, check_sampling, check_settings, resolve_verifier
from .tasks.specbench import (Question, QuestionSource, describe_selection, find_question_file, load_questions,
                              parse_subtasks, select)


@dataclass(frozen=True)
class EngineRequest:
    """The engine a command asks for: model, dtype and compile mode ("auto": the fastest known or
    measured here), device, torch threads (None: every core this process may run on), and how the
    engine is chosen ("quick": eager only, chosen in seconds, numbers not comparable with compiled runs)."""

    model: str = "smollm2"
    dtype: str = "auto"
    compile: str = "auto"
    device: str = "cpu"
    threads: int | None = None
    engine: str = "auto"


ENGINE_CHOICES = ("auto", "quick")


def check_engine(request: EngineRequest) -> None:
    """One line if ``--engine`` cannot be what is asked: quick compiles nothing."""
    if request.engine not in ENGINE_CHOICES:
        raise UsageError(f"unknown --engine '{request.engine}'; choose one of {', '.join(ENGINE_CHOICES)}")
    if request.engine == "quick" and request.compile not in ("auto", "none"):
        raise UsageError(f"--engine quick compiles nothing; drop --compile {request.compile} (or drop --engine quick)")


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's cpuset, a test
    worker pinned to one core), not every core of the machine, so threads never outnumber them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity on this OS (macOS, Windows)
        return os.cpu_count() or 1


def check_threads(threads: int | None, here: bool = True) -> int:
    """The thread count to use, or one line saying why ``threads`` cannot be. ``here``: the threads
    run on this machine, so more than its cores is refused (a Ray cluster's workers may have more)."""
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}; leave it out to use every core")
    machine = os.cpu_count() or 1
    if here and threads is not None and threads > machine:  # oversubscribed threads spin-wait: the timings mean nothing
        raise UsageError(f"--threads {threads} is more than this machine's {machine} cores; give at most {machine} "
                         "(or leave it out to use the cores this process may run on)")
    return threads or usable_cores()


def hardware(device: str, threads: int) -> dict:
    """What a result was measured on: the node, the device's name, the torch threads."""
    import torch

    from .model.engine_choice import cpu_name
    name = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else cpu_name()
    return {"node": socket.gethostname(), "device": name, "threads": threads}


def check_executor_args(executor: str, workers: int | None, address: str | None) -> None:
    if executor not in ("local", "ray"):
        raise UsageError(f"unknown --executor '{executor}'; choose local or ray")
    if executor == "local" and (workers not in (None, 1) or address):
        raise UsageError("--workers and --address go with --executor ray")
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    if executor == "ray" and "ray" not in sys.modules:
        import importlib.util
        if importlib.util.find_spec("ray") is None:
            raise UsageError("--executor ray needs Ray: pip install \".[ray]\" (or pip install ray)")


def load_target(request: EngineRequest, dtype: str, options: EngineOptions):
    """The requested model, loaded; a user's checkpoint that transformers cannot read (a config that
    is not JSON, weights missing or torn) is one line, not transformers' traceback."""
    from safetensors import SafetensorError
    from .model import TargetModel
    try:
        return TargetModel.load(request.model, dtype, request.device, options)
    except UsageError:
        raise
    except (OSError, ValueError, SafetensorError) as exc:
        if request.model is None:  # the embedded model: a fault of ours or of the machine, shown whole
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UsageError(f"model '{request.model}' cannot be loaded ({type(exc).__name__}: {first[:160]}); give a "
                         "complete local checkpoint: config.json, tokenizer files and *.safetensors weights") from None


class Session:
    """The machine set up once: torch threads, engine options, the engine configuration, the target
    (loaded, compiled), and the plugin registry. Owns the target; builds methods on it."""

    def __init__(self, request: EngineRequest, plugins: list[str] | tuple = (), registry: Registry | None = None,
                 options: EngineOptions | None = None) -> None:
        import torch

        from .model import engine_choice
        check_engine(request)
        self.request = request
        self.threads = check_threads(request.threads, here=False)  # the command checked it, knowing where it runs
        torch.set_num_threads(self.threads)
        self.options = options or EngineOptions.from_env()
        self.registry = registry or build_registry(plugins)
        load = lambda dtype: load_target(request, dtype, self.options)  # noqa: E731
        if request.engine == "quick":  # seconds: the faster eager dtype, its target already loaded
            config, target = engine_choice.quick(request.dtype, load, log=lambda s: print(s, file=sys.stderr))
            print(f"engine: quick: {config.dtype} eager; {engine_choice.NOT_COMPARABLE}", file=sys.stderr)
        else:
            config = engine_choice.choose(request.dtype, request.compile, request.model, request.device,
                                          self.threads, load, self.options)
            target = load(config.dtype)
        machine = engine_choice.machine_key(request.model, request.device, self.threads)
        progress: list[CompileProgress] = []
        # earlier runs' compile times, read before this process compiles (its own saves must not pass for them)
        self.compile_last = read_times(times_file(machine, config.dtype, config.compile))

        def watch(backend) -> None:  # the compile check's graphs: say which, how many left, how long
            progress.append(CompileProgress(backend, times_file(machine, config.dtype, config.compile),
                                            lambda line: print(f"engine: {line}", file=sys.stderr, flush=True),
                                            self.compile_last))
            backend.on_new_graph, backend.on_graph_built = progress[-1], progress[-1].built
        try:
            # the compile check returns once a graph has built: the warm-up's builds start beside the rest
            mode, why = engine_choice.apply(target, config.compile, watch, wait=False)
        finally:
            for p in progress:
                p.save()
                p.backend.on_new_graph = p.backend.on_graph_built = None
        self.compile_times = times_file(machine, config.dtype, mode)  # warm-up's estimates add to it
        if mode != config.compile:  # the compile failed: eager has graphs of its own (none)
            self.compile_last = read_times(self.compile_times)
        if why:
            print(f"note: cannot compile here ({why}); running eagerly", file=sys.stderr)
        quick = {"quick": True, "comparable": engine_choice.NOT_COMPARABLE} if request.engine == "quick" else {}
        target.engine = {"dtype": config.dtype, "compile": mode, "chosen": config.source, **quick,
                         **({"choice": config.choice} if config.choice else {}), **target.kernel_flags(),
                         "options": self.options.record(), **({"compile_failed": why} if why else {})}
        self.target = target

    def method(self, name: str, options: list[str] | dict, temperature: float, verifier: str | None = None,
               label: str = "") -> Method:
        """Method ``name`` with ``options``, built on this session's target."""
        m = build_method(self.registry, name, options, self.target, temperature, verifier)
        m.label = label or m.name
        return m

    def hardware(self) -> dict:
        """What a result was measured on: the node, the device's name, the torch threads."""
        return hardware(self.request.device, self.threads)


@dataclass
class RunPlan:
    """A run, checked: what to run (variants by label), on which questions, with which settings,
    where the results go, and where the questions run."""

    engine: EngineRequest
    plugins: list[str]
    settings: Settings
    variants: dict[str, tuple[str, list[str]]]  # label -> (method, raw options), in the order asked
    verifier: str | None
    source: QuestionSource
    available: list[Question]
    subtasks: tuple[str, ...]
    limit: int | None
    out: Path | None = None  # one method's result file (run --out)
    out_dir: Path | None = None  # where every method's file goes (compare --out-dir)
    resume: bool = False
    overwrite: bool = False
    baseline: str = "none"  # "vanilla": also run vanilla on the same questions unless a file holds them
    executor: str = "local"
    workers: int | None = None
    address: str | None = None
    questions: list[Question] = field(default_factory=list)

    @classmethod
    def create(cls, registry: Registry, engine: EngineRequest, plugins: list[str], settings: Settings,
               methods: list[str], options: list[str], verifier: str | None, bench_file: str | None,
               bench: str | None, subtasks: str | None, limit: int | None, **outputs) -> "RunPlan":
        """Check everything before loading anything: one line for the first problem found."""
        from .results import check_writable, holds_records, refuse_existing
        check_settings(settings)
        check_executor_args(outputs.get("executor", "local"), outputs.get("workers"), outputs.get("address"))
        check_threads(engine.threads, here=outputs.get("executor", "local") == "local")
        check_engine(engine)
        if not methods:
            raise UsageError("--methods names no method; e.g. --methods vanilla,kangaroo")
        if len(set(methods)) != len(methods):
            raise UsageError("a method is listed twice in --methods; list each once")
        variants = method_variants(methods, options)
        for name, opts in variants.values():  # a bad method, option or verifier fails now
            resolve_options(name, registry.method(name).options, opts)
            check_sampling(registry, name, settings.temperature)
        resolve_verifier(registry, verifier, settings.temperature)
        out, out_dir = outputs.pop("out", None), outputs.pop("out_dir", None)
        out, out_dir = Path(out) if out else None, Path(out_dir) if out_dir else None
        resume, overwrite = outputs.get("resume", False), outputs.get("overwrite", False)
        if resume and overwrite:
            raise UsageError("--resume keeps a file's finished questions and --overwrite discards them; give one")
        for path in filter(None, (out, out_dir and out_dir / "x")):
            check_writable(path)
        if out and holds_records(out) and not (resume or overwrite):
            refuse_existing(out)
        source = find_question_file(bench_file, bench)
        available = load_questions(source.path)
        chosen = parse_subtasks(subtasks)
        return cls(engine, list(plugins), settings, variants, verifier, source, available, chosen, limit, out, out_dir,
                   questions=select(available, chosen, limit), **outputs)

    def describe(self) -> list[str]:
        """Lines saying which questions run (and where they came from)."""
        return describe_selection(self.source, self.available, self.subtasks, self.limit)
