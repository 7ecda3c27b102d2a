#!/usr/bin/env bash
# Token Recycling's draft vocabulary (issue 32: a round's bookkeeping <= 0.5 ms; recycling's was 0.52-0.64,
# most of it one topk over every verified node's full-vocabulary logits): one interleaved compare of vanilla
# and recycling with its successors taken among all tokens or the 4096 / 8192 / 16384 the target writes most
# often, on the built-in sample questions (12 questions, 14 turns, written for this project: not
# Spec-Bench's, so the default is not tuned on the benchmark it is judged on), 96 new tokens, 2 timed
# repeats after 1 warm-up, bfloat16 max-autotune, 2 threads, nothing compiled while timing; then every
# bfloat16 divergence certified, and the report. Repository root, nothing else running (about 10 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/smollm2-cpu-epyc-recycling-vocab}
python -m specharness compare --bench sample --dtype bfloat16 --compile max-autotune --threads 2 \
    --max-new-tokens 96 --repeats 2 --warmup 1 --out-dir "$OUT/runs" --resume \
    --methods vanilla,recycling:draft_vocab=0,recycling:draft_vocab=4096,recycling:draft_vocab=8192,recycling:draft_vocab=16384 \
    2>&1 | grep -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log)"
python -m specharness report "$OUT/runs" --out "$OUT/report"
