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
folder to free it.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ..errors import exception_line
from ..paths import cache_root, write_text_atomic
from .accel.inductor_cache import weights_digest

MAX_DIM = 1 << 16  # the widest prompt and the longest cache a package takes (the model's context is less)


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


class GraphStore:
    """AOTInductor packages of one backend's graphs: ``get`` loads a stored one, or exports,
    compiles, stores and loads it. ``loaded``/``built`` say which graphs came which way."""

    def __init__(self, mode: str, settings: dict, root: Path | None = None) -> None:
        self.mode, self.root = mode, root or store_dir()
        self.env = {"torch": torch.__version__, "cpu": _cpu(), "threads": torch.get_num_threads(), "mode": mode,
                    "code": _code_digest(), **settings}
        self.digests: dict[int, tuple[tuple[int, ...], str]] = {}  # id(stack) -> (param versions, digest)
        self.loaded: set = set()
        self.built: set = set()
        self.failures: dict = {}  # graph key -> why it runs through torch.compile instead

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
        changes when our kernel fails mid-run)."""
        x, bias, keys = args[0], args[3], args[4]
        return (x.dtype, x.shape[1:] if wide else x.shape, bias.dtype, keys.dtype, keys.shape[:2], keys.shape[3],
                stack.attention)

    def key(self, graph, stack: nn.Module, args: tuple, wide: bool) -> tuple[str, dict]:
        """The package's file stem and the readable record it is stored with."""
        record = {**self.env, "graph": repr(tuple(graph._replace(stack=""))),  # the stack by its weights, not its name
                  "weights": self.weights_digest(stack), "inputs": repr(self.signature(stack, args, wide)),
                  "stack": repr((stack.eps, stack.shape, stack.cache_layers))}
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
        """Whether ``get`` would load this graph rather than build it (progress says which)."""
        return self.path(graph, stack, args, wide)[0].is_file()

    def get(self, graph, stack: nn.Module, args: tuple, fixed: tuple, wide: bool) -> Callable | None:
        """The package for ``graph`` (``fixed``: a, b, head, capture, skip), loaded or built now;
        None when it cannot be built (the reason is in ``failures``)."""
        path, record = self.path(graph, stack, args, wide)
        if path.is_file():
            try:
                fn = torch._inductor.aoti_load_package(str(path))
                self.loaded.add(graph)
                return fn
            except Exception:  # a package torch cannot read (truncated, another build): build it again
                path.unlink(missing_ok=True)
        try:
            fn = self._build(stack, args, fixed, wide, path, record)
        except Exception as exc:  # an op export or AOTInductor cannot take: torch.compile runs it
            self.failures[graph] = exception_line(exc)
            return None
        self.built.add(graph)
        return fn

    def _build(self, stack, args, fixed, wide, path: Path, record: dict):
        from torch.export import Dim
        started = time.perf_counter()
        ctx, slots = Dim("context", min=2, max=MAX_DIM), Dim("slots", min=2, max=MAX_DIM)
        if wide:
            T = Dim("positions", min=2, max=MAX_DIM)
            dims = ({0: T}, {0: T}, {0: T}, {0: T, 1: ctx}, {2: slots}, {2: slots})
        else:
            dims = ({}, {}, {}, {1: ctx}, {2: slots}, {2: slots})
        with torch.no_grad():
            program = torch.export.export(_Graph(stack, *fixed, wide), examples(args, wide), dynamic_shapes=dims,
                                          strict=True)
        configs = {"freezing": True, "cpp_wrapper": True}
        if self.mode == "max-autotune":
            configs.update(max_autotune=True, coordinate_descent_tuning=True)
        self.root.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.stem}.building.pt2")  # torch wants the .pt2 ending
        with warnings.catch_warnings():  # max-autotune's benchmark code trips torch's own TypedStorage warning
            warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
            torch._inductor.aoti_compile_and_package(program, package_path=str(part), inductor_configs=configs)
        part.replace(path)  # whole or absent: an interrupted build leaves no package to load
        record = {**record, "build_s": round(time.perf_counter() - started, 1)}
        write_text_atomic(path.with_suffix(".json"), json.dumps(record, indent=1, sort_keys=True))
        return torch._inductor.aoti_load_package(str(path))
