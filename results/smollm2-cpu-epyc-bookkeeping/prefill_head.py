"""A prefill with the LM head at every prompt position (before 63faa44) against the head at the
last position alone (what a run's prefill does now): one process, both dynamic-width graphs
compiled first, the two interleaved at each prompt length. Writes prefill_head.md beside it.

Run from the repository root: python results/smollm2-cpu-epyc-bookkeeping/prefill_head.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from specharness.model.engine_choice import cpu_name, random_ids
from specharness.results import provenance
from specharness.session import EngineRequest, Session

LENGTHS = (64, 128, 256, 512, 1024)
REPEATS = 9


def main() -> None:
    session = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
    target = session.target
    out = Path(__file__).with_name("prefill_head.md")
    rows = []
    with torch.inference_mode():
        cache = target.new_cache(max(LENGTHS) + 128)

        def prefill(ids, last: bool) -> float:
            cache.crop(0)
            start = time.perf_counter()
            target.forward(ids, cache, 0, head=True, prefill=True, last=last)
            return time.perf_counter() - start

        for last in (False, True):  # both graphs built (or loaded) before anything is timed
            prefill(random_ids(target, 96, 0), last)
        for n in LENGTHS:
            ids = random_ids(target, n, 1)
            for last in (False, True):
                prefill(ids, last)  # warm at this length
            times: dict[bool, list[float]] = {False: [], True: []}
            for r in range(REPEATS):
                for last in ((False, True) if r % 2 == 0 else (True, False)):
                    times[last].append(prefill(ids, last))
            every, alone = (1e3 * statistics.median(times[k]) for k in (False, True))
            ratios = sorted(a / b for a, b in zip(times[False], times[True]))
            rows.append(f"| {n} | {every:.1f} | {alone:.1f} | {every / alone:.3f} | "
                        f"{ratios[1]:.3f}-{ratios[-2]:.3f} | {(every - alone) / n * 1e3:.0f} |")
            print(rows[-1], file=sys.stderr)
    p = provenance()
    head = (f"# Prefill: the LM head at every position against the last alone\n\n"
            f"Command: `python {Path(__file__).relative_to(Path.cwd())}` (commit {p.get('git_commit')}, torch "
            f"{torch.__version__}, transformers {p.get('transformers')}, {cpu_name()}, 2 threads, bfloat16 "
            f"max-autotune, SmolLM2-135M-Instruct; {REPEATS} interleaved repeats per length after warm-up).\n\n"
            "| prompt tokens | every position (ms, median) | last alone (ms, median) | ratio of medians | "
            "paired ratios, 2nd lowest-2nd highest | saved per prompt token (us) |\n|---|---|---|---|---|---|\n")
    out.write_text(head + "\n".join(rows) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
