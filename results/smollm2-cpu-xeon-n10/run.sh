#!/usr/bin/env bash
# Issue 11's seven-method table (vanilla, hf-generate, hf-prompt-lookup, hf-assisted-early-exit,
# kangaroo, early_exit, medusa) plus the medusa tree and eagle, on engine v2 on a 2-core Intel Xeon
# with AMX: the machine of results/smollm2-cpu-xeon-profile, which the report's cost model uses, so
# the prediction comes from a profile taken apart from these files but on the same machine and commit.
# Same settings as smollm2-cpu-n10-v2: the engine's default (bfloat16 + max-autotune, measured on this
# machine), 10 questions per Spec-Bench subtask, 128 new tokens, 2 warm-ups per method, 2 timed
# repeats, methods interleaved question by question, 2 threads. Run it with nothing else on the
# machine (about 70 minutes); rerunning resumes the same files (--resume).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-xeon-n10
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python -m specharness compare \
    --methods vanilla,hf-generate,hf-prompt-lookup,hf-assisted-early-exit,kangaroo,early_exit,medusa:lm_head=shared,medusa:lm_head=shared:tree=sized,eagle \
    --bench-file "$BENCH" --limit "${LIMIT:-10}" --max-new-tokens 128 \
    --repeats 2 --warmup 2 --threads 2 --out-dir "$OUT" --resume
python -m specharness lossless --certify "$OUT" --bench-file "$BENCH"
python -m specharness report "$OUT" --profile results/smollm2-cpu-xeon-profile/profile.json --out "$OUT/report"
