#!/usr/bin/env bash
# Issue 32 item 5, retaken on the engine with our bfloat16 linear kernel at widths 4-16
# (../smollm2-cpu-epyc-narrow-linear): the same command, methods and options as
# ../smollm2-cpu-epyc-n10-v5/run.sh, 10 questions per subtask (MT-bench both turns: 70 turns),
# 2 timed repeats, run into this folder. That script's steps, with OUT=this folder:
#   python -m specharness compare ... --limit 10 --out-dir results/smollm2-cpu-epyc-n10-v6/runs
#   python -m specharness lossless --certify results/smollm2-cpu-epyc-n10-v6/runs
#   python -m specharness profile ... --out results/smollm2-cpu-epyc-n10-v6/profile
#   python -m specharness report results/smollm2-cpu-epyc-n10-v6/runs --profile results/smollm2-cpu-epyc-n10-v6/profile/profile.json --out results/smollm2-cpu-epyc-n10-v6/report
# About 2 h 10 min alone on the machine with a fresh graph store; rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-n10-v6 LIMIT="${LIMIT:-10}" exec bash results/smollm2-cpu-epyc-n10-v5/run.sh
