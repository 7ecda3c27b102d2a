"""Every switch of the engine in one typed record, read from the environment in one place.

Why one place: a switch read deep inside a module (a kernel, a compile backend) is global state
that no result header sees and no caller can override. Here the environment is read once
(``EngineOptions.from_env``), the record is passed to the model as it is built, and
``record()`` goes into every result header and profile row. Tests and A/Bs build the record
they want directly (``EngineOptions(narrow_attention="off")``) instead of setting variables.

| variable | field | values |
|---|---|---|
| SPECHARNESS_ENGINE | ``pinned`` | DTYPE/MODE: what ``--dtype auto --compile auto`` mean |
| SPECHARNESS_NARROW_ATTENTION | ``narrow_attention`` | 1 (default: the best path here), 0 (off), avx512 (never AMX) |
| SPECHARNESS_AMX_PREFETCH | ``amx_prefetch`` | 1 (default), 0 |
| SPECHARNESS_CPP_WRAPPER | ``cpp_wrapper`` | 1 (default), 0 |
| SPECHARNESS_CACHE_PREPACKED | ``cache_prepacked`` | 1 (default), 0 |
| SPECHARNESS_AOT_GRAPHS | ``aot_graphs`` | 1 (default), 0 |
| SPECHARNESS_NARROWEST | ``narrowest`` | auto (default: as measured for this CPU, dtype and mode), 1, 2 |
| SPECHARNESS_WIDE_AUTOTUNE | ``wide_autotune`` | 0 (default), 1: the dynamic-width (prefill) graph under max-autotune too |
| SPECHARNESS_GEMM | ``gemm`` | auto (default: one kernel family per width where measured here), autotune, cpp, aten, narrow (our bfloat16 kernel at every static width) |
| SPECHARNESS_AUTOTUNE_TIMING | ``autotune_timing`` | fastest (default: one benchmark at a time, its fastest call), inductor |

Inductor's own ``TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED`` and
``TORCHINDUCTOR_MAX_AUTOTUNE_REPORT_CHOICES_STATS``, when the user sets them, keep max-autotune's
tables (``quiet_autotune`` False); otherwise they are silenced.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from .errors import UsageError

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
COMPILE_CHOICES = ("auto", "none", "default", "max-autotune")
NARROW_CHOICES = ("on", "off", "avx512")
NARROWEST_CHOICES = ("auto", "1", "2")

PIN_ENV = "SPECHARNESS_ENGINE"
NARROW_ENV = "SPECHARNESS_NARROW_ATTENTION"
PREFETCH_ENV = "SPECHARNESS_AMX_PREFETCH"
CPP_WRAPPER_ENV = "SPECHARNESS_CPP_WRAPPER"
PREPACKED_ENV = "SPECHARNESS_CACHE_PREPACKED"
AOT_ENV = "SPECHARNESS_AOT_GRAPHS"
NARROWEST_ENV = "SPECHARNESS_NARROWEST"
WIDE_AUTOTUNE_ENV = "SPECHARNESS_WIDE_AUTOTUNE"
GEMM_ENV = "SPECHARNESS_GEMM"
GEMM_CHOICES = ("auto", "autotune", "cpp", "aten", "narrow")
TIMING_ENV = "SPECHARNESS_AUTOTUNE_TIMING"
TIMING_CHOICES = ("fastest", "inductor")
INDUCTOR_TABLES_ENV = ("TORCHINDUCTOR_AUTOTUNE_NUM_CHOICES_DISPLAYED", "TORCHINDUCTOR_MAX_AUTOTUNE_REPORT_CHOICES_STATS")


@dataclass(frozen=True)
class EngineOptions:
    """The engine's switches; the defaults are the fastest configuration measured here."""

    pinned: tuple[str, str] | None = None  # (dtype, mode) that "auto" means, or None: measure
    narrow_attention: str = "on"  # our C++ attention kernel: on (AMX where granted), off, avx512
    amx_prefetch: bool = True  # the AMX GEMM template prefetches its weight tiles
    cpp_wrapper: bool = True  # compiled graphs' wrapper code in C++
    cache_prepacked: bool = True  # frozen graphs cached by weight digest (a second process reads them)
    # CPU graphs built as AOTInductor packages kept on disk: a second process loads them without tracing
    # (``model.graph_store``; needs the C++ wrapper)
    aot_graphs: bool = True
    quiet_autotune: bool = True  # silence max-autotune's per-GEMM tables
    # the narrowest compiled width: "2" pads one-position forwards (vanilla's steps) to the width-2 graph,
    # "auto" does where it was measured faster (``backends.narrowest_width``)
    narrowest: str = "auto"
    # under max-autotune, the dynamic-width graph (prefills, and verification past the widest static
    # bucket) autotuned too. Off: it is a first run's longest build (114 s against 102 s without) and its
    # prefills ran as fast (0.92-1.03x at 64-512 tokens; results/smollm2-cpu-epyc-wide-autotune)
    wide_autotune: bool = False
    # the GEMM kernels of a static graph under max-autotune on CPU: "auto" (inductor's C++ template alone
    # or oneDNN alone, by width, where measured: ``model.backends.GEMM_FAMILIES``; elsewhere autotuned),
    # "autotune" (max-autotune's own choice per GEMM), "cpp" or "aten" (that family alone at every width),
    # "narrow" (our bfloat16 kernel, ``model.accel.narrow_linear``, in every static graph; oneDNN elsewhere)
    gemm: str = "auto"
    # how max-autotune times a CPU kernel choice: "fastest" (one benchmark at a time across processes,
    # its fastest call; ``model.accel.autotune_timing``) or "inductor" (the median, as torch does)
    autotune_timing: str = "fastest"

    def __post_init__(self) -> None:
        for name, choices in (("narrow_attention", NARROW_CHOICES), ("narrowest", NARROWEST_CHOICES),
                              ("gemm", GEMM_CHOICES), ("autotune_timing", TIMING_CHOICES)):
            value = getattr(self, name)
            if value not in choices:
                raise UsageError(f"{name} '{value}': choose one of {', '.join(choices)}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "EngineOptions":
        """The options the environment asks for (``os.environ`` unless ``env`` is given); a bad
        value is one line naming the variable and what it takes."""
        env = os.environ if env is None else env
        narrow = {"1": "on", "0": "off", "avx512": "avx512"}.get(env.get(NARROW_ENV, "1"))
        if narrow is None:
            raise UsageError(f"${NARROW_ENV}={env[NARROW_ENV]!r}: write 1, 0 or avx512")
        return cls(pinned=parse_pin(env.get(PIN_ENV)), narrow_attention=narrow,
                   amx_prefetch=_flag(env, PREFETCH_ENV), cpp_wrapper=_flag(env, CPP_WRAPPER_ENV),
                   cache_prepacked=_flag(env, PREPACKED_ENV), aot_graphs=_flag(env, AOT_ENV),
                   narrowest=_choice(env, NARROWEST_ENV, NARROWEST_CHOICES),
                   wide_autotune=_flag(env, WIDE_AUTOTUNE_ENV, "0"), autotune_timing=_choice(env, TIMING_ENV, TIMING_CHOICES),
                   gemm=_choice(env, GEMM_ENV, GEMM_CHOICES),
                   quiet_autotune=not any(name in env for name in INDUCTOR_TABLES_ENV))

    def record(self) -> dict:
        """For result headers and profile rows."""
        out = asdict(self)
        out["pinned"] = "/".join(self.pinned) if self.pinned else None
        return out


def parse_pin(value: str | None) -> tuple[str, str] | None:
    """``DTYPE/MODE`` as a pair; None for unset or empty."""
    if not value:
        return None
    try:
        dtype, mode = value.split("/")
    except ValueError:
        raise UsageError(f"${PIN_ENV}={value!r}: write DTYPE/MODE, e.g. float32/none") from None
    if dtype not in DTYPE_CHOICES[1:] or mode not in COMPILE_CHOICES[1:]:
        raise UsageError(f"${PIN_ENV}={value!r}: DTYPE one of {', '.join(DTYPE_CHOICES[1:])}, MODE one of "
                         f"{', '.join(COMPILE_CHOICES[1:])}")
    return dtype, mode


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The variable's value, one of ``choices`` (unset: the first)."""
    value = env.get(name, choices[0])
    if value not in choices:
        raise UsageError(f"${name}={value!r}: write {', '.join(choices[:-1])} or {choices[-1]}")
    return value


def _flag(env: Mapping[str, str], name: str, default: str = "1") -> bool:
    value = env.get(name, default)
    if value not in ("0", "1"):
        raise UsageError(f"${name}={value!r}: write 1 or 0")
    return value == "1"
