"""Tokens per round (kept drafts + 1) by each round's draft size under budget=auto, for each result file: the
heads' acceptance at equal tree size, which a CR pooled over rounds of different sizes hides.

    python results/smollm2-eagle3-bf16-data/tokens_by_size.py results/smollm2-eagle3-bf16-data/runs
"""
import collections, sys
from pathlib import Path
from specharness.results import iter_result_files, read_results

for f in iter_result_files(Path(sys.argv[1])):
    got = collections.defaultdict(list)
    for record in read_results(f)[1]:
        for t in record.rounds:
            for i in range(1, len(t.drafted)):
                size = t.budget[i] if t.budget else t.drafted[i]
                got[size].append(1 + t.accepted[i])
    n = sum(len(v) for v in got.values())
    allr = [x for v in got.values() for x in v]
    print(f.name.split('-bfloat16')[0], f"all {sum(allr)/len(allr):.3f} ({n})", "; ".join(
        f"size {s}: {sum(v)/len(v):.3f} ({100*len(v)/n:.0f}%)" for s, v in sorted(got.items())))
