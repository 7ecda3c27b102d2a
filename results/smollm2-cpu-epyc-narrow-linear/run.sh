#!/usr/bin/env bash
# Every method of the table on this folder's engine (our bfloat16 linear kernel at widths 4-16): the
# same command, methods and options as ../smollm2-cpu-epyc-n10-v5/run.sh, with 3 questions per subtask
# (LIMIT=10 for the full table: ~2 h 10 min), run into ./table. That script's steps, with OUT=./table:
#   python -m specharness compare ... --limit 3 --out-dir results/smollm2-cpu-epyc-narrow-linear/table/runs
#   python -m specharness lossless --certify results/smollm2-cpu-epyc-narrow-linear/table/runs
#   python -m specharness profile ... --out results/smollm2-cpu-epyc-narrow-linear/table/profile
#   python -m specharness report results/smollm2-cpu-epyc-narrow-linear/table/runs --profile results/smollm2-cpu-epyc-narrow-linear/table/profile/profile.json --out results/smollm2-cpu-epyc-narrow-linear/table/report
# ~45 min alone on the machine with a fresh graph store; rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-narrow-linear/table LIMIT="${LIMIT:-3}" exec bash results/smollm2-cpu-epyc-n10-v5/run.sh
