"""Where the questions run: here (the default), or on the workers of a Ray cluster.

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
from dataclasses import dataclass, field
from typing import Callable

from .errors import UsageError
from .records import QuestionResult


def hardware(device: str, threads: int) -> dict:
    """What a result was measured on: the node, the device's name, the torch threads."""
    import torch

    from .model.engine_choice import cpu_name
    name = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else cpu_name()
    return {"node": socket.gethostname(), "device": name, "threads": threads}


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
    extra: dict = field(default_factory=dict)


class Worker:
    """One model and its methods, built once; runs questions for the driver."""

    def __init__(self, spec: RunSpec) -> None:
        import torch

        from .model import engine_choice
        from .plugins import build_registry
        from .runner import build_method, warm_up
        from .model import TargetModel
        torch.set_num_threads(spec.threads)
        self.spec = spec
        self.target = TargetModel.load(spec.model, spec.dtype, spec.device)
        engine_choice.apply(self.target, spec.compile)
        registry = build_registry(spec.plugins)
        self.methods = {}
        for label, (name, opts) in spec.variants.items():
            m = build_method(registry, name, opts, self.target, spec.settings.temperature, spec.verifier)
            m.label = label
            self.methods[label] = m
        if spec.warmup_question is not None:
            warm_up(self.target, list(self.methods.values()), [spec.warmup_question], spec.settings)
        self.hardware = hardware(spec.device, spec.threads)

    def ready(self) -> dict:
        """Answers once the model is loaded and warmed up: the driver times work from then on."""
        return self.hardware

    def run(self, qi: int, question, labels: list[str]) -> tuple[list[QuestionResult], dict]:
        from .runner import run_interleaved
        results = run_interleaved(self.target, [self.methods[lb] for lb in labels], question, qi, self.spec.settings)
        return results, {**self.hardware, "pid": os.getpid()}


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
