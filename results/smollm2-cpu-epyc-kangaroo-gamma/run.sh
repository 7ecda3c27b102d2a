#!/usr/bin/env bash
# Kangaroo's gamma (most draft tokens a round): 6 (the paper's, the default until this folder) against 3,
# interleaved with vanilla in one compare on Spec-Bench, 10 questions per subtask (MT-bench both turns:
# 70 turns), 128 new tokens, the engine's default (bfloat16 max-autotune here), 2 threads, 1 warm-up and
# 2 timed repeats per method, rotating order, nothing compiled while timing. Then every bfloat16
# divergence certified and the report. Why 3: across every committed Kangaroo file at eta 0.6 the shipped
# adapter drafted 4 or more tokens in 0.1-0.8% of rounds and had 4+ accepted in at most 4 rounds of a
# file (rounds.py: CR at most 0.005 lower with a cap of 3, an estimate); a cap of 3 spares the deep layers' width-8 graph. Run with nothing else on the machine
# (about 20 minutes); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-kangaroo-gamma
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python -m specharness compare --methods vanilla,kangaroo:gamma=6,kangaroo:gamma=3 --bench-file "$BENCH" \
    --limit "${LIMIT:-10}" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log)"
python -m specharness report "$OUT/runs" --out "$OUT/report"
python "$OUT/rounds.py" | tee "$OUT/rounds.txt"
python "$OUT/ab.py" | tee "$OUT/ab.txt"
