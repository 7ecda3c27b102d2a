#!/usr/bin/env bash
# Issue 36's joint run: the top of Spec-Bench's leaderboard (EAGLE-3, SAM-Decoding with each fallback)
# beside what they build on (pld, recycling, eagle) and the seed method (kangaroo), against vanilla in one
# interleaved compare. Spec-Bench, 10 questions per subtask (MT-bench both turns: 70 turns), 128 new
# tokens, the engine's default (bfloat16 max-autotune here), 2 threads, 1 warm-up and 2 timed repeats per
# method, methods interleaved question by question in rotating order, nothing compiled while timing. Then
# every bfloat16 divergence certified, the profile of every drafter here, the report with its prediction.
# Every option that matters is named, so a later change of defaults does not change what a rerun measures.
# Run it from anywhere with nothing else on the machine (about 50 minutes); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-leaderboard
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
METHODS=vanilla,pld,recycling,kangaroo,eagle:depth=3:draft_vocab=4096,eagle3:depth=3:draft_vocab=4096
METHODS+=,sam:k=7:fallback=none:min_match=1,sam:k=7:fallback=recycling:min_match=2
METHODS+=,sam:k=7:fallback=eagle:min_match=2,sam:k=7:fallback=eagle3:min_match=2
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the profile and report"
[ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
    --widths 1,2,4,8 --contexts 256 --methods vanilla,pld,recycling,kangaroo,eagle,eagle3,sam \
    --variant sam:fallback=none:min_match=1 --variant sam:fallback=eagle --variant sam:fallback=eagle3 \
    --out "$OUT/profile" 2>&1 | grep --line-buffered -v $'\r' | tee "$OUT/profile.log"
python -m specharness report "$OUT/runs" --profile "$OUT/profile/profile.json" --out "$OUT/report"
