#!/usr/bin/env bash
# The data lever for EAGLE, as ../smollm2-kangaroo-bf16-data pulled it for Kangaroo (+3% speed there): a head
# trained as the shipped one was (10 epochs, the shipped recipe's defaults) on the 2200 conversations SmolLM2 wrote
# in bfloat16 (gen_dtype=bfloat16, batch 64; features and soft labels from the float32 target), against the shipped
# head (1100 float32 conversations), in one interleaved compare of vanilla and both heads on the held-apart
# questions (the 11th-20th of each Spec-Bench subtask, which no head was chosen on), n10-v7's settings and eagle's
# defaults (tree, budget=auto), then certify and report.
# About 1 h 50 min on 2 cores from nothing (data ~37 min, teacher pass ~23, training ~38, compare ~12 min with the
# graphs built, then certify and the report).
# Rerunning skips what exists and resumes the compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-eagle-bf16-data}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
HEADS="${HEADS:-$HOME/.cache/specharness/heads}"
NEW="$HEADS/eagle-2200-bf16"
RECIPE=(-o conversations=2200 -o held_out=0.05 -o gen_dtype=bfloat16 -o gen_batch=64)
[ -f "$NEW/model.safetensors" ] || python -m specharness train eagle "${RECIPE[@]}" -o epochs=10 --threads 2 \
    --out "$NEW" 2>&1 | grep --line-buffered -v $'\r'
cp "$NEW/report.json" "$OUT/eagle-2200-bf16.report.json"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
# `eagle` is the shipped head when this ran (1100 float32 conversations, commit 9404ef6); if the head trained here
# ships later, a rerun from that commit compares it with itself: check out 9404ef6's methods/eagle/heads/ first.
python -m specharness compare --methods "vanilla,eagle,eagle:head=$NEW" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
