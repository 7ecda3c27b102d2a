#!/usr/bin/env bash
# Token Recycling's matrix kept across questions (warm=true), alone and as SAM's fallback, against the defaults
# (matrix emptied for each question), with vanilla and pld, in one interleaved compare on the held-apart questions
# (the 11th-20th of each Spec-Bench subtask: no default was chosen on them), n10-v8's settings, then certify and
# report. Why: in n10-v8 a third of sam's rounds (34%) and over half of recycling's (57%) drafted nothing (a token
# with no successors known yet, and no earlier match), each a full verification for one token.
# Warm, the matrix a question starts from holds what the questions before it (in file order, each method its own
# drafter) taught, never its own answer: a turn run again (warm-up, repeats) starts from the matrix its first run
# started from. About 25 min on 2 cores with the graphs built. Rerunning resumes the compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-recycling-warm}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
python -m specharness compare \
    --methods "vanilla,pld,recycling,recycling:warm=true,sam,sam:fallback_options=warm=true" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
