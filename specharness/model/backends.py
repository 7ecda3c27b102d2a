"""Running the layer stack: op by op (``EagerBackend``) or as compiled graphs (``CompiledBackend``).

A backend takes one typed ``ForwardRequest`` (what ``TargetModel.forward`` prepared: inputs,
positions, slots, the attention bias, the layer range's caches) and returns the stack's
(hidden, logits, captured). The compiled backend's process-wide compiler settings (dynamo's cache
limits, inductor freezing, the C++ wrapper, the CPU accelerator pieces) come from the
``EngineOptions`` it is given, and are set here alone.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ..engine_options import EngineOptions
from .accel import amx_prefetch, autotune_timing, narrow_linear
from .accel.inductor_cache import cache_prepacked_graphs
from .graph_store import examples
from .layers import Gemm
from .stack import DecoderStack, Skip

COMPILE_MODES = ("none", "default", "max-autotune")
# static compiled widths (padded) for verification; prefills: one dynamic graph. 2 and 4 have their own
# graphs: on a 2-core EPYC (AVX512-BF16, no AMX) a verification of 2 positions padded to 8 cost 19.1 ms
# against 11.6 at its own width, and a chain drafter like Kangaroo verifies 2-3 positions a round
# (results/smollm2-cpu-epyc-drafter-stacks/widths.txt)
WIDTH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


# Where the width-1 graph is the slower one, one-position forwards run the width-2 graph (a padding
# row, unseen by the real one): (CPU flag present, flag absent, dtype, mode, evidence). What was
# measured, never assumed; elsewhere width 1 stays.
PAD_SINGLE = (
    ("avx512_bf16", "amx_tile", torch.bfloat16, "max-autotune",
     "2-core AMD EPYC, SmolLM2-135M, 2 threads: the full model's width-1 graph 13.5 ms, its width-2 graph 10.9 ms, "
     "interleaved (results/smollm2-cpu-epyc-drafter-stacks)"),
)


def measured_here(table: tuple[tuple, ...], dtype: torch.dtype, mode: str, device: torch.device) -> tuple | None:
    """The row of a per-CPU table (CPU flag present, flag absent, dtype, mode, ...) that this CPU, dtype
    and mode match, or None: what was measured, never assumed."""
    if device.type != "cpu":
        return None
    from .engine_choice import cpu_features
    features = cpu_features()
    return next((row for row in table if row[0] in features and row[1] not in features
                 and row[2] == dtype and row[3] == mode), None)


def narrowest_width(option: str, dtype: torch.dtype, mode: str, device: torch.device) -> tuple[int, str]:
    """The narrowest compiled width and why: ``option`` "1" or "2" as asked, "auto" as ``PAD_SINGLE`` says."""
    if option != "auto":
        return int(option), "asked"
    row = measured_here(PAD_SINGLE, dtype, mode, device)
    return (2, row[-1]) if row else (1, "width 1 measured fastest, or not measured here")


# Where one GEMM kernel family per width beats max-autotune's per-GEMM choice, a static graph is built
# with that family alone: (CPU flag present, flag absent, dtype, mode, tiers, evidence). A graph of
# ``width`` positions takes the first tier (widest width, family) that holds it and whose family is
# usable here ("NARROW": our ``accel.narrow_linear``, where the engine's C++ library loads); "CPP" is
# inductor's C++ GEMM template, "ATEN" oneDNN, None max-autotune's own choice. Max-autotune times each layer's GEMMs apart, on weights
# left in cache by the previous call, and its picks lost to one family whole in place; elsewhere
# max-autotune chooses (its timings: ``accel.autotune_timing``).
GEMM_FAMILIES = (
    ("avx512_bf16", "amx_tile", torch.bfloat16, "max-autotune", ((2, "CPP"), (16, "NARROW"), (4, "CPP"), (None, "ATEN")),
     "2-core AMD EPYC, SmolLM2-135M, 2 threads, the full model's forward at widths 2/4/8/16, every arm built fresh "
     "and timed round-robin in one process: our kernel alone 8.6/9.4/10.6/21.0 ms, the C++ template alone "
     "8.0 at width 2 (9.6/9.7/38.8/77.4 in the first A/B), oneDNN alone 14.1/12.7/15.4/22.0, max-autotune's "
     "per-layer mix 11.3/11.3/16.1/21.9 (results/smollm2-cpu-epyc-narrow-linear, results/smollm2-cpu-epyc-gemm-families)"),
    # AVX2 without AVX512 (oneDNN emulates bfloat16 GEMMs): our kernel's AVX2 build; past 16 not measured.
    # AVX512 CPUs without BF16 (Skylake-SP, Ice Lake) also build it, but were not measured: autotune there
    ("avx2", "avx512f", torch.bfloat16, "max-autotune", ((16, "NARROW"), (None, None)),
     "2-core AMD EPYC Zen 3 (AVX2 only), SmolLM2-135M, 2 threads, the full model's forward at widths "
     "1/2/4/8/16, every arm built fresh and timed round-robin in one process: our kernel alone "
     "12.2/12.9/17.0/23.9/40.8 ms, max-autotune's per-GEMM choice 13.2/14.7/27.2/48.0/92.9, the C++ template "
     "alone 13.3/14.6/25.7/47.9/99.2 (results/smollm2-cpu-epyc-avx2-narrow-linear)"),
)


FAMILY_OF = {"cpp": "CPP", "aten": "ATEN", "narrow": "ATEN"}  # a one-family option; "narrow" where ours cannot serve


def gemm_family(option: str, width: int | str, dtype: torch.dtype, mode: str, device: torch.device) -> str | None:
    """The GEMM kernels of a graph of ``width`` positions ("wide": the dynamic one): "NARROW" (our
    ``accel.narrow_linear``: bfloat16 static widths, where the engine's C++ library loads; what it does
    not take goes to oneDNN), inductor's "CPP" or "ATEN" alone, or None for max-autotune's own choice
    among both. ``option`` (``EngineOptions.gemm``) "auto" follows ``GEMM_FAMILIES`` where this CPU,
    dtype and mode were measured; "narrow" is our kernel at every static width (else "ATEN")."""
    def usable(family: str) -> bool:
        return family != "NARROW" or (width != "wide" and dtype == torch.bfloat16 and narrow_linear.available(device))

    if option == "narrow" and usable("NARROW"):
        return "NARROW"
    if mode != "max-autotune" or device.type != "cpu" or option == "autotune":
        return None
    if option in FAMILY_OF:
        return FAMILY_OF[option]
    row = None if width == "wide" else measured_here(GEMM_FAMILIES, dtype, mode, device)
    if row is None:
        return None
    return next(family for widest, family in row[4] if (widest is None or width <= widest) and usable(family))


def bucket(T: int) -> int:
    """The narrowest width bucket that holds T positions (T itself past the widest)."""
    return next((w for w in WIDTH_BUCKETS if w >= T), T)


@dataclass
class ForwardRequest:
    """One forward of layers [a, b) over T positions (padded to the backend's width)."""

    x: torch.Tensor  # token ids [T] (a = 0) or hidden states [T, H] entering layer a
    positions: torch.Tensor  # [T] rotary positions
    slots: torch.Tensor  # [T] cache slots written
    bias: torch.Tensor  # [T, slots] additive attention bias in the cache's dtype
    keys: torch.Tensor  # the whole cache's keys [layers, kv heads, slots, d] (``KVCache.keys``): one input, one size
    values: torch.Tensor
    a: int
    b: int
    head: bool | str  # end with the final norm and the LM head ("last": at the last position only)
    capture: tuple[int, ...] = ()  # layers whose output states to hand back
    skip: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    prefill: bool = False  # a prompt: the dynamic-width graph when compiled
    stack: str = ""  # which stack runs: "" = the target's, else a drafter's (``TargetModel.add_stack``)


# the engine switches a stored graph's kernels depend on (``graph_store``'s key)
STORE_SWITCHES = ("narrow_attention", "amx_prefetch", "cpp_wrapper", "narrowest", "autotune_timing")  # gemm: per graph


class GraphKey(NamedTuple):
    """What one compiled graph is specialised on."""

    a: int  # first decoder layer
    b: int  # one past the last
    head: bool | str  # ends with the final norm and LM head ("last": at the last position only)
    capture: tuple[int, ...]  # layers whose hidden states it hands back
    ids: bool  # takes token ids (embeds them) rather than hidden states
    skip: Skip
    width: int | str  # positions (a bucket), or "wide" (one dynamic-width graph)
    stack: str = ""  # "" = the target's layers, else the drafter stack of that name

    def describe(self) -> str:
        return (f"{self.stack + ' ' if self.stack else ''}layers {self.a}-{self.b}{' +head (last)' if self.head == 'last' else ' +head' if self.head else ''}"
                f"{' skipping' if self.skip != ((), ()) else ''}, width {self.width}")


class EagerBackend:
    """The stack as written, op by op."""

    compiled = False
    mode = "none"
    amx_prefetch = False  # the AMX GEMM template's weight prefetch is in its graphs (accel.amx_prefetch)
    narrowest, narrowest_why = 1, "eager: nothing is padded"  # the narrowest width a forward runs at
    cpp_wrapper = False  # inductor's wrapper code (the calls between kernels) is C++, not Python
    gemm = Gemm()  # the static widths whose graphs take our linear kernel (none: nothing is compiled)

    def __init__(self, stacks: dict[str, DecoderStack]) -> None:
        self.stacks = dict(stacks)  # "" = the target's own; drafters' stacks run through the same backend
        self.graphs: set[GraphKey] = set()  # every graph compiled
        self.used: set[GraphKey] = set()  # the graphs called since the caller last cleared it (warm-up, per method)
        self.compile_s = 0.0
        self.compile_times: dict[GraphKey, float] = {}  # seconds each graph took to compile (progress estimates)
        self.load_times: dict[GraphKey, float] = {}  # ... or to load from the graph store
        self.on_new_graph: Callable[[GraphKey], None] | None = None  # told before each compile (a progress line)
        # told as each background build ends: (graph, its build seconds, builds still to wait for)
        self.on_graph_built: Callable[[GraphKey, float, int], None] | None = None
        self.loading = False  # while ``on_new_graph`` is told: the graph is loaded from the store, not compiled
        self.background = False  # while ``on_new_graph`` is told: the graph builds in a child process
        self.store = None  # compiled graphs kept on disk (``graph_store.GraphStore``), where used
        # width -> a wider width whose compiled graph measured faster (``width_curve``; set after warm-up)
        self.route: dict[int, int] = {}
        # drafter modules that are no stack -> what runs them (``CompiledBackend.run_module``: compiled)
        self.modules: dict[nn.Module, Callable] = {}

    @property
    def compiled_count(self) -> int:
        """Graphs and drafter modules compiled so far: a run counts what compiled while timing by it."""
        return len(self.graphs) + len(self.modules)

    @property
    def stack(self) -> DecoderStack:
        """The target's own stack."""
        return self.stacks[""]

    def add_stack(self, name: str, stack: DecoderStack) -> None:
        self.stacks[name] = stack

    def width(self, T: int, prefill: bool = False) -> int:
        return T

    def dynamic(self, T: int, prefill: bool = False) -> bool:
        """Whether a forward of T positions runs unpadded in a graph of any width (eager: always), so a
        head at its last position alone adds no graph of its own."""
        return True

    @contextmanager
    def in_background(self, wait: bool = True) -> Iterator[None]:
        """Untimed work (warm-up) during which graphs may build in the background (``CompiledBackend``);
        nothing to build here."""
        yield

    @property
    def build_jobs(self) -> int:
        """Graphs building at once now (more than one inside ``CompiledBackend.in_background``)."""
        return 1

    def routed(self, key: GraphKey) -> int:
        """The width to run ``key``'s forward at: the route's wider width when that graph of the same layers
        is compiled (a route never compiles), else its own."""
        w = self.route.get(key.width, key.width)
        return w if w != key.width and key._replace(width=w) in self.graphs else key.width

    def __call__(self, r: ForwardRequest) -> tuple:
        return self.stacks[r.stack](r.x, r.positions, r.slots, r.bias, r.keys, r.values, r.a, r.b, r.head, r.capture, r.skip)

    def run_module(self, module: nn.Module, *args: torch.Tensor):
        """A drafter's module that is no decoder stack (Medusa's residual heads), run as the target runs:
        op by op here; ``CompiledBackend`` compiles it with the target's mode. Its inputs keep one shape."""
        return module(*args)


def _forward_wide(stack: DecoderStack, *args):
    """A second entry point (its own code object, so its own graph cache) for prefills and widths
    past the static buckets: compiled once with a dynamic width."""
    return stack(*args)


_BUILDING = object()  # a call's package is building in a child process (``CompiledBackend.in_background``)


class CompiledBackend(EagerBackend):
    """``torch.compile`` of the whole range [a, b) as one graph. On CPU inductor freezes the weights
    (constant-folded and prepacked for oneDNN). A round's forward, up to ``static_top`` positions (the
    bucket of the widest verification a run asks for: ``TargetModel.expect_widths``), is padded to a
    bucket, so those graphs have static shapes except the context length; prefills and
    anything wider share one dynamic-width graph per layer range. Every graph is a minute of
    compiling per run, so no prompt length gets a graph of its own. ``graphs`` records every
    (range, head, capture, width) compiled, so warm-up can compile them all before timing starts."""

    compiled = True

    def __init__(self, stacks: dict[str, DecoderStack], mode: str, device: torch.device, options: EngineOptions) -> None:
        import torch._dynamo
        super().__init__(stacks)
        self.mode = mode
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 1024)
        torch._dynamo.config.automatic_dynamic_shapes = False  # widths stay static: one graph per bucket
        import torch._inductor.config as inductor_config
        if options.quiet_autotune:  # max-autotune's per-GEMM tables would flood the terminal
            inductor_config.autotune_num_choices_displayed = 0
            inductor_config.max_autotune_report_choices_stats = False
        if device.type == "cpu":
            inductor_config.freezing = True
            cache_prepacked_graphs(options.cache_prepacked)  # a second run reads its graphs from inductor's disk cache
            self.amx_prefetch = mode == "max-autotune" and amx_prefetch.install(options.amx_prefetch)
            if mode == "max-autotune":  # this process's own compiles (drafter modules) time kernels too
                autotune_timing.install(options.autotune_timing)
            # the calls between kernels in C++: a graph's Python wrapper cost 0.75 ms of a width-1 step
            # and 1.6 ms at width 8, where attention is an extern SDPA call (results/smollm2-cpu-xeon-profile-v4)
            self.cpp_wrapper = inductor_config.cpp_wrapper = options.cpp_wrapper
        compile_mode = None if mode == "default" else ("max-autotune-no-cudagraphs" if device.type == "cpu" else mode)
        if device.type == "cuda" and mode == "default":
            compile_mode = "reduce-overhead"  # CUDA graphs: the static widths replay without launch overhead
        dtype = stacks[""].embed_weight.dtype
        self.narrowest, self.narrowest_why = narrowest_width(options.narrowest, dtype, mode, device)
        self.static_top = self.narrowest  # widest static bucket; expect_widths raises it to what verification needs
        self.compile_mode = compile_mode
        # the static widths whose graphs take our linear kernel (``layers.Gemm``): every stack's, drafters' too
        self.gemm = Gemm(tuple(w for w in WIDTH_BUCKETS if gemm_family(options.gemm, w, dtype, mode, device) == "NARROW"))
        for stack in self.stacks.values():
            stack.gemm = self.gemm
        self.narrow = {name: self._compile(stack) for name, stack in self.stacks.items()}
        self.wide = torch.compile(_forward_wide, fullgraph=True, dynamic=True)
        self.packages: dict[tuple, Callable] = {}  # (graph key, its inputs' signature) -> the store's package
        self.building: dict[tuple, tuple] = {}  # (graph key, signature) -> (its build, stack, args, wide)
        self.deferred = False  # inside ``in_background``
        if device.type == "cpu" and options.aot_graphs and self.cpp_wrapper:
            from .graph_store import GraphStore
            self.store = GraphStore(mode, {k: v for k, v in options.record().items() if k in STORE_SWITCHES},
                                    quiet=options.quiet_autotune, wide_autotune=options.wide_autotune,
                                    gemm=lambda width: gemm_family(options.gemm, width, dtype, mode, device))

    @contextmanager
    def in_background(self, wait: bool = True) -> Iterator[None]:
        """Within this block a graph missing from the store is exported, its package built by a child
        process (``graph_store.GraphStore.start``: one per core at once), and its calls run eagerly
        meanwhile: only for untimed work, whose outputs are those of the same layers. Leaving the
        block waits for every build and loads it (a failed build is compiled by torch.compile then),
        so nothing compiles after it. Interrupted, it stops the builds; finished packages stay. With one
        core to build on (``GraphStore.jobs``: a pinned test worker) a child would only add its start-up,
        so graphs build in this process, as outside the block.

        ``wait=False`` leaves the block once one build has succeeded (the compiler works), the others
        still building: a later block's builds start beside them (the compile check's long prefill
        graph beside the warm-up's first exports). Any call outside a block waits for them first, so
        nothing timed runs eagerly."""
        if self.store is None or self.deferred or self.store.jobs < 2:
            yield
            return
        self.deferred = True
        try:
            yield
        except BaseException:
            self.store.stop()
            self.building.clear()
            raise
        finally:
            self.deferred = False
        self.finish(one=not wait)

    @property
    def build_jobs(self) -> int:
        return self.store.jobs if self.deferred else 1

    def finish(self, one: bool = False) -> None:
        """Wait for the background builds, as they end, and load their packages (a failed one is
        compiled by torch.compile then). ``one``: only until one has built, the rest left building
        (``in_background(wait=False)``); they are waited for by the next call outside a block."""
        waited = time.perf_counter()
        try:
            while self.building:
                by_build = {build: signed for signed, (build, *_) in self.building.items()}
                build = self.store.wait_any(list(by_build))
                signed = by_build[build]
                _, stack, args, wide = self.building.pop(signed)
                key = signed[0]
                if build.package is not None:
                    self.packages[signed] = build.package
                else:  # its build failed (the reason is in store.failures): torch.compile it now, untimed
                    with torch.inference_mode():
                        self._compiled(key.stack, stack, (*examples(args, wide), *args[6:]), not wide, mark=True)
                self.compile_times[key] = build.seconds
                if self.on_graph_built is not None:
                    self.on_graph_built(key, build.seconds, len(self.building))
                if one and build.package is not None:
                    return
        finally:
            self.compile_s += time.perf_counter() - waited

    def _compile(self, stack: DecoderStack):
        return torch.compile(stack, fullgraph=True, mode=self.compile_mode)

    def run_module(self, module: nn.Module, *args: torch.Tensor):
        """The module compiled with the target's mode and inductor settings (frozen weights, the C++
        wrapper), on its first call: in warm-up, since a drafter runs there before any timed round.
        Not in the graph store: a second process traces it again (one small graph)."""
        compiled = self.modules.get(module)
        if compiled is not None:
            return compiled(*args)
        started = time.perf_counter()
        self.modules[module] = torch.compile(module, fullgraph=True, mode=self.compile_mode)
        try:
            out = self.modules[module](*args)
        except Exception as exc:  # a compiler failure must not end the run: this module runs eagerly from now on
            from ..errors import exception_line
            print(f"note: {type(module).__name__} could not be compiled ({exception_line(exc)}); it runs eagerly",
                  file=sys.stderr)
            self.modules[module] = module
            out = module(*args)
        self.compile_s += time.perf_counter() - started
        return out

    def add_stack(self, name: str, stack: DecoderStack) -> None:
        super().add_stack(name, stack)
        stack.gemm = self.gemm
        self.narrow[name] = self._compile(stack)

    def _static(self, T: int, prefill: bool) -> bool:
        # a one-position prefill takes the static graph: a dynamic dimension of size 1 would specialise
        # (T is the padded width when the call comes from a padded forward)
        return T <= self.static_top and not (prefill and T > self.narrowest)

    def width(self, T: int, prefill: bool = False) -> int:
        return max(bucket(T), self.narrowest) if self._static(T, prefill) else T

    def dynamic(self, T: int, prefill: bool = False) -> bool:
        return not self._static(T, prefill)

    def __call__(self, r: ForwardRequest) -> tuple:
        if self.building and not self.deferred:  # builds left running by in_background(wait=False)
            self.finish()
        T = r.x.shape[0]
        static = self._static(T, r.prefill)
        key = GraphKey(r.a, r.b, r.head, r.capture, r.x.dtype == torch.long, r.skip, T if static else "wide", r.stack)
        self.used.add(key)
        new = key not in self.graphs
        started = time.perf_counter() if new else None
        # layer sets as frozensets: under dynamic=True dynamo makes the ints of a tuple symbolic, and
        # ``i in (0, 1)`` is then False for every i (torch 2.13), so the wide graph captured nothing
        capture, skip = frozenset(r.capture), (frozenset(r.skip[0]), frozenset(r.skip[1]))
        args = (r.x, r.positions, r.slots, r.bias, r.keys, r.values, r.a, r.b, r.head, capture, skip)
        stack, wide = self.stacks[r.stack], not static
        stored = self.store is not None and self.store.fits(args, wide) and key not in self.store.failures
        loads = new and stored and self.store.stored(key, stack, args, wide)
        if new and self.on_new_graph is not None:  # progress, before the graph is loaded or compiled
            self.loading, self.background = loads, stored and self.deferred and not loads
            try:
                self.on_new_graph(key)
            finally:
                self.loading = self.background = False
        package = self._package(key, stack, args, wide) if stored else None
        if package is _BUILDING:  # untimed: the same layers, eagerly, while the package builds
            out = stack(*args, wide)
        elif package is not None:
            out = package(*(t.contiguous() for t in args[:6]))
        else:
            out = self._compiled(r.stack, stack, args, static)
        if started is not None:  # a new graph: this call compiled (or loaded) it
            self.graphs.add(key)
            seconds = time.perf_counter() - started
            (self.load_times if loads else self.compile_times)[key] = seconds
            self.compile_s += seconds
        return out

    def _compiled(self, name: str, stack: DecoderStack, args: tuple, static: bool, mark: bool = False) -> tuple:
        """The call through torch.compile's graph (``mark``: the cache's slots dynamic too, as
        ``TargetModel.new_cache`` marks a cache's)."""
        if args[3].shape[1] > 1:
            torch._dynamo.mark_dynamic(args[3], 1)  # the context grows every round
        if mark:
            for cache in args[4:6]:
                torch._dynamo.mark_dynamic(cache, 2)
        return self.narrow[name](*args) if static else self.wide(stack, *args, True)

    def _package(self, key: GraphKey, stack: DecoderStack, args: tuple, wide: bool) -> Callable | None:
        """The store's package for this call (loaded, or built on first use), ``_BUILDING`` while it
        builds in the background, or None: torch.compile runs it."""
        signed = (key, self.store.signature(stack, args, wide))
        package = self.packages.get(signed)
        if package is None and signed in self.building:
            return _BUILDING
        if package is None:
            package = self.store.find(key, stack, args[:6], wide)
        if package is None:
            build = self.store.start(key, stack, args[:6], args[6:], wide, background=self.deferred)
            if build is not None and self.deferred:
                self.building[signed] = (build, stack, args, wide)
                return _BUILDING
            package = None if build is None else self.store.wait(build)
        if package is not None:
            self.packages[signed] = package
        return package
