#!/usr/bin/env bash
# Kangaroo's option first_eta on a CPU with AVX2 only: a round whose first draft's top-1 probability is <= first_eta
# verifies the current token alone (width 1 from the exit layer) instead of proposing a draft that is rarely kept.
# One interleaved compare: vanilla, kangaroo as the paper (first_eta=0) and at first_eta 0.2 and 0.35 (FIRST), every other
# option named at its default. Spec-Bench, LIMIT questions per subtask (default 6), 128 new tokens, greedy,
# 1 warm-up + 2 timed repeats, rotating order, 2 threads, the default engine. Then certify and report. Resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-avx2-kangaroo-first-eta}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
KAN=kangaroo:exit_layer=2:eta=0.6:gamma=3:budget=max
METHODS=vanilla
for x in ${FIRST:-0 0.2 0.35}; do METHODS+=",$KAN:first_eta=$x"; done  # FIRST="0.35 0.5 0.65" OUT=...: higher/
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-6}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
