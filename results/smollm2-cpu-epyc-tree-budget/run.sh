#!/usr/bin/env bash
# EAGLE-3's tree and Medusa's sized tree, each at its own size (budget=max) and with budget=auto, with vanilla, on
# the Spec-Bench questions ../smollm2-cpu-epyc-eagle-budget ran (the 11th to 20th of each subtask, never in a table;
# its held_apart.py). That run made budget=auto eagle's default (1.04x against 0.97x); these two draft trees the
# same way and kept budget=max until measured. n10-v7's settings and options: 128 new tokens, greedy, 1 warm-up and
# 2 timed repeats, rotating order, 2 threads, the default engine (bfloat16 max-autotune here). Every option is named.
# Run from anywhere on a quiet machine (~25 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-tree-budget}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096
MEDUSA=tree=sized:tree_size=7:draft_vocab=4096
METHODS=vanilla,eagle3:$EAGLE:budget=max,eagle3:$EAGLE:budget=auto,medusa:$MEDUSA:budget=max,medusa:$MEDUSA:budget=auto
python -m specharness compare --methods "$METHODS" --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 \
    --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' \
    | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
