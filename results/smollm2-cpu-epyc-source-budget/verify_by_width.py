"""What a verification forward cost in the run, by width bucket (median of every round's ``verify_s``), beside
what ``budget=auto`` calibrated after warm-up (``warmup.budget`` in the headers), and each source's sizes.

    python results/smollm2-cpu-epyc-source-budget/verify_by_width.py results/smollm2-cpu-epyc-source-budget/runs
"""

from __future__ import annotations

import collections
import statistics
import sys
from pathlib import Path

from specharness.model import WIDTH_BUCKETS
from specharness.results import iter_result_files, read_meta, read_results


def bucket(width: int) -> int:
    return next(b for b in WIDTH_BUCKETS if b >= max(2, width))  # the EPYC's narrowest graph is 2 wide


def main(runs: Path) -> None:
    calibrated = {}
    for f in iter_result_files(runs):
        calibrated.update(read_meta(f).get("warmup", {}).get("budget") or {})
    print("calibrated verify ms (warm-up, context 256):")
    for label, c in calibrated.items():
        print(f"  {label}: {c['verify_ms']}")
    print("in the run: median verify ms by width bucket (rounds after the prefill); sizes by source under budget=auto")
    for f in iter_result_files(runs):
        by_width, sizes = collections.defaultdict(list), collections.Counter()
        for record in read_results(f)[1]:
            for t in record.rounds:
                for i, width in enumerate(t.widths()[1:], 1):
                    by_width[bucket(width)].append(t.verify_s[i])
                    if t.budget and t.drafted[i]:
                        sizes[((t.source or [""] * len(t.drafted))[i], t.budget[i])] += 1
        widths = {w: round(1e3 * statistics.median(v), 2) for w, v in sorted(by_width.items())}
        print(f"  {f.name.split('-bfloat16')[0]}: {widths}")
        for source in sorted({s for s, _ in sizes}):
            n = sum(c for (s, _), c in sizes.items() if s == source)
            print(f"    {source or '-'}: " + ", ".join(f"size {b} {100 * c / n:.0f}%" for (s, b), c in sorted(sizes.items())
                                              if s == source))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
