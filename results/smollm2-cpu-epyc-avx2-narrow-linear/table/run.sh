#!/usr/bin/env bash
# The methods of the headline table on this folder's engine (a CPU with AVX2 only, our linear kernel's AVX2
# build in every static graph): ../../smollm2-cpu-epyc-n10-v11/run.sh's command, methods and options verbatim
# (Spec-Bench, 128 new tokens, greedy, 1 warm-up and 2 timed repeats, rotating order, 2 threads, the default
# engine: bfloat16 max-autotune here), with 2 questions per subtask (LIMIT=10 for the full table: ~3 h here),
# run into this folder. Then certify, the profile, the report. Rerunning resumes. (This folder's run was stopped
# at the profile for time, ~25 min more here; its report was built without one: python -m specharness report
# results/smollm2-cpu-epyc-avx2-narrow-linear/table/runs --out results/smollm2-cpu-epyc-avx2-narrow-linear/table/report)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=results/smollm2-cpu-epyc-avx2-narrow-linear/table LIMIT="${LIMIT:-2}" exec bash results/smollm2-cpu-epyc-n10-v11/run.sh
