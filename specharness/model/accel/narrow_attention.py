"""Attention of a few to 64 positions over a bfloat16 K/V cache: a C++ kernel of our own.

Why: past one position, ``attention took SDPA's CPU flash kernel, and that was most of what a
forward over 8 positions cost beyond a one-position step (width 8 / width 1 was 1.18 in
``results/smollm2-cpu-xeon-profile-v4``). For 24 query rows over a few hundred slots its
oneDNN calls per block cost ~50 us a layer, more with the cache cold behind the layer's weights.
The kernel (``csrc/narrow_attention.cpp``) splits each key/value head's slots between the threads,
gathers a chunk's keys once into the bfloat16 pair layout, takes the scores, the softmax (float32)
and the weighted sum, and merges the chunks per row. It has two paths:

- **AMX** (Sapphire Rapids and later), for more than 8 query rows per key/value head: both
  products on AMX tiles, the probabilities rounded to bfloat16 as SDPA rounds them. Attention
  alone, 30 layers, cold behind their weights (``results/smollm2-cpu-xeon-profile-v6/attention_amx_ab.txt``):
  width 32 over 288 slots 3.8-4.0 ms with SDPA, 2.2-2.5 here; it serves up to ``AMX_WIDTH``.
- **AVX512-BF16** dot products for the scores and float32 FMAs for the weighted sum, for a few rows
  (and every width up to ``FMA_WIDTH`` where there is no AMX, or ``EngineOptions.narrow_attention`` is ``avx512``; SDPA
  serves wider): width 8 of the full model 17.98 ->
  17.50 ms at context 256 (``results/smollm2-cpu-xeon-profile-v5/narrow_attention_ab.txt``); its
  FMAs lose to SDPA's AMX GEMMs past 16 positions.

It is built on first use with torch's C++ extension loader (a C++ compiler and ninja: the same
compiler inductor needs) into ``cache_root()/kernels``, keyed by the source, the flags, torch's version and
the compiler's identity (a changed compiler rebuilds rather than loading a stale library), and
registered as ``torch.ops.specharness.narrow_attention`` with a fake kernel, so compiled graphs
of a static width call it as one extern op (the dynamic-width graph of prefills keeps SDPA: a width
test there would be a guard, and a prompt on its other side a recompile while timing). Where it cannot be used (no AVX512-BF16, another head size, no compiler,
a failed build: one line on stderr says which), ``available`` is False and attention keeps SDPA.
A CPU with AVX2 and no AVX512-BF16 builds the library without this kernel (``LIBRARIES``: the linear
kernel alone, on float32 FMAs), so there too attention keeps SDPA.
If the op raises at run time (eagerly or inside a compiled graph), ``TargetModel.run_with_fallback``
reruns that forward on SDPA, ``record_failure`` says so in one line, and SDPA serves for the rest of
the process (result headers record ``narrow_attention: "sdpa (fallback: ...)"``).
``EngineOptions.narrow_attention`` (``SPECHARNESS_NARROW_ATTENTION=0``) switches it off; ``avx512`` keeps it off AMX.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import torch

from ...engine_options import NARROW_ENV
from ...errors import exception_line
from ...paths import cache_root

try:
    import fcntl
except ImportError:  # not POSIX: builds are not serialised (torch's own lock file still is)
    fcntl = None

AMX_WIDTH = 64  # the widest forward the AMX path takes (the profile's widest; a prefill keeps SDPA's blocked kernel)
FMA_WIDTH = 8  # ... and the AVX512-BF16 path: at 16 it only ties SDPA, whose AMX GEMMs win wider
AMX_ROWS = 9  # query rows per key/value head from which AMX serves: more than half of a 16-row tile
HEAD_DIMS = (64, 128)
SOURCE = Path(__file__).with_name("csrc") / "narrow_attention.cpp"
# one library holds the engine's C++ ops, built and loaded together; which build, by the CPU's kind
# (``library``): (its sources, its compiler flags, what it holds)
# Its sources include ATen and torch/library.h, not torch/extension.h: pybind11 and torch's whole C++
# API made a build 46 s on the 2-core AVX512-BF16 EPYC, 16 s without them; the AVX2 build 34 -> 14 s.
LIBRARIES = {
    "avx512-bf16": ((SOURCE, SOURCE.with_name("narrow_linear.cpp"), SOURCE.with_name("row_topk.cpp")),
                    ["-O3", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx512bf16", "-mamx-tile",
                     "-mamx-bf16", "-mfma", "-fopenmp"], "narrow attention, linear and row top-k"),
    # no bfloat16 dot products: the linear kernel on float32 FMAs and the row top-k; no attention kernel (SDPA)
    "avx2": ((SOURCE.with_name("narrow_linear_avx2.cpp"), SOURCE.with_name("row_topk.cpp")),
             ["-O3", "-mavx2", "-mfma", "-fopenmp"], "narrow linear and row top-k, AVX2"),
}
HEADERS = (SOURCE.with_name("narrow_linear_args.h"),)  # included by both builds: copied beside them, in the key

_state: dict[str, object] = {}  # "loaded": bool, once tried; "why": the reason it is not; "failed": a run-time failure;
# "building": (thread, its result) while build_in_background runs


@functools.cache
def compiler_identity() -> str:
    """The C++ compiler torch's extension loader will call ($CXX, else c++): its resolved path and
    the first line of its ``--version``, asked once per process, so a changed compiler changes the
    build key; "" where there is none (the build then fails and says so)."""
    from torch.utils import cpp_extension
    path = shutil.which(cpp_extension.get_cxx_compiler())
    if path is None:
        return ""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return f"{os.path.realpath(path)} {out.strip().splitlines()[0] if out.strip() else ''}"


def library() -> str | None:
    """The build of the engine's C++ library this CPU takes (a key of ``LIBRARIES``): "avx512-bf16"
    where it has bfloat16 dot products, else "avx2" where torch runs AVX2 kernels (AVX2 and FMA), else
    None."""
    if torch.cpu._is_avx512_bf16_supported():
        return "avx512-bf16"
    return "avx2" if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else None


def build_key(kind: str | None = None) -> str:
    """What a build of library ``kind`` (this CPU's by default) is keyed by: the sources and headers,
    the flags, torch's version and the compiler."""
    sources, flags, _ = LIBRARIES[kind or library()]
    key = (b"".join(path.read_bytes() for path in (*sources, *HEADERS)) + " ".join(flags).encode() + torch.__version__.encode()
           + compiler_identity().encode())
    return hashlib.sha256(key).hexdigest()[:12]


@contextlib.contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Held while building and loading the kernel: an OS lock, released even when its process is
    killed. Why: torch's loader marks a build with a ``lock`` file and waits, forever, for any
    ``lock`` it finds to go; a build killed mid-compile (Ctrl-C, a killed job) leaves one, and every
    later run hung on it. Under this lock no other build runs, so a ``lock`` found is stale and goes."""
    with open(build_dir / "build.flock", "a") as held:
        if fcntl is not None:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"engine: waiting for another process building the narrow attention kernel in {build_dir}",
                      file=sys.stderr)
                fcntl.flock(held, fcntl.LOCK_EX)
            stale = build_dir / "lock"
            if stale.exists():
                print(f"engine: removing {stale}, left by an interrupted build", file=sys.stderr)
                stale.unlink(missing_ok=True)
        yield


def build_sources(build_dir: Path, kind: str) -> list[Path]:
    """Library ``kind``'s sources (and the headers they include), copied into their build directory
    (once: the directory is keyed by them), so the compile command is the same from every checkout:
    built from the checkout's own path, each clone's different path made ninja rebuild it (30 s) when
    another checkout had built it. Returns the sources to compile."""
    sources = LIBRARIES[kind][0]
    for path in (*sources, *HEADERS):
        copy = build_dir / path.name
        if not copy.exists() or copy.read_bytes() != path.read_bytes():
            shutil.copyfile(path, copy)
    return [build_dir / source.name for source in sources]


def _ninja_on_path() -> None:
    """The pip package's ninja binary, which cpp_extension runs, on PATH (set from the main thread: a
    thread's setenv can race the C library's getenv)."""
    try:
        import ninja
    except ImportError:
        return
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def _build() -> str | None:
    """Build and load this CPU's library once per process; None when it loaded, else why not (one line)."""
    kind = library()
    if kind is None:
        return f"this CPU has neither AVX512-BF16 nor AVX2 (torch's CPU capability: {torch.backends.cpu.get_cpu_capability()})"
    try:  # no compiler, no ninja, a compile error, a cache it cannot write: SDPA still works
        _compile_and_load(kind)
    except Exception as exc:
        return f"its build failed ({exception_line(exc)})"
    if kind == "avx512-bf16":
        torch.library.register_fake("specharness::narrow_attention")(_fake)  # narrow_linear registers its own
    return None


def _compile_and_load(kind: str) -> None:
    _ninja_on_path()
    from torch.utils import cpp_extension
    _, flags, holds = LIBRARIES[kind]
    digest = build_key(kind)
    build_dir = cache_root() / "kernels" / f"narrow_attention-{digest}"
    build_dir.mkdir(parents=True, exist_ok=True)
    # its real path: ninja rebuilds (~15 s of both cores) whenever its compile command's
    # paths change, and a cache reached through a symlink (the test suite's temporary caches) named it anew
    build_dir = build_dir.resolve()
    name = f"specharness_narrow_attention_{digest}"
    if not (build_dir / f"{name}.so").exists():
        print(f"engine: building the engine's C++ kernels ({holds}) into {build_dir} (once, about 15 s)", file=sys.stderr)
    with build_lock(build_dir):
        cpp_extension.load(name, [str(path) for path in build_sources(build_dir, kind)], extra_cflags=flags,
                           extra_ldflags=["-fopenmp"], build_directory=str(build_dir), is_python_module=False)


def _fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, bias: torch.Tensor, scale: float,
          amx: bool) -> torch.Tensor:
    return q.new_empty(q.shape, dtype=torch.float32)


def build_in_background(mode: str = "on") -> None:
    """Start building the op in a thread, so the compiler's ~15 s of both cores overlap what the caller
    does meanwhile (a first run converts the model's GGUF file on the other core: ~20 s on the 2-core
    EPYC); ``available`` waits for it. A no-op where it is built, being built, or cannot be."""
    if mode == "off" or "loaded" in _state or "building" in _state or library() is None:
        return
    _ninja_on_path()
    done: dict[str, str | None] = {}

    def build() -> None:
        done["why"] = _build()

    thread = threading.Thread(target=build, name="narrow-attention-build", daemon=True)
    _state["building"] = (thread, done)
    thread.start()


def available(device: torch.device, head_dim: int, mode: str = "on") -> bool:
    """Whether attention may call the kernel here (building it on the first ask, or waiting for the
    build ``build_in_background`` started); ``mode`` is ``EngineOptions.narrow_attention`` ("off": never)."""
    if device.type != "cpu" or head_dim not in HEAD_DIMS or mode == "off":
        return False
    return loaded() and library() == "avx512-bf16"


def is_loaded() -> bool:
    """Whether the library is loaded in this process already; never builds it nor waits for a build."""
    return bool(_state.get("loaded"))


def loaded() -> bool:
    """Whether the engine's C++ library (this kernel, ``narrow_linear``'s and ``row_topk``'s) is loaded in this
    process, building it on the first ask or waiting for the build ``build_in_background`` started."""
    if "loaded" not in _state:
        building = _state.pop("building", None)
        if building:
            thread, done = building  # type: ignore[misc]
            thread.join()
            why = done.get("why", "its build thread ended without a result")
        else:
            why = _build()
        _state.update(loaded=why is None, why=why)
        if why:
            print(f"engine: the engine's C++ kernels are unavailable: {why}; SDPA serves every width (and oneDNN or "
                  "inductor every linear layer)", file=sys.stderr)
    return bool(_state["loaded"])


def kind(mode: str = "on") -> str:
    """The path a target made now takes: "amx" where the CPU has AMX and the OS grants this process
    its tile state (``torch.cpu._init_amx`` asks Linux once), unless ``mode`` is "avx512"; else
    "avx512-bf16"."""
    return "amx" if mode != "avx512" and torch.cpu._init_amx() else "avx512-bf16"


def max_width(kind: str) -> int:
    """The widest forward the kernel's ``kind`` path takes."""
    return AMX_WIDTH if kind == "amx" else FMA_WIDTH


def narrow_attention(rows: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, bias: torch.Tensor,
                     kind: str = "avx512-bf16") -> torch.Tensor:
    """Each key/value head's query rows ([Hkv, g*T, d], bfloat16) over the first ``bias.shape[1]``
    cache slots under ``bias`` ([T, n]: row r takes bias row r % T; 0 and -inf are exact in
    bfloat16, the engine's bias dtype, so a layer converts nothing); [Hkv, g*T, d] float32.
    The "amx" ``kind`` multiplies on AMX tiles from ``AMX_ROWS`` rows on."""
    amx = kind == "amx" and rows.shape[1] >= AMX_ROWS
    return torch.ops.specharness.narrow_attention(rows.contiguous(), k_cache, v_cache,
                                                  bias.to(torch.bfloat16).contiguous(), rows.shape[-1] ** -0.5, amx)


def reason() -> str | None:
    """Why the attention kernel is unavailable in this process, once ``available`` has tried it: the
    library's failure, or a CPU whose build of the library has no attention kernel."""
    if is_loaded() and library() != "avx512-bf16":
        return "this CPU has no AVX512-BF16 (its build of the engine's library has no attention kernel)"
    return _state.get("why")  # type: ignore[return-value]


def record_failure(line: str) -> None:
    """Note, once per process and in one line on stderr, that the op raised at run time (``line``:
    ``errors.exception_line`` of it); targets built afterwards choose SDPA (``failure``)."""
    from tqdm import tqdm  # its write keeps the line off a progress bar's, and redraws the bar
    if "failed" not in _state:
        _state["failed"] = line
        tqdm.write(f"engine: the narrow attention kernel failed ({line}); SDPA serves every width from now on "
                   f"({NARROW_ENV}=0 skips the kernel)", file=sys.stderr)


def failure() -> str | None:
    """The op's run-time failure in this process (one line), if it has failed."""
    return _state.get("failed")  # type: ignore[return-value]
