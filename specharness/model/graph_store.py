"""Compiled graphs kept on disk as AOTInductor packages: a second process loads a graph in about a
second instead of tracing and freezing it again.

Why not torch.compile's own caches: with freezing (how CPU graphs get constant-folded, prepacked
weights) torch 2.13 bypasses AOT autograd's cache, so even with every inductor cache warm a
second process re-runs dynamo's trace, AOT autograd and the freezing passes for each graph: about
10 s a SmolLM2 graph on a 2-core EPYC, 85 s before a Kangaroo run's first timed answer. An
AOTInductor package is the exported graph's kernels, its C++ wrapper and its frozen weights in one
file; loading it touches none of that (1.5 s for SmolLM2's width-2 graph, from 10-30 s).

A package is found by a key computed before anything is traced, so it must name everything the
compiled code depends on:
- the stack's weights, by a digest of their values (a model of the same shapes with other weights,
  or another layer range, never hits) and its shape settings (eps, heads, attention kernel path);
- the graph (``GraphKey``: layers, head, captured layers, skipped sublayers, width) and its inputs'
  dtypes and static shapes;
- the code that builds graphs (every file of ``specharness/model/``), torch's version, the CPU (its
  model name and flags), the thread count max-autotune timed its kernels with, the compile mode and
  the engine switches that change kernels (``EngineOptions``).

The cache's slot count and the attention bias's context length are export dimensions, as in the
compiled graphs; a static graph's positions are fixed by its width, a wide graph's too are dynamic.
Every input is handed over contiguous: a package, unlike a dynamo graph, has no guard to recompile
on other strides. A graph that cannot be exported or packaged falls back to ``torch.compile``, with
its reason kept (``failures``). ``EngineOptions.aot_graphs`` (``SPECHARNESS_AOT_GRAPHS=0``) turns
the store off. Disk: a package holds its frozen weights, about 270 MB for a full SmolLM2 graph in
bfloat16, in ``$SPECHARNESS_CACHE/graphs`` (default ``~/.cache/specharness/graphs``): delete the
folder to free it. Every change to ``specharness/model`` or torch keys new packages (a full table's
are ~16 GB), so a build that finds less than ``MIN_FREE`` free first deletes packages no run of this
code and torch can load, oldest first (``GraphStore.ensure_space``); a full disk had aborted a run in
torch's zip writer. Where that frees too little, one line says so before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import UsageError, exception_line
from ..paths import cache_root, write_text_atomic
from . import graph_build
from .accel import narrow_linear
from .accel.inductor_cache import weights_digest

BUILDER = [sys.executable, "-m", "specharness.model.graph_build"]  # a child that builds one package from its spec
MAX_DIM = 1 << 16  # the widest prompt and the longest cache a package takes (the model's context is less)
MIN_FREE = 2 << 30  # disk a build wants free: its exported program and package (~270 MB each for SmolLM2), inductor's scratch


def store_dir() -> Path:
    return cache_root() / "graphs"


def _code_digest() -> str:
    """Every file of ``specharness/model`` (layers, stacks, kernels, backends): a change to any
    may change a graph."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".cpp", ".h")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _cpu() -> str:
    """The CPU model and its flags: kernels compiled for one ISA must not run on another."""
    from .engine_choice import cpu_flags, cpu_name
    return f"{cpu_name()}|{hashlib.sha256(' '.join(sorted(cpu_flags())).encode()).hexdigest()[:12]}"


def examples(args: tuple, wide: bool) -> tuple:
    """Inputs to export with: the call's dtypes and static shapes, with every dynamic size distinct
    (positions < context < slots). Traced on a call whose sizes coincide (a cache exactly the
    prompt's length), export would tie those sizes together, and a package has no guard to catch a
    later call where they differ."""
    x, bias, keys = args[0], args[3], args[4]
    T = 7 if wide else x.shape[0]
    ctx, slots = T + 11, T + 24
    cache = (keys.shape[0], keys.shape[1], slots, keys.shape[3])
    return (torch.zeros((T, *x.shape[1:]), dtype=x.dtype), torch.arange(T, dtype=args[1].dtype),
            torch.arange(T, dtype=args[2].dtype),
            torch.zeros(T, ctx, dtype=bias.dtype), torch.zeros(cache, dtype=keys.dtype),
            torch.zeros(cache, dtype=args[5].dtype))


class _Graph(nn.Module):
    """One graph's fixed arguments bound, so export sees six tensors in and a pytree out."""

    def __init__(self, stack: nn.Module, a: int, b: int, head: bool, capture: frozenset, skip: tuple, wide: bool):
        super().__init__()
        self.stack, self.args = stack, (a, b, head, capture, skip, wide)

    def forward(self, x, positions, slots, bias, keys, values):
        return self.stack(x, positions, slots, bias, keys, values, *self.args)


@dataclass(eq=False)  # one build is one child: compared and hashed by identity
class Build:
    """A package being built by a child process (``GraphStore.start``)."""

    graph: tuple
    path: Path
    proc: subprocess.Popen | None  # None: built in the run's own process (``GraphStore.start``)
    started: float
    scratch: list[Path]  # the exported program, the child's spec, its half-built package: gone when it ends
    done: bool = False
    package: Callable | None = None
    seconds: float = 0.0  # export to loaded


class Package:
    """A loaded package, called with its six input tensors. torch's own runner (``AOTICompiledModel``)
    reads and parses the package's input and output pytree specs on every call; here they are read
    once, and the tensors go to the C++ runner as they are (see ``results/smollm2-cpu-epyc-first-run``)."""

    def __init__(self, compiled) -> None:
        from torch.utils import _pytree
        self.run, self.unflatten = compiled.loader.boxed_run, _pytree.tree_unflatten
        self.out_spec = _pytree.treespec_loads(compiled.loader.get_call_spec()[1])

    def __call__(self, *tensors: torch.Tensor):
        return self.unflatten(self.run(list(tensors)), self.out_spec)


def inductor_configs(mode: str, wide: bool, wide_autotune: bool, gemm: str | None = None) -> dict:
    """inductor's settings for one package: frozen weights and the C++ wrapper always; max-autotune's
    kernel search for static widths, and for the dynamic-width graph only where ``wide_autotune``
    (``EngineOptions``: it builds longer and its prefills ran no faster); ``gemm``: the one GEMM kernel
    family it may use ("CPP", "ATEN": ``backends.gemm_family``; "NARROW", our kernel's graphs, leave
    what it does not take to oneDNN), None for its own choice."""
    configs = {"freezing": True, "cpp_wrapper": True}
    if mode == "max-autotune" and (wide_autotune or not wide):
        configs.update(max_autotune=True, coordinate_descent_tuning=True)
        if gemm is not None:
            configs["max_autotune_gemm_backends"] = "ATEN" if gemm == "NARROW" else gemm
    return configs


def default_jobs() -> int:
    """Builds at once: one per core (a build runs on one), at most 4 (each holds a few GB)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class GraphStore:
    """AOTInductor packages of one backend's graphs: ``find`` loads a stored one; ``start`` exports
    one and builds it (here, or in a child whose end ``wait`` awaits). ``loaded``/``built`` say which
    graphs came which way."""

    def __init__(self, mode: str, settings: dict, root: Path | None = None, quiet: bool = True,
                 jobs: int | None = None, wide_autotune: bool = False,
                 gemm: Callable[[int | str], str | None] | None = None) -> None:
        self.mode, self.root, self.quiet, self.jobs = mode, root or store_dir(), quiet, jobs or default_jobs()
        self.wide_autotune = wide_autotune  # keys a package through its inductor settings: wide ones only
        self.gemm = gemm or (lambda width: None)  # a graph's width -> its GEMM kernel family, None: autotuned
        self.env = {"torch": torch.__version__, "cpu": _cpu(), "threads": torch.get_num_threads(), "mode": mode,
                    "code": _code_digest(), **settings}
        self.digests: dict[int, tuple[tuple[int, ...], str]] = {}  # id(stack) -> (param versions, digest)
        self.loaded: set = set()
        self.built: set = set()
        self.failures: dict = {}  # graph key -> why it runs through torch.compile instead
        self.builds: list[Build] = []  # every build this store started, running or ended

    def weights_digest(self, stack: nn.Module) -> str:
        """A digest of the stack's tensors' values (``inductor_cache.weights_digest`` of each),
        recomputed only after an in-place change (a tensor's version counter moves)."""
        tensors = sorted({**dict(stack.named_parameters()), **dict(stack.named_buffers())}.items())
        versions = tuple(t._version for _, t in tensors)
        memo = self.digests.get(id(stack))
        if memo is None or memo[0] != versions:
            parts = [f"{name}{tuple(t.shape)}{t.dtype}{weights_digest(t)}" for name, t in tensors]
            memo = self.digests[id(stack)] = (versions, hashlib.sha256("".join(parts).encode()).hexdigest()[:32])
        return memo[1]

    @staticmethod
    def signature(stack: nn.Module, args: tuple, wide: bool) -> tuple:
        """What a package is specialised on besides its graph key and weights, cheap enough for every
        call: the inputs' dtypes and static shapes, and the stack's attention kernel path (it
        changes when our kernel fails mid-run) and linear kernel per width."""
        x, bias, keys = args[0], args[3], args[4]
        return (x.dtype, x.shape[1:] if wide else x.shape, bias.dtype, keys.dtype, keys.shape[:2], keys.shape[3],
                stack.attention, stack.gemm)

    def key(self, graph, stack: nn.Module, args: tuple, wide: bool) -> tuple[str, dict]:
        """The package's file stem and the readable record it is stored with."""
        record = {**self.env, "graph": repr(tuple(graph._replace(stack=""))),  # the stack by its weights, not its name
                  "weights": self.weights_digest(stack), "inputs": repr(self.signature(stack, args, wide)),
                  "stack": repr((stack.eps, stack.shape, stack.cache_layers)),
                  "inductor": inductor_configs(self.mode, wide, self.wide_autotune, self.gemm(graph.width))}
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:24], record

    @staticmethod
    def fits(args: tuple, wide: bool) -> bool:
        """Whether a call lies inside the package's dynamic ranges (else it runs through torch.compile)."""
        T, ctx, slots = args[0].shape[0], args[3].shape[1], args[4].shape[2]
        return 2 <= ctx <= MAX_DIM and 2 <= slots <= MAX_DIM and (not wide or 2 <= T <= MAX_DIM)

    def path(self, graph, stack: nn.Module, args: tuple, wide: bool) -> tuple[Path, dict]:
        stem, record = self.key(graph, stack, args, wide)
        return self.root / f"{stem}.pt2", record

    def stored(self, graph, stack: nn.Module, args: tuple, wide: bool) -> bool:
        """Whether ``find`` would load this graph rather than it being built (progress says which)."""
        return self.path(graph, stack, args, wide)[0].is_file()

    def find(self, graph, stack: nn.Module, args: tuple, wide: bool) -> Callable | None:
        """The stored package for ``graph``, loaded, or None."""
        found = self._open(self.path(graph, stack, args, wide)[0])
        if found is not None:
            self.loaded.add(graph)
        return found

    @staticmethod
    def _open(path: Path) -> Callable | None:
        """The package at ``path``, or None where there is none (or torch cannot read it: it is
        deleted, to be built again)."""
        if path.is_file():
            try:
                return Package(torch._inductor.aoti_load_package(str(path)))
            except Exception:  # truncated, or another build's: build it again
                path.unlink(missing_ok=True)
        return None

    def stale(self) -> list[Path]:
        """Packages no run of this code and torch can load (another code digest or torch version, or no
        record beside them), oldest first."""
        found = []
        for package in self.root.glob("*.pt2"):
            if package.name.endswith((".program.pt2", ".building.pt2")):
                continue  # a build's scratch: its own build removes it
            try:
                record = json.loads(package.with_suffix(".json").read_text())
                current = record.get("code") == self.env["code"] and record.get("torch") == self.env["torch"]
            except (OSError, ValueError):
                current = False
            if not current:
                found.append(package)
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def ensure_space(self, need: int = MIN_FREE) -> None:
        """At least ``need`` bytes free on the store's disk, deleting ``stale`` packages (oldest first)
        until there are; a one-line error where that is not enough."""
        self.root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.root).free
        stale = self.stale() if free < need else []
        while free < need and stale:
            package = stale.pop(0)
            package.unlink(missing_ok=True)
            package.with_suffix(".json").unlink(missing_ok=True)
            free = shutil.disk_usage(self.root).free
        if free < need:
            raise UsageError(f"{free / 2**30:.1f} GB free on the disk of {self.root}, and a compiled graph's build "
                             f"needs {need / 2**30:.0f} GB: free some space, or set SPECHARNESS_CACHE to a larger disk "
                             "(the run resumes where it stopped)")

    def start(self, graph, stack: nn.Module, args: tuple, fixed: tuple, wide: bool,
              background: bool = False) -> Build | None:
        """Export ``graph`` now and build its package: here (``background`` False: the caller waits
        anyway, and a child would only add its start-up), or in a child process (``graph_build``),
        after a running build ends where ``jobs`` are already running. None when it cannot be
        exported (the reason is in ``failures``)."""
        from torch.export import Dim
        path, record = self.path(graph, stack, args, wide)
        started = time.perf_counter()
        self.ensure_space()
        ctx, slots = Dim("context", min=2, max=MAX_DIM), Dim("slots", min=2, max=MAX_DIM)
        if wide:
            T = Dim("positions", min=2, max=MAX_DIM)
            dims = ({0: T}, {0: T}, {0: T}, {0: T, 1: ctx}, {2: slots}, {2: slots})
        else:
            dims = ({}, {}, {}, {1: ctx}, {2: slots}, {2: slots})
        program = path.with_name(f"{path.stem}.program.pt2")
        try:
            with torch.no_grad():
                exported = torch.export.export(_Graph(stack, *fixed, wide), examples(args, wide),
                                               dynamic_shapes=dims, strict=True)
            if background:
                torch.export.save(exported, str(program))
        except Exception as exc:  # an op export cannot take: torch.compile runs it
            program.unlink(missing_ok=True)
            self.failures[graph] = exception_line(exc)
            return None
        configs = record["inductor"]
        spec = {"program": str(program), "package": str(path), "part": str(path.with_name(f"{path.stem}.building.pt2")),
                "record": record, "configs": configs, "threads": self.env["threads"], "quiet_autotune": self.quiet,
                "amx_prefetch": bool(self.env.get("amx_prefetch")) and self.mode == "max-autotune",
                "narrow_attention": self.env.get("narrow_attention", "on"),
                "narrow_linear": narrow_linear.called_by(exported.graph),
                "autotune_timing": self.env.get("autotune_timing", "fastest"),
                "export_s": time.perf_counter() - started}
        if not background:
            return self._build_here(graph, path, exported, spec, started)
        spec_file = path.with_name(f"{path.stem}.spec.json")
        write_text_atomic(spec_file, json.dumps(spec))
        running = [b for b in self.builds if not b.done]
        while len(running) >= self.jobs:
            running.remove(self.wait_any(running))
        with open(path.with_name(f"{path.stem}.log"), "w") as log:  # the child holds its own handle
            proc = subprocess.Popen([*BUILDER, str(spec_file)], stdout=log, stderr=subprocess.STDOUT)
        build = Build(graph, path, proc, started, [program, spec_file, Path(spec["part"])])
        self.builds.append(build)
        return build

    def _build_here(self, graph, path: Path, exported, spec: dict, started: float) -> Build:
        """The package built in this process: a build already ended (``wait`` returns it)."""
        build = Build(graph, path, None, started, [Path(spec["part"])])
        self.builds.append(build)
        try:
            graph_build.package(exported, spec)
        except Exception as exc:  # an op AOTInductor cannot take: torch.compile runs it
            self._end(build, exception_line(exc))
        else:
            self._end(build, None)
        return build

    def wait(self, build: Build) -> Callable | None:
        """The build's package once its child has ended, loaded; None where it failed (the child's
        last line is in ``failures``). Asking again returns the same."""
        if not build.done:
            code = build.proc.wait()
            log = build.path.with_name(f"{build.path.stem}.log")
            lines = log.read_text(errors="replace").strip().splitlines() if code and log.is_file() else []
            why = (lines[-1] if lines else f"the build's process ended with status {code}") if code else None
            if self._end(build, why and why.removeprefix("graph build failed: ")) is not None:
                log.unlink(missing_ok=True)  # a failed build's log stays beside the store
        return build.package

    def _end(self, build: Build, why: str | None) -> Callable | None:
        """Settle a build that has ended (``why``: its failure, None when it says it succeeded): load its
        package, count it as built or keep why not, remove its scratch files."""
        build.package = self._open(build.path) if why is None else None
        if build.package is not None:
            self.built.add(build.graph)
        else:
            self.failures[build.graph] = why or "its package could not be loaded"
        for f in build.scratch:
            f.unlink(missing_ok=True)
        build.done, build.seconds = True, time.perf_counter() - build.started
        return build.package

    def wait_any(self, builds: list[Build]) -> Build:
        """The first of ``builds`` to end, waited for (``wait``): builds finish out of order."""
        while True:
            for build in builds:
                if build.done or build.proc.poll() is not None:
                    self.wait(build)
                    return build
            time.sleep(0.05)

    def stop(self) -> None:
        """End every running build (an interrupted warm-up): packages already built stay, nothing half
        built is left to load."""
        for build in self.builds:
            if not build.done:
                build.proc.kill()
                build.proc.wait()
                build.done = True
                for f in [*build.scratch, build.path.with_name(f"{build.path.stem}.log")]:
                    f.unlink(missing_ok=True)
