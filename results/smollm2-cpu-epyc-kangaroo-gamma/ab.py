"""gamma 3 against gamma 6, question by question, from this folder's run (both interleaved with vanilla):
the Wilcoxon signed-rank test on log(time per token) and the ratio at the median question."""
import json
import math
import os
import statistics

from scipy.stats import wilcoxon

here = os.path.dirname(os.path.abspath(__file__))


def per_token(name: str) -> dict[str, float]:
    out = {}
    for line in open(os.path.join(here, "runs", name)):
        r = json.loads(line)
        c = r["choices"][0]
        out[r["question_id"]] = sum(c["wall_time"]) / sum(c["new_tokens"])
    return out


g6 = per_token("kangaroo-bfloat16-max-autotune-temp0-n128.jsonl")
g3 = per_token("kangaroo-gamma=3-bfloat16-max-autotune-temp0-n128.jsonl")
logs = [math.log(g6[q] / g3[q]) for q in sorted(g6.keys() & g3.keys())]
test = wilcoxon(logs)
print(f"questions {len(logs)}; gamma 3 / gamma 6 speed at the median question {math.exp(statistics.median(logs)):.3f}; "
      f"mean of logs {math.exp(statistics.fmean(logs)):.3f}; Wilcoxon two-sided p {test.pvalue:.3f}")
