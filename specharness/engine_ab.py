"""Measurement code for the engine's A/Bs: full-model forwards timed interleaved, and attention alone.

Why a module: the scripts under ``results/`` that chose each kernel had copied their
compile-and-interleave loop and their attention-alone loop, and reached into engine internals that
later moved, so some stopped running. Here the loops are maintained code with a smoke test on a tiny
model (``tests/test_engine_ab.py``); a results script only chooses its arms (``EngineOptions``),
sets its thread count and calls these. Defaults are the values the committed A/Bs used: SmolLM2 in
bfloat16 under max-autotune, widths 1-64, contexts 256 and 1024, 5 rounds of 9 forwards.

- ``compiled_target``: one arm, every width compiled before any timing starts (a process-wide
  compiler setting an arm changes, such as the C++ wrapper, is read as its graphs compile);
- ``time_interleaved``: the arms in turn, round by round, so drift on the host falls on all alike;
  prints a provenance line and one line per context and arm, returns the medians;
- ``time_layers``: callables over L layers, warm (back to back) and cold (each after a GEMM over a
  weight-sized matrix of its own, the GEMM's time subtracted);
- ``attention_inputs``: SmolLM2-shaped query rows, caches and bias for ``time_layers``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .engine_options import EngineOptions
from .model import TargetModel
from .model.engine_choice import apply, cpu_name, step_ms
from .results import provenance

WIDTHS = (1, 8, 16, 32, 64)
CONTEXTS = (256, 1024)
ROUNDS = 5
REPEATS = 9  # timed forwards per round, width, context and arm (step_ms's median)
RATIOS = (8, 32)  # widths whose ratio to the narrowest each line prints (the 8/1 and 32/1)
Build = Callable[[EngineOptions], TargetModel]
Log = Callable[[str], None]


def _say(line: str) -> None:
    print(line, flush=True)


def load_target(options: EngineOptions, model: str = "smollm2", dtype: str = "bfloat16") -> TargetModel:
    """The default way to build an arm: ``model`` (default SmolLM2) loaded in ``dtype`` on CPU with ``options``."""
    return TargetModel.load(model, dtype, "cpu", options=options)


def compiled_target(name: str, options: EngineOptions | None = None, *, model: str = "smollm2",
                    dtype: str = "bfloat16", mode: str = "max-autotune", widths: Sequence[int] = WIDTHS,
                    context: int = 256, prepare: Callable[[TargetModel], None] | None = None,
                    build: Build | None = None, log: Log = _say) -> TargetModel:
    """One arm: the target (``build(options)``, else ``model`` in ``dtype``; ``options`` None means
    ``EngineOptions()``, whatever the environment says), ``prepare``d, compiled in ``mode`` with
    every width compiled now, at ``context``. A compile that falls back to eager raises: an A/B of
    an arm that did not compile would compare something else."""
    options = options or EngineOptions()
    target = build(options) if build else load_target(options, model, dtype)
    if prepare:
        prepare(target)
    got, why = apply(target, mode)
    if got != mode:
        raise RuntimeError(f"{name}: compile mode {mode} fell back to {got} ({why})")
    target.expect_widths(max(widths))
    for width in widths:
        step_ms(target, context=context, width=width, repeats=1)
    log(f"{name} compiled {round(target.backend.compile_s)} s")
    return target


def arm_record(target: TargetModel) -> dict:
    """What the provenance line says of one arm: model, dtype, compile mode, options, kernels in force."""
    return {"model": target.name, "dtype": str(target.dtype).removeprefix("torch."), "compile": target.backend.mode,
            "options": target.options.record(), "kernels": target.kernel_flags()}


def time_rounds(targets: dict[str, TargetModel], widths: Sequence[int], contexts: Sequence[int], rounds: int,
                repeats: int) -> dict[tuple[str, int, int], list[float]]:
    """(arm, context, width) -> the median ms of each round, the arms interleaved within a round."""
    res: dict[tuple[str, int, int], list[float]] = {(n, c, w): [] for n in targets for c in contexts for w in widths}
    for _ in range(rounds):
        for c in contexts:
            for n, t in targets.items():
                for w in widths:
                    res[n, c, w].append(step_ms(t, context=c, width=w, repeats=repeats))
    return res


def result_line(name: str, context: int, medians: dict[int, float], rounds: dict[int, list[float]]) -> str:
    """``ctx C NAME {width: median}``, the 8/1 and 32/1 ratios where those widths ran, per-round medians."""
    base = min(medians)
    ratios = "".join(f" {w}/{base} {round(medians[w] / medians[base], 3)}"
                     for w in RATIOS if w in medians and w != base)
    per_round = {w: [round(x, 1) for x in xs] for w, xs in rounds.items()}
    return f"ctx {context} {name} {medians}{ratios} rounds {per_round}"


def time_interleaved(targets: dict[str, TargetModel], command: str, widths: Sequence[int] = WIDTHS,
                     contexts: Sequence[int] = CONTEXTS, rounds: int = ROUNDS, repeats: int = REPEATS,
                     log: Log = _say) -> dict[tuple[str, int], dict[int, float]]:
    """Time the compiled ``targets`` interleaved; log a provenance line (``command``, the thread
    count in force, each arm's record) and one line per context and arm; return
    (arm, context) -> {width: median ms over the rounds}."""
    res = time_rounds(targets, widths, contexts, rounds, repeats)
    head = provenance(model=", ".join(sorted({t.name for t in targets.values()})), device="cpu",
                      threads=torch.get_num_threads(), cpu=cpu_name(), command=command,
                      widths=list(widths), contexts=list(contexts), rounds=rounds, repeats=repeats,
                      arms={n: arm_record(t) for n, t in targets.items()})
    log(f"# {head}")
    out: dict[tuple[str, int], dict[int, float]] = {}
    for c in contexts:
        for n in targets:
            out[n, c] = {w: round(statistics.median(res[n, c, w]), 2) for w in widths}
            log(result_line(n, c, out[n, c], {w: res[n, c, w] for w in widths}))
    return out


def time_layers(fs: dict[str, Callable[[int], object]], x: torch.Tensor, junk: Sequence[torch.Tensor],
                rounds: int = 10) -> dict[str, tuple[float, float]]:
    """Each of ``fs`` (layer index -> one layer's work; the entry "none" must do nothing) over
    ``len(junk)`` layers, warm and cold (each layer after its GEMM of ``x`` by ``junk[i]``),
    interleaved for ``rounds`` rounds: name -> (warm ms, cold ms less "none"'s cold ms)."""
    if "none" not in fs:
        raise ValueError("time_layers needs a 'none' entry: its cold time is the GEMMs' alone")
    res: dict[tuple[str, bool], list[float]] = {}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, f in fs.items():
                for cold in (False, True):
                    started = time.perf_counter()
                    for i, weight in enumerate(junk):
                        if cold:
                            torch.mm(x, weight.t())
                        f(i)
                    res.setdefault((name, cold), []).append((time.perf_counter() - started) * 1e3)
    base = statistics.median(res["none", True])
    return {n: (statistics.median(res[n, False]), statistics.median(res[n, True]) - base) for n in fs if n != "none"}


@dataclass(frozen=True)
class LayerShape:
    """One layer's attention for attention-alone timing; the defaults are SmolLM2-135M's."""

    kv_heads: int = 3
    group: int = 3  # query heads per key/value head
    head_dim: int = 64
    slots: int = 1100  # cache slots per layer
    hidden: int = 576
    gemm_rows: int = 3072  # rows of the cold path's weight (the MLP's gate/up: 3.5 MB in bfloat16)
    layers: int = 30


@dataclass
class AttentionInputs:
    """Query rows [kv heads, group * T, d], each layer's caches [kv heads, slots, d], the bias [T, n]
    (and repeated per query head of a group, [group * T, n], as SDPA takes it), and the cold path's
    GEMM operands: ``x`` [T, hidden] and one weight per layer."""

    q: torch.Tensor
    k_caches: list[torch.Tensor]
    v_caches: list[torch.Tensor]
    bias: torch.Tensor
    group_bias: torch.Tensor
    x: torch.Tensor
    junk: list[torch.Tensor]

    def sdpa(self, i: int) -> torch.Tensor:
        """Layer ``i`` by SDPA, each group's query heads folded into one head's rows (as the engine calls it)."""
        n = self.bias.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            self.q.unsqueeze(0), self.k_caches[i][:, :n].unsqueeze(0), self.v_caches[i][:, :n].unsqueeze(0),
            attn_mask=self.group_bias)

    def narrow(self, amx: bool) -> Callable[[int], torch.Tensor]:
        """Layer ``i`` -> the narrow attention kernel on it (its AMX path when ``amx``; the op must be built)."""
        scale = self.q.shape[-1] ** -0.5
        return lambda i: torch.ops.specharness.narrow_attention(self.q, self.k_caches[i], self.v_caches[i],
                                                                self.bias, scale, amx)


def attention_inputs(T: int, n: int, shape: LayerShape = LayerShape(), causal: bool = False,
                     junk: list[torch.Tensor] | None = None, dtype: torch.dtype = torch.bfloat16) -> AttentionInputs:
    """Random inputs for T query positions over n cached slots per layer; ``causal``: the T new
    positions (the last T slots) causal among themselves, as a chain's are, else the bias is all 0.
    ``junk`` (the cold path's weights) is made when not given; pass one list to share it between cases."""
    if junk is None:
        junk = [torch.randn(shape.gemm_rows, shape.hidden, dtype=dtype) for _ in range(shape.layers)]
    caches = [[torch.randn(shape.kv_heads, shape.slots, shape.head_dim, dtype=dtype) for _ in range(shape.layers)]
              for _ in range(2)]
    bias = torch.zeros(T, n, dtype=dtype)
    if causal:
        bias[:, n - T:] = torch.zeros(T, T).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return AttentionInputs(q=torch.randn(shape.kv_heads, shape.group * T, shape.head_dim, dtype=dtype),
                           k_caches=caches[0], v_caches=caches[1], bias=bias, group_bias=bias.repeat(shape.group, 1),
                           x=torch.randn(T, shape.hidden, dtype=dtype), junk=junk)
