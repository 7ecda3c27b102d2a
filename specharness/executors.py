"""Where a plan's questions run: here (the default), or on the workers of a Ray cluster.

``execute(plan, session)`` is what ``run`` and ``compare`` do: build the plan's methods on the
session, open their result files, warm up, time every question, print the summary.

The unit of work is a question with every method still to run on it (``runner.run_interleaved``),
so each speedup pairs methods timed on the same hardware in the same rotating order as a local run.
Only the driver writes: results stream back and are appended and fsynced per question, so
``--resume`` works exactly as it does locally. Each result names the hardware that produced it.

Ray (``pip install ".[ray]"``) is imported only when ``--executor ray`` is asked for. Each worker is
an actor that loads the model once and reserves what a timed run needs exclusively: ``num_cpus =
threads`` on CPU, ``num_gpus = 1`` on a GPU. A worker that dies mid-question (killed, out of
memory, a lost node) loses nothing: its question goes back to the queue and runs on a new worker.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from .compile_progress import CompileProgress
from .engine_options import EngineOptions
from .errors import CodeFailed, UsageError
from .outputs import ResultFiles
from .records import QuestionResult
from .session import RunPlan, Session
from .tasks.specbench import Question


@dataclass
class RunSpec:
    """Everything a worker needs to rebuild the driver's run: model and engine, methods, settings."""

    model: str
    device: str
    dtype: str
    compile: str
    threads: int
    plugins: list[str]
    variants: dict[str, tuple[str, list[str]]]  # label -> (method, options)
    verifier: str | None
    settings: object
    warmup_question: object = None
    options: EngineOptions | None = None  # the driver's engine switches: a worker's environment does not decide


class Worker:
    """One model and its methods, built once; runs questions for the driver."""

    def __init__(self, spec: RunSpec) -> None:
        from .runner import warm_up
        from .session import EngineRequest, Session
        self.spec = spec
        session = Session(EngineRequest(spec.model, spec.dtype, spec.compile, spec.device, spec.threads), spec.plugins,
                          options=spec.options)
        self.target = session.target
        self.methods = {label: session.method(name, opts, spec.settings.temperature, spec.verifier, label)
                        for label, (name, opts) in spec.variants.items()}
        if spec.warmup_question is not None:
            warm_up(self.target, list(self.methods.values()), [spec.warmup_question], spec.settings)
        self.hardware = session.hardware()

    def ready(self) -> dict:
        """Answers once the model is loaded and warmed up: the driver times work from then on."""
        return self.hardware

    def run(self, qi: int, question, labels: list[str]) -> tuple[list[QuestionResult], dict]:
        from .runner import run_interleaved
        results = run_interleaved(self.target, [self.methods[lb] for lb in labels], question, qi, self.spec.settings)
        return results, {**self.hardware, "pid": os.getpid()}


MAX_RETRIES = 2  # a question may lose this many workers and run again; one more and the run stops


def check_reachable(address: str | None, timeout_s: float = 3.0) -> None:
    """A HOST:PORT cluster address that accepts no connection is one line within seconds (Ray's own
    connect retries for minutes); None (a new local cluster) and 'auto' are Ray's to resolve."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address '{address}': write HOST:PORT (e.g. 127.0.0.1:6379) or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(f"no Ray cluster answers at {address} ({exc.strerror or type(exc).__name__}); start one with "
                         "'ray start --head' and pass its address, or leave --address out for a local one") from None


def run_on_ray(spec: RunSpec, items: list[tuple[int, object, list[str]]], on_result: Callable[[QuestionResult], None],
               address: str | None, workers: int, progress: Callable[[str], None] | None = None,
               on_dispatch: Callable | None = None) -> dict:
    """Run ``items`` (index, question, method labels) on ``workers`` Ray actors; ``on_result`` gets
    every result in the driver as its question finishes. Returns counts (retries, workers started)."""
    try:
        import ray
        from ray.exceptions import RayActorError, WorkerCrashedError
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install \".[ray]\" (or pip install ray)") from None
    if not ray.is_initialized():
        check_reachable(address)
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        except Exception as exc:  # no cluster at the address, bad address...
            raise UsageError(f"cannot reach a Ray cluster at {address or 'a new local one'} ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}); start one with 'ray start --head' "
                             "and pass --address auto") from None
    resources = {"num_gpus": 1} if spec.device.startswith("cuda") else {"num_cpus": spec.threads}
    actor_class = ray.remote(**resources)(Worker)
    queue = deque(items)
    idle = [actor_class.remote(spec) for _ in range(workers)]
    setup_started = time.perf_counter()
    ray.get([a.ready.remote() for a in idle])  # loaded and warmed up: from here on, the run's own time
    run_started = time.perf_counter()
    started, retries = len(idle), 0
    lost: dict[int, int] = {}  # question index -> workers lost on it
    inflight: dict = {}
    while queue or inflight:
        while idle and queue:
            actor, item = idle.pop(), queue.popleft()
            ref = actor.run.remote(*item)
            inflight[ref] = (actor, item)
            if on_dispatch:
                on_dispatch(actor, item)
        ready, _ = ray.wait(list(inflight), num_returns=1)
        for ref in ready:
            actor, item = inflight.pop(ref)
            try:
                results, hw = ray.get(ref)
            except (RayActorError, WorkerCrashedError) as exc:
                retries += 1
                lost[item[0]] = lost.get(item[0], 0) + 1
                if lost[item[0]] > MAX_RETRIES:  # what came back is saved; this question would kill workers forever
                    for a in [*idle, *(act for act, _ in inflight.values())]:
                        ray.kill(a)
                    raise UsageError(f"question {item[1].question_id} lost its worker {lost[item[0]]} times "
                                     f"({type(exc).__name__}; at most {MAX_RETRIES} retries per question); the "
                                     "finished questions are saved: leave it out "
                                     "(--subtasks/--limit) or run it with --executor local to see why, then --resume")
                if progress:
                    progress(f"worker lost on question {item[1].question_id} ({type(exc).__name__}); running it "
                             "again on a new worker")
                queue.appendleft(item)
                idle.append(actor_class.remote(spec))
                started += 1
                continue
            for res in results:
                res.worker = hw
                on_result(res)
            idle.append(actor)
    run_s = time.perf_counter() - run_started
    for actor in idle:
        ray.kill(actor)
    return {"workers_started": started, "retries": retries, "setup_s": run_started - setup_started, "run_s": run_s}


def execute(plan: RunPlan, session: Session) -> int:
    """Run ``plan`` on ``session``: build its methods, open their result files (resuming or adding
    the vanilla baseline as asked), warm up, time every question interleaved, and print the
    summary. Ctrl-C keeps every finished question and says how to resume. Returns the exit code."""
    from tqdm import tqdm

    from .summary import print_summary
    methods = [session.method(name, opts, plan.settings.temperature, plan.verifier, label)
               for label, (name, opts) in plan.variants.items()]
    files = ResultFiles.open(plan, session, methods)
    for line in plan.describe():
        print(line, file=sys.stderr)
    bar = tqdm(total=files.pending(plan.questions), unit="answer", desc=",".join(m.label for m in files.methods),
               dynamic_ncols=True)
    files.bar = bar
    pm = session.registry.pm
    pm.register(files, name="result-files")
    try:
        late = run_on_ray_workers(plan, session, files) if plan.executor == "ray" else run_here(plan, session, files)
    except KeyboardInterrupt:
        bar.close()
        files.close()
        print(f"\ninterrupted: {files.kept()}", file=sys.stderr)
        return 130
    except CodeFailed as exc:  # a method's code raised mid-run: what is finished stays, and how to go on
        bar.close()
        files.close()
        raise UsageError(f"{exc}; {files.kept()}") from None
    except UsageError:  # mid-run (a question past the retry cap): the bar ends its line, so the error has its own
        bar.close()
        files.close()
        raise
    finally:
        pm.unregister(files)
    bar.close()
    files.finish(late)
    if late:
        print(f"warning: {late} graph(s) compiled during timed runs; those questions' times include compiling "
              "(raise --warmup, or rerun: compiled graphs are cached on disk)", file=sys.stderr)
    if files.truncated:
        print(f"warning: {files.truncated} prompt(s) were longer than the context and left-truncated", file=sys.stderr)
    print_summary(files.summary_paths, questions=[q.question_id for q in plan.questions])
    return 0


def run_here(plan: RunPlan, session: Session, files: ResultFiles) -> int:
    """The plan's pending questions in this process, after an untimed warm-up that compiles every
    graph the timed runs need (the progress bar says which). Returns the graphs compiled while
    timing (0 unless warm-up missed one: those questions' times then include compiling)."""
    from .runner import run_all, warm_up
    from .timing import instrumentation_cost_s
    from tqdm import tqdm
    target, hook = session.target, session.registry.pm.hook

    def say(line: str) -> None:  # warm-up may compile for many minutes: which graph, how many left, how long
        tqdm.write(f"warm-up: {line}", file=sys.stderr)
        files.bar.set_postfix_str(f"warm-up: {line}", refresh=True)

    progress = CompileProgress(target.backend, session.compile_times, say, session.compile_last)
    target.backend.on_new_graph, target.backend.on_graph_built = progress, progress.built
    try:
        warm = warm_up(target, files.methods, plan.questions, plan.settings)
    finally:  # Ctrl-C keeps the times of the graphs already compiled
        target.backend.on_new_graph = target.backend.on_graph_built = None
        progress.save()
    if target.backend.compiled:
        loaded = f" ({warm['graphs_loaded']} loaded from earlier runs)" if warm.get("graphs_loaded") else ""
        print(f"engine: {target.engine['dtype']} compiled ({target.engine['compile']}): {warm['graphs']} graphs{loaded}, "
              f"{warm['compile_s'] + warm['compile_s_before_warmup']:.0f} s compiling before timing "
              f"({warm['warmup_s']:.0f} s of warm-up)", file=sys.stderr)
    files.update_meta(instrumentation_s_per_round=instrumentation_cost_s(plan.engine.device), warmup=warm,
                      executor={"name": "local"})
    before = target.backend.compiled_count
    on_round = None
    if hook.specharness_round.get_hookimpls():
        on_round = lambda rd, ctx: hook.specharness_round(record=rd, context=ctx)  # noqa: E731
    run_all(target, files.methods, plan.questions, plan.settings, files.done,
            on_result=lambda result: hook.specharness_question_done(result=result), on_round=on_round)
    return target.backend.compiled_count - before


def run_on_ray_workers(plan: RunPlan, session: Session, files: ResultFiles) -> int:
    """The plan's pending questions on Ray workers, each rebuilding this session from a ``RunSpec``;
    only this process writes. Returns 0: the workers' compiles are their own, before timing."""
    from .runner import pending
    from .timing import instrumentation_cost_s
    target, s = session.target, plan.settings
    variants = {m.label: plan.variants.get(m.label, ("vanilla", [])) for m in files.methods}
    warm = Question("warmup", "qa", "qa", plan.questions[0].turns[:1]) if s.warmup and plan.questions else None
    spec = RunSpec(plan.engine.model, plan.engine.device, target.engine["dtype"], target.engine["compile"],
                   session.threads, plan.plugins, variants, plan.verifier, s, warm, session.options)
    items = [(qi, q, [m.label for m in todo]) for qi, q, todo in pending(files.methods, plan.questions, files.done)]
    workers = plan.workers or 1
    print(f"executor: ray, {workers} worker(s) x {session.threads} thread(s); each loads the model once and warms "
          "up untimed", file=sys.stderr)
    hook = session.registry.pm.hook
    info = run_on_ray(spec, items, lambda result: hook.specharness_question_done(result=result), plan.address,
                      workers, progress=lambda text: print(f"\n{text}", file=sys.stderr))
    files.update_meta(instrumentation_s_per_round=instrumentation_cost_s(plan.engine.device),
                      executor={"name": "ray", "workers": workers, "address": plan.address, **info})
    return 0
