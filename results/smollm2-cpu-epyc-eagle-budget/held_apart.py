"""Spec-Bench's questions LO..HI-1 of each subtask (file order), written as a question file: questions the
tables (the first 10 of each subtask) never ran. Usage: python held_apart.py BENCH OUT LO HI"""
import json
import sys
from collections import defaultdict

from specharness.tasks.specbench import subtask_of

bench, out, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
seen: dict[str, int] = defaultdict(int)
with open(bench) as src, open(out, "w") as dst:
    for line in src:
        sub = subtask_of(json.loads(line)["category"])
        if lo <= seen[sub] < hi:
            dst.write(line)
        seen[sub] += 1
