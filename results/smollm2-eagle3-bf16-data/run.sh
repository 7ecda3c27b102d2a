#!/usr/bin/env bash
# EAGLE-3 on EAGLE's data (issue 36: eagle3 against eagle at the same data). The shipped EAGLE head trained on the
# 2200 conversations SmolLM2 wrote in bfloat16 (../smollm2-eagle-bf16-data); the shipped EAGLE-3 head still on the
# 1100 float32 ones. Here: `train eagle3` on the 2200 set with the shipped head's recipe (10 epochs x 3 unrolled
# steps; its three layers' states teacher-forced once from the cached data, ~25 min, then cached beside it), then
#   1. agreement.py (../smollm2-eagle3): held-out top-1 of both EAGLE heads and both EAGLE-3 heads on one measure,
#      unrolled on their own outputs as they draft, on the 2200 set's 110 held-out conversations (float32);
#   2. one interleaved compare of vanilla, eagle (its 2200 head, shipped), eagle3 (the shipped 1100 head) and eagle3
#      on the new head, each at its defaults (EAGLE-2 tree, budget=auto), on the held-apart questions (the 11th-20th
#      of each Spec-Bench subtask), n10-v8's settings; certify; report.
# About 3 h on 2 cores (training ~2 h 10 min); training resumes from its last epoch (a killed run loses at most
# one), the compare resumes too.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-eagle3-bf16-data}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
HEADS="${HEADS:-$HOME/.cache/specharness/heads}"
NEW="$HEADS/eagle3-2200-bf16"
RECIPE=(-o conversations=2200 -o held_out=0.05 -o gen_dtype=bfloat16 -o gen_batch=64)
if [ ! -f "$NEW/model.safetensors" ]; then
    resume=$([ -f "$NEW/train_state.pt" ] && echo --resume || true)
    python -m specharness train eagle3 "${RECIPE[@]}" -o epochs=10 --threads 2 --out "$NEW" $resume 2>&1 \
        | grep --line-buffered -v $'\r' | tee -a "$OUT/train.log"
fi
cp "$NEW/report.json" "$OUT/eagle3-2200-bf16.report.json"
[ -f "$OUT/agreement/agreement.json" ] || python results/smollm2-eagle3/agreement.py --out "$OUT/agreement" \
    --conversations 2200 -o gen_dtype=bfloat16 -o gen_batch=64 eagle-2200=shipped eagle3-1045=shipped \
    eagle3-2090="$NEW" 2>&1 | grep -v $'\r'
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
python -m specharness compare --methods "vanilla,eagle,eagle3,eagle3:head=$NEW" \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/runs" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$OUT/questions.jsonl" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
