#!/usr/bin/env bash
# The draft-vocabulary sweep behind early exit's and self-spec's default draft_vocab (issue 32, item 3):
# one interleaved compare on the built-in sample questions (written for this project, not Spec-Bench's),
# bfloat16 max-autotune, 2 threads, each variant after its own warm-up, nothing compiled while timing.
# Run from the repository root on a quiet machine: bash results/smollm2-cpu-epyc-draft-vocab/run.sh
set -euo pipefail
out=results/smollm2-cpu-epyc-draft-vocab
python -m specharness compare --bench sample --dtype bfloat16 --compile max-autotune --threads 2 \
  --max-new-tokens 96 --repeats 1 --out-dir "$out/runs" \
  --methods vanilla,early_exit:draft_vocab=0,early_exit:draft_vocab=1024,early_exit:draft_vocab=2048,early_exit:draft_vocab=4096,early_exit:draft_vocab=8192,early_exit:draft_vocab=16384,self-spec:draft_vocab=0,self-spec:draft_vocab=1024,self-spec:draft_vocab=4096,self-spec:draft_vocab=16384 \
  2>&1 | tee "$out/compare.log"
python -m specharness lossless --certify "$out/runs" | tee "$out/certify.log"  # each bfloat16 divergence: near-tie or bug
python -m specharness report "$out/runs" --out "$out/report"
