#!/usr/bin/env bash
# pld's occurrences vote (methods/pld.py): where the matched n-gram occurred several times, the continuations of its
# 16 latest occurrences are merged and the 7 prefixes most of them share are drafted, a tree where they disagree.
#   1. acceptance.py: tokens a round keeps, replayed with the shipped drafter on vanilla's greedy answers to the
#      held-apart questions (../smollm2-recycling-warm's vanilla run; no model forward), for the old rule
#      (occurrences=1) and the vote at several settings: how the defaults were chosen;
#   2. one interleaved compare on the same held-apart questions (the 11th-20th of each Spec-Bench subtask; no
#      table ran them): vanilla, pld as before (occurrences=1), pld with the vote, and the vote sized per round
#      (budget=auto); n10-v9's settings otherwise. Then certify and the report.
# Run from anywhere on a quiet machine (about 20 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-pld-votes}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
[ -f "$OUT/acceptance.txt" ] || python "$OUT/acceptance.py" \
    results/smollm2-recycling-warm/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl "$OUT/questions.jsonl" \
    occurrences=1 occurrences=4 occurrences=8 occurrences=16 occurrences=64 occurrences=1:nodes=3 nodes=3 \
    max_ngram=5 2>&1 | grep -v Warning | tee "$OUT/acceptance.txt"
PLD=pld:max_ngram=3:min_ngram=1:k=7:nodes=7
python -m specharness compare --methods "vanilla,$PLD:occurrences=1:budget=max,$PLD:occurrences=16:budget=max,$PLD:occurrences=16:budget=auto" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
