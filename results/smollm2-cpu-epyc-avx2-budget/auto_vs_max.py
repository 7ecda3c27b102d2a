"""Each method's budget=auto against its own budget=max, paired over the questions both ran: the ratio of
throughputs with the harness's paired BCa bootstrap interval, and a Wilcoxon signed-rank test on per-question
time-per-token ratios (specharness.stats; the report pairs each method with vanilla only).

usage: python auto_vs_max.py RUNS_DIR
"""
import sys
from pathlib import Path

from specharness import results, stats

runs = Path(sys.argv[1])
for auto_file in sorted(runs.glob("*-budget=auto-*.jsonl")):
    method = auto_file.name.split("-budget=auto")[0]
    max_file = next(runs.glob(f"{method}-bfloat16-*.jsonl"))
    auto, own = results.read_results(auto_file)[1], results.read_results(max_file)[1]
    ci = stats.speedup_ci(stats.pair(auto, own))
    test = stats.paired_test(auto, own)
    print(f"{method}: auto / max throughput {ci.value:.3f} [{ci.low:.3f}, {ci.high:.3f}] over {test.n} questions; "
          f"at the median question {test.a_over_b_speed:.3f}, Wilcoxon p {test.p_two_sided:.2g} "
          f"(auto faster: {test.p_a_faster:.2g})")
