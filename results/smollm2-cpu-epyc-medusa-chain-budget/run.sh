#!/usr/bin/env bash
# Medusa's chain at its full length (budget=max) against budget=auto, with vanilla, on the Spec-Bench questions the
# tables never ran (the 11th to 20th of each subtask; ../smollm2-cpu-epyc-eagle-budget/held_apart.py).
# ../smollm2-cpu-epyc-tree-budget made budget=auto Medusa's default for its trees; the option is the method's, so
# the chain (tree=chain) took it too, unmeasured. This run measures it. n10-v7's settings: 128 new tokens, greedy,
# 1 warm-up and 2 timed repeats, rotating order, 2 threads, the default engine (bfloat16 max-autotune here). Every
# option is named. Run from anywhere on a quiet machine (~15 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-medusa-chain-budget}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
CHAIN=tree=chain:draft_vocab=4096
python -m specharness compare --methods "vanilla,medusa:$CHAIN:budget=max,medusa:$CHAIN:budget=auto" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
