#!/usr/bin/env bash
# budget=auto sized per source: each round's draft size chosen for the source that proposed it (pld: the match's
# n-gram length; sam: a long match in the text, a short one, the fallback), so that rounds whose drafts are kept
# little of the time (a 1-token match keeps 0.60 tokens, a 2-token one 1.65; sam's fallback 0.7 of 7) verify
# narrower while long matches keep their 7 drafts. One interleaved compare of pld and sam (at its defaults and with
# the fallback kept warm, ../smollm2-recycling-warm's fastest) each at its own size and with -o budget=auto, and
# vanilla, on the held-apart questions (the 11th-20th of each Spec-Bench subtask, as ../smollm2-recycling-warm),
# n10-v8's settings, then certify and report. About 40 min on 2 cores with the graphs built. Rerunning resumes.
# runs/ ran at a6b00a4 (a source's per-size sums aged by every round: its check out reruns it); second/ after
# the fix (aged by the source's own rounds), pld and sam at their defaults only: about 30 min more.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-source-budget}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
python -m specharness compare \
    --methods "vanilla,pld,pld:budget=auto,sam,sam:budget=auto,sam:fallback_options=warm=true,sam:fallback_options=warm=true:budget=auto" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
python "$OUT/verify_by_width.py" "$OUT/runs" > "$OUT/verify_by_width.txt"
python -m specharness compare --methods "vanilla,pld,pld:budget=auto,sam,sam:budget=auto" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/second/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/second/compare.log"
python -m specharness lossless --certify "$OUT/second/runs" --bench-file "$OUT/questions.jsonl" 2>&1 \
    | tee "$OUT/second/certify.log" || echo "certify: not every divergence is certified (second/certify.log)"
python -m specharness report "$OUT/second/runs" --out "$OUT/second/report"
python "$OUT/verify_by_width.py" "$OUT/second/runs" > "$OUT/second/verify_by_width.txt"
