"""One graph store package built in a child process: ``python -m specharness.model.graph_build SPEC``.

Why a child: inductor's lowering, its C++ code generation and the compiler calls it waits on run on
one core (a SmolLM2 graph: ~70 s of wall time at ~100% of one CPU on a 2-core EPYC). The parent
exports each graph (it holds the model) and hands the exported program to a child; two children build
two packages at once, and the parent's untimed warm-up forwards run eagerly meanwhile
(``CompiledBackend.in_background``).

SPEC is a JSON file written by ``GraphStore.start``: the exported program's file, the package to
write (built under a ``.building.pt2`` name, renamed when whole), its record, inductor's settings and
the parent's engine settings that change kernels (threads, the AMX prefetch edit, our attention
kernel, how autotune times its choices). Exit status 0: the package is in place; else the last stderr line says why.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path


def package(program, spec: dict) -> None:
    """Build ``program``'s package where ``spec`` says (the child's work; also the run's own, in process,
    for a graph nothing else waits on): under a ``.building.pt2`` name, renamed when whole, its record
    beside it."""
    import torch
    started = time.perf_counter()
    part, path = Path(spec["part"]), Path(spec["package"])
    with warnings.catch_warnings():  # max-autotune's benchmark code trips torch's own TypedStorage warning
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
        # under inference mode, as the engine's forwards run: built outside it, SmolLM2's width-8
        # package ran at 15.1 ms a forward against 10.4 ms (results/smollm2-cpu-epyc-first-run)
        with torch.inference_mode():
            torch._inductor.aoti_compile_and_package(program, package_path=str(part), inductor_configs=spec["configs"])
    part.replace(path)  # whole or absent: an interrupted build leaves no package to load
    from ..paths import write_text_atomic
    record = {**spec["record"], "build_s": round(time.perf_counter() - started + spec["export_s"], 1)}
    write_text_atomic(path.with_suffix(".json"), json.dumps(record, indent=1, sort_keys=True))


def build(spec: dict) -> None:
    """The child: the parent's engine settings that change kernels, then the saved program's package."""
    import torch
    torch.set_num_threads(spec["threads"])  # the kernels' thread count, and what max-autotune times with
    import torch._inductor.config as inductor_config
    if spec["quiet_autotune"]:
        inductor_config.autotune_num_choices_displayed = 0
        inductor_config.max_autotune_report_choices_stats = False
    if "max_autotune" in spec["configs"]:  # one kernel timed at a time, beside the other builds
        from .accel import autotune_timing
        autotune_timing.install(spec["autotune_timing"])
    if spec["amx_prefetch"]:
        from .accel import amx_prefetch
        amx_prefetch.install(True)
    if spec["narrow_attention"] != "off":  # the program may call our op: it must be registered to load
        from .accel import narrow_attention
        narrow_attention.available(torch.device("cpu"), narrow_attention.HEAD_DIMS[0], spec["narrow_attention"])
    if spec.get("narrow_linear"):  # our linear op: its fake kernel is narrow_linear's own to register (without
        # it every such build failed, and the run compiled that graph with torch.compile instead, every run)
        from .accel import narrow_linear
        if not narrow_linear.available(torch.device("cpu")):
            raise RuntimeError("the program calls specharness::narrow_linear, but the engine's C++ library did not load")
    package(torch.export.load(spec["program"]), spec)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    try:
        build(spec)
    except Exception as exc:  # the parent reads the last line and falls back to torch.compile
        from ..errors import exception_line
        print(f"graph build failed: {exception_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
