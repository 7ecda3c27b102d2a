#!/usr/bin/env bash
# The learned drafters' defaults re-tuned on today's engine (issue 32: Kangaroo's eta, EAGLE's tree
# depth and draft vocabulary, Medusa's tree and draft vocabulary): one interleaved compare of vanilla and
# each candidate setting on the built-in sample questions (12 questions, 14 turns, written for this
# project: not Spec-Bench's, so the defaults are not tuned on the benchmark they are judged on),
# 96 new tokens, 2 timed repeats after 1 warm-up, bfloat16 max-autotune, 2 threads, nothing compiled
# while timing. Then every bfloat16 divergence certified, and the report.
# Run from the repository root with nothing else on the machine (about 25 minutes). Rerunning resumes what this
# script wrote; the committed runs carry shorter names (below), so a rerun here writes new files beside them:
# point OUT at a new folder to retake it.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/smollm2-cpu-epyc-defaults}
# one stage: an interleaved compare of vanilla and the variants, its certify and its report, in $OUT/$1
stage() {
    python -m specharness compare --bench sample --dtype bfloat16 --compile max-autotune --threads 2 \
        --max-new-tokens 96 --repeats 2 --warmup 1 --methods "$2" --out-dir "$OUT/$1/runs" --resume \
        2>&1 | grep -v $'\r' | tee -a "$OUT/$1/compare.log"
    python -m specharness lossless --certify "$OUT/$1/runs" 2>&1 | tee "$OUT/$1/certify.log" \
        || echo "certify: not every divergence is certified ($1/certify.log)"
    python -m specharness report "$OUT/$1/runs" --out "$OUT/$1/report"
}
# Every option is named: the defaults this run chose are no longer the ones it started from (EAGLE depth 5
# over its trained 8192 rows, Medusa's chain over the full head). The committed runs were made by the
# commands in their headers, which named only what differed from those defaults.
# Stage 1: each option scanned
METHODS=vanilla,kangaroo,kangaroo:eta=0.3,kangaroo:eta=0.45,kangaroo:eta=0.75,kangaroo:eta=0.9
METHODS+=,eagle:depth=5:draft_vocab=8192,eagle:depth=4:draft_vocab=8192,eagle:depth=3:draft_vocab=8192
METHODS+=,eagle:depth=5:draft_vocab=4096,eagle:depth=4:draft_vocab=4096
METHODS+=,medusa:tree=chain:draft_vocab=0,medusa:tree=sized:draft_vocab=0,medusa:tree=sized:draft_vocab=8192
stage stage1 "$METHODS"
# Stage 2: the two winners combined and their neighbours, with a vanilla of their own
METHODS=vanilla,eagle:depth=3:draft_vocab=8192,eagle:depth=3:draft_vocab=4096
METHODS+=,medusa:tree=sized:draft_vocab=8192,medusa:tree=sized:draft_vocab=4096
stage stage2 "$METHODS"
