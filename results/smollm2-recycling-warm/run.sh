#!/usr/bin/env bash
# Two levers for the rounds that draft nothing, in one interleaved compare with vanilla, pld and the defaults on the
# held-apart questions (the 11th-20th of each Spec-Bench subtask: no default was chosen on them), n10-v8's settings,
# then certify and report. Why: in n10-v8 a third of sam's rounds (34%) and over half of recycling's (57%) drafted
# nothing (a token with no successors known yet, and no earlier match), each a full verification for one token.
# 1. Token Recycling's matrix kept across questions (warm=true), alone and as SAM's fallback.
# 2. SAM's static corpus (the paper's lever): the 2200 answers SmolLM2 wrote for its self-distillation set
#    (corpus.py; no benchmark text, and sam refuses a corpus quoting a question), 429k tokens, built in ~3 s.
#    A corpus match drafts before the fallback from 5 tokens on (sam's corpus_min_match), chosen from
#    retrieval_acceptance.py on ../smollm2-eagle-bf16-data's vanilla answers to these questions (no model needed);
#    the script runs again at the end on this run's own vanilla answers (retrieval_acceptance.txt).
# Warm, the matrix a question starts from holds what the questions before it (in file order, each method its own
# drafter) taught, never its own answer: a turn run again (warm-up, repeats) starts from the matrix its first run
# started from. About 30 min on 2 cores with the graphs built. Rerunning resumes the compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-recycling-warm}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
# the 2200 conversations written in bfloat16 (train ... -o conversations=2200 -o gen_dtype=bfloat16 -o gen_batch=64)
DATA="${DATA:-$HOME/.cache/specharness/selfdistill/SmolLM2-135M-Instruct-94eb442e35/data}"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
[ -f "$OUT/corpus.txt" ] || python "$OUT/corpus.py" "$DATA" "$OUT/corpus.txt"
python -m specharness compare \
    --methods "vanilla,pld,recycling,recycling:warm=true,sam,sam:fallback_options=warm=true,sam:corpus=$OUT/corpus.txt" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
python "$OUT/retrieval_acceptance.py" "$OUT/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl" "$OUT/questions.jsonl" \
    "$OUT/corpus.txt" > "$OUT/retrieval_acceptance.txt"
