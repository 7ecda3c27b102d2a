#!/usr/bin/env bash
# EAGLE's tree at its own size (budget=max) against budget=auto, with vanilla, on Spec-Bench questions the tables
# never ran (the 11th to 20th of each subtask; held_apart.py). ../smollm2-cpu-epyc-n10-v7-rest measured
# budget=auto at 1.067x against 1.017x on the table's own questions; this run asks whether that holds on others
# before budget=auto becomes eagle's default. n10-v7's settings: 128 new tokens, greedy, 1 warm-up and 2 timed
# repeats, rotating order, 2 threads, the default engine (bfloat16 max-autotune here). Every option is named.
# Run from anywhere on a quiet machine (~20 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-eagle-budget}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python "$OUT/held_apart.py" "$BENCH" "$OUT/questions.jsonl" 10 20
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096
python -m specharness compare --methods "vanilla,eagle:$EAGLE:budget=max,eagle:$EAGLE:budget=auto" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
