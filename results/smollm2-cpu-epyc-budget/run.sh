#!/usr/bin/env bash
# budget=auto against each method's own draft size (issue 32): one interleaved compare on the built-in
# sample questions (written for this project, not Spec-Bench's), bfloat16 max-autotune, 2 threads, 2
# repeats, each variant after its own warm-up and calibration, nothing compiled while timing.
# Run from the repository root on a quiet machine: bash results/smollm2-cpu-epyc-budget/run.sh
set -euo pipefail
out=results/smollm2-cpu-epyc-budget
python -m specharness compare --bench sample --dtype bfloat16 --compile max-autotune --threads 2 \
  --repeats 2 --out-dir "$out/runs" \
  --methods vanilla,pld,pld:budget=auto,recycling,recycling:budget=auto,eagle,eagle:budget=auto,kangaroo,kangaroo:budget=auto \
  2>&1 | tee "$out/compare.log"
python -m specharness lossless --certify "$out/runs" | tee "$out/certify.log"  # each bfloat16 divergence: near-tie or bug
python -m specharness report "$out/runs" --out "$out/report"
