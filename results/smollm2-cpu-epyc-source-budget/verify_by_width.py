"""What a verification forward cost in the run, by width bucket (median of every round's ``verify_s``), beside
what ``budget=auto`` calibrated after warm-up (``warmup.budget`` in the headers), and each source's sizes.

    python results/smollm2-cpu-epyc-source-budget/verify_by_width.py results/smollm2-cpu-epyc-source-budget/runs
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
from pathlib import Path


def bucket(width: int) -> int:
    return next(b for b in (2, 4, 8, 16) if width <= b)  # the EPYC's narrowest graph is 2 wide


def main(runs: Path) -> None:
    calibrated = {}
    for meta in sorted(runs.glob("*.meta.json")):
        calibrated.update(json.loads(meta.read_text()).get("warmup", {}).get("budget") or {})
    print("calibrated verify ms (warm-up, context 256):")
    for label, c in calibrated.items():
        print(f"  {label}: {c['verify_ms']}")
    print("in the run: median verify ms by width bucket (rounds after the prefill); sizes by source under budget=auto")
    for f in sorted(runs.glob("*.jsonl")):
        by_width, sizes = collections.defaultdict(list), collections.Counter()
        for line in f.open():
            for rounds in json.loads(line)["choices"][0]["rounds"]:
                for i in range(1, len(rounds["drafted"])):
                    by_width[bucket(rounds["width"][i])].append(rounds["verify_s"][i])
                    if "budget" in rounds and rounds["drafted"][i]:
                        sizes[((rounds.get("source") or [""] * len(rounds["drafted"]))[i], rounds["budget"][i])] += 1
        widths = {w: round(1e3 * statistics.median(v), 2) for w, v in sorted(by_width.items())}
        print(f"  {f.name.split('-bfloat16')[0]}: {widths}")
        for source in sorted({s for s, _ in sizes}):
            n = sum(c for (s, _), c in sizes.items() if s == source)
            print(f"    {source or '-'}: " + ", ".join(f"size {b} {100 * c / n:.0f}%" for (s, b), c in sorted(sizes.items())
                                              if s == source))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
