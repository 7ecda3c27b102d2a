"""Where a tree drafter's rounds stop: for each result file, over its rounds at each draft size, the share of
rounds that kept at least d drafts (d = 1..3) and the share kept at depth d given depth d - 1 was. Read from
the files' own per-round records (``choices[0].rounds``): no model forward. Under ``budget=auto`` the sizer
picks a round's size from the rounds before it, so sizes are not assigned at random: compare two methods at
the same size, not one size with another.
Usage: python depth.py RESULT.jsonl ..."""
import collections
import json
import sys
from pathlib import Path

print("| file | drafts | rounds | kept >= 1 | >= 2 | >= 3 | 2 given 1 | 3 given 2 |")
print("|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    kept = collections.defaultdict(collections.Counter)  # draft size -> accepted -> rounds
    for line in open(path):
        rec = json.loads(line)
        for turn in rec.get("choices", [{}])[0].get("rounds", []):
            for drafted, accepted in zip(turn["drafted"], turn["accepted"]):
                if drafted > 0:
                    kept[drafted][accepted] += 1
    for size, counts in sorted(kept.items()):
        n = sum(counts.values())
        if n < 100:  # too few rounds at this size to say anything
            continue
        at_least = [sum(v for a, v in counts.items() if a >= d) / n for d in (1, 2, 3)]
        given = [f"{at_least[d] / at_least[d - 1]:.3f}" if at_least[d - 1] else "-" for d in (1, 2)]
        print(f"| {Path(path).name.split('-bfloat16')[0]} | {size} | {n} | "
              + " | ".join(f"{x:.3f}" for x in at_least) + " | " + " | ".join(given) + " |")
