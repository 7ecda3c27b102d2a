#!/usr/bin/env bash
# The training-free drafters new in this round (lookahead, self-spec) against vanilla and pld,
# interleaved question by question on the engine's default settings (bfloat16 + max-autotune on
# this machine), 128 new tokens, 2 timed repeats after a warm-up, 2 threads. LIMIT questions per
# subtask (default 1: a first look, far below the issue's 10; rerun with LIMIT=10 to extend the
# same files). The committed files come from a run with nothing else on the machine (an earlier
# run that shared the cores with a fresh-clone check was discarded).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-training-free
python -m specharness compare --methods vanilla,pld,lookahead,self-spec \
    --bench-file "${SPECBENCH:-../shared/specbench/question.jsonl}" --limit "${LIMIT:-1}" --max-new-tokens 128 \
    --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT" --resume
python -m specharness lossless --certify "$OUT" --bench-file "${SPECBENCH:-../shared/specbench/question.jsonl}" || true
python -m specharness report "$OUT" --profile results/smollm2-cpu-profile/profile.json --out "$OUT/report"
