#!/usr/bin/env bash
# The data lever for Medusa, as ../smollm2-eagle-bf16-data pulled it for EAGLE (+7.7% speed there): residual heads
# on the shared LM head trained as the shipped ones were (the trainer's defaults: 4 heads, 1 block, 2 epochs) on
# the 2200 conversations SmolLM2 wrote in bfloat16 (gen_dtype=bfloat16, batch 64; features and soft labels from the
# float32 target), against the shipped heads (1100 float32 conversations), in one interleaved compare of vanilla and
# both heads on the held-apart questions (the 11th-20th of each Spec-Bench subtask, which no head was chosen on),
# n10-v8's settings and medusa's defaults (sized tree, budget=auto), then certify and report.
# About 1 h 45 min on 2 cores with the data cached (teacher pass ~20 min, training ~60, compare ~15 with the graphs
# built, then certify and the report); the data, if absent, adds ~37 min.
# Rerunning skips what exists, resumes a budget-stopped training (--resume) and resumes the compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-medusa-bf16-data}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
HEADS="${HEADS:-$HOME/.cache/specharness/heads}"
NEW="$HEADS/medusa-2200-bf16"
RECIPE=(-o conversations=2200 -o held_out=0.05 -o gen_dtype=bfloat16 -o gen_batch=64)
if ! python -c "import json, sys; sys.exit(not json.load(open('$NEW/report.json'))['completed'])" 2>/dev/null; then
    python -m specharness train medusa "${RECIPE[@]}" -o lm_head=shared -o max_minutes="${MEDUSA_MINUTES:-120}" \
        --threads 2 --out "$NEW" $([ -f "$NEW/train_state.pt" ] && echo --resume) 2>&1 \
        | grep --line-buffered -v $'\r' | tee -a "$OUT/train-medusa.log"
fi
cp "$NEW/report.json" "$OUT/medusa-2200-bf16.report.json"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
# `medusa` is the shipped heads when this ran (1100 float32 conversations, commit 940beb2); if the heads trained
# here ship later, a rerun from that commit compares them with themselves: check out 940beb2's methods/medusa/heads/.
python -m specharness compare --methods "vanilla,medusa,medusa:heads_path=$NEW" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
