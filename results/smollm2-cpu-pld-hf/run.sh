#!/usr/bin/env bash
# Issue 13: "pld at or above transformers' prompt lookup on every subtask, at its settings". Here
# pld runs with transformers' prompt-lookup settings (prompt_lookup_num_tokens=10 ->
# k=10; max_matching_ngram_size=2, its default -> n-grams of 2 then 1) against hf-prompt-lookup and
# vanilla, interleaved, on the engine's default settings (bfloat16 + max-autotune here), 10 questions
# per Spec-Bench subtask, 128 new tokens, 2 warm-up generations, 2 timed repeats, 2 threads. The joint
# run (results/smollm2-cpu-n10-v2) has pld at its own defaults (k=7, n-grams of 3 down to 1).
# Run it with nothing else on the machine. Rerunning resumes the same files (--resume).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-pld-hf
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python -m specharness compare --methods vanilla,hf-prompt-lookup,pld:k=10:max_ngram=2:min_ngram=1 \
    --bench-file "$BENCH" --limit "${LIMIT:-10}" --max-new-tokens 128 \
    --repeats 2 --warmup 2 --threads 2 --out-dir "$OUT" --resume
python -m specharness lossless --certify "$OUT" --bench-file "$BENCH"
python -m specharness report "$OUT" --out "$OUT/report"
