"""Paired Wilcoxon tests between this run's files (the report pairs only different methods with vanilla).

usage: python paired.py RUNS_DIR   (prints A, B, questions, A/B speed at the median question, p two-sided, p A faster)
"""
import itertools
import sys
from pathlib import Path

from specharness import results, stats

files = sorted(Path(sys.argv[1]).glob("*.jsonl"))
recs = {f.name.split("-bfloat16")[0]: results.read_results(f)[1] for f in files}
for (a, ra), (b, rb) in itertools.combinations(recs.items(), 2):
    pt = stats.paired_test(ra, rb)
    print(f"{a} vs {b}: {pt.n} questions, A/B speed {pt.a_over_b_speed:.3f}, p {pt.p_two_sided:.3g} "
          f"(A faster {pt.p_a_faster:.3g})")
