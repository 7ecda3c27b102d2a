#!/usr/bin/env bash
# The learned drafters' defaults re-tuned on today's engine (issue 32: Kangaroo's eta, EAGLE's tree
# depth and draft vocabulary, Medusa's tree and draft vocabulary): one interleaved compare of vanilla and
# each candidate setting on the built-in sample questions (12 questions, 14 turns, written for this
# project: not Spec-Bench's, so the defaults are not tuned on the benchmark they are judged on),
# 96 new tokens, 2 timed repeats after 1 warm-up, bfloat16 max-autotune, 2 threads, nothing compiled
# while timing. Then every bfloat16 divergence certified, and the report.
# Run from the repository root with nothing else on the machine (about 25 minutes); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-defaults
METHODS=vanilla,kangaroo,kangaroo:eta=0.3,kangaroo:eta=0.45,kangaroo:eta=0.75,kangaroo:eta=0.9
METHODS+=,eagle,eagle:depth=4,eagle:depth=3,eagle:draft_vocab=4096,eagle:depth=4:draft_vocab=4096
METHODS+=,medusa,medusa:tree=sized,medusa:tree=sized:draft_vocab=8192
python -m specharness compare --bench sample --dtype bfloat16 --compile max-autotune --threads 2 \
    --max-new-tokens 96 --repeats 2 --warmup 1 --methods "$METHODS" --out-dir "$OUT/stage1/runs" --resume \
    2>&1 | grep -v $'\r' | tee -a "$OUT/stage1/compare.log"
python -m specharness lossless --certify "$OUT/stage1/runs" 2>&1 | tee "$OUT/stage1/certify.log" \
    || echo "certify: not every divergence is certified (stage1/certify.log)"
python -m specharness report "$OUT/stage1/runs" --out "$OUT/stage1/report"
# Stage 2, the two winners combined and their neighbours, with a vanilla of their own (stage2/)
METHODS=vanilla,eagle:depth=3,eagle:depth=3:draft_vocab=4096,medusa:tree=sized:draft_vocab=8192
METHODS+=,medusa:tree=sized:draft_vocab=4096
python -m specharness compare --bench sample --dtype bfloat16 --compile max-autotune --threads 2 \
    --max-new-tokens 96 --repeats 2 --warmup 1 --methods "$METHODS" --out-dir "$OUT/stage2/runs" --resume \
    2>&1 | grep -v $'\r' | tee -a "$OUT/stage2/compare.log"
python -m specharness lossless --certify "$OUT/stage2/runs" 2>&1 | tee "$OUT/stage2/certify.log" \
    || echo "certify: not every divergence is certified (stage2/certify.log)"
python -m specharness report "$OUT/stage2/runs" --out "$OUT/stage2/report"
