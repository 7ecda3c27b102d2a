#!/usr/bin/env bash
# The two early-exit rows that results/smollm2-cpu-n10-v2 lacks, so that the seven methods of
# results/smollm2-cpu-n10 (vanilla, early_exit, hf-assisted-early-exit, hf-generate,
# hf-prompt-lookup, kangaroo, medusa) all exist on engine v2. Same settings as n10-v2 (engine
# default bfloat16 + max-autotune, 10 questions per subtask, 128 new tokens, 2 warm-ups, 2 timed
# repeats, 2 threads), with its own vanilla interleaved question by question: a speedup is a ratio
# measured in one run. Run it with nothing else on the machine; rerunning resumes (--resume).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-n10-v2-early-exit
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python -m specharness compare \
    --methods vanilla,early_exit,hf-assisted-early-exit \
    --bench-file "$BENCH" --limit "${LIMIT:-10}" --max-new-tokens 128 \
    --repeats 2 --warmup 2 --threads 2 --out-dir "$OUT" --resume
python -m specharness lossless --certify "$OUT" --bench-file "$BENCH"
python -m specharness report "$OUT" --profile results/smollm2-cpu-profile-v2/profile.json --out "$OUT/report"
