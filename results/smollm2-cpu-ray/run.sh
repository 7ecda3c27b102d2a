#!/usr/bin/env bash
# The Ray executor's scaling check (issue 14): the same questions and methods on a local Ray cluster,
# once with 1 worker x 1 thread and once with 2 workers x 1 thread, on this 2-core machine. The wall
# time compared is the executor's run_s (questions handed out to results written; model loading and
# warm-up excluded), recorded in each result file's header. Outputs must be identical token for token.
# The engine is pinned to float32 eager so that no worker spends minutes compiling: this measures the
# executor, not the kernels.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-ray
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
for n in 1 2; do
    python -m specharness compare --executor ray --workers "$n" --methods vanilla,pld \
        --bench-file "$BENCH" --limit 2 --max-new-tokens 64 --repeats 1 --warmup 1 --threads 1 \
        --dtype float32 --compile none --out-dir "$OUT/workers-$n" --overwrite
done
python - "$OUT" <<'PY' | tee "$OUT/summary.md"
import json, sys
from pathlib import Path
from specharness.results import read_results
root = Path(sys.argv[1])
def load(n, method):
    meta, recs = read_results(next((root / f"workers-{n}").glob(f"{method}-*.jsonl")))
    return meta, {r.question_id: r.token_ids for r in recs}, recs
m1, o1, r1 = load(1, "vanilla")
m2, o2, r2 = load(2, "vanilla")
p1, p2 = load(1, "pld")[1], load(2, "pld")[1]
s1, s2 = m1["executor"]["run_s"], m2["executor"]["run_s"]
workers = sorted({json.dumps(r.worker, sort_keys=True) for r in r2})
print("# Ray executor: 2 workers x 1 thread against 1 worker x 1 thread\n")
print(f"Command: `bash {root}/run.sh` (commit {m2['git_commit'][:10]}, torch {m2['torch']}, "
      f"transformers {m2['transformers']}, {m2['model']}, {m2['dtype']}, {m2['device']}).\n")
print(f"| Workers | Questions | run_s | Retries |\n|---|---|---|---|")
print(f"| 1 | {len(o1)} | {s1:.1f} | {m1['executor']['retries']} |")
print(f"| 2 | {len(o2)} | {s2:.1f} | {m2['executor']['retries']} |\n")
print(f"Wall-time ratio (1 worker / 2 workers): **{s1 / s2:.2f}x** (aim: >= 1.7x).\n")
same = o1 == o2 and p1 == p2
print(f"Outputs identical across the two runs (vanilla and pld, every question and turn): **{same}**.\n")
print(f"Workers seen in the 2-worker run: {len(workers)} distinct hardware records.")
PY
