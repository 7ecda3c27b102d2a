#!/usr/bin/env bash
# The table's key rows on the engine of this folder's change (one GEMM family per width), as a check
# that the change carries through a whole run and to see how speedups move: vanilla, pld, recycling,
# EAGLE tree and chain, Kangaroo, on n10-v5's options; Spec-Bench, 3 questions per subtask (MT-bench
# both turns), 128 new tokens, the default engine (bfloat16 max-autotune), 2 threads, 1 warm-up and
# 2 timed repeats, interleaved question by question; then every bfloat16 divergence certified.
# Run it from anywhere with nothing else on the machine (~30 min with a fresh graph store); it resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-gemm-families/compare
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096
METHODS=vanilla,pld:max_ngram=3:k=7,recycling:top_k=8:nodes=7
METHODS+=,kangaroo:exit_layer=2:eta=0.6:gamma=3,eagle:$EAGLE,eagle:mode=chain:$EAGLE
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-3}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log)"
