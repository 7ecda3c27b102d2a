#!/usr/bin/env bash
# Why does Kangaroo's adapter agree with SmolLM2 on 43% of held-out self-distilled positions but only ~21% of
# Spec-Bench drafts get accepted? Teacher-forced agreement on vanilla's own Spec-Bench answers (agreement.py) for:
# the shipped adapter (1045 self-distilled conversations), the one it replaced (256, from git), an adapter trained
# on 768 conversations half of which carry a passage the target wrote (-o context=0.5), and the shipped adapter
# fine-tuned on those 768 (-o init=shipped). Vanilla's answers come from two committed runs: the held-apart
# questions (11th-20th per subtask, ../smollm2-cpu-epyc-eagle-budget) and the table's (first 10, n10-v7).
# Then the same measure for EAGLE's head, the shipped one (1045 conversations) against the one it replaced (486).
# About 50 min on 2 cores (data 21 min, training 8 + 2 min, agreement 4 x 2 min); rerunning skips what exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-kangaroo-specbench-agreement}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
AD="${ADAPTERS:-$HOME/.cache/specharness/adapters/kangaroo-context-study}"
mkdir -p "$AD/general256"
for f in model.safetensors config.json; do  # the adapter 0da1de2 replaced
    [ -f "$AD/general256/$f" ] || git show "0da1de2^:methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2/$f" > "$AD/general256/$f"
done
[ -f "$AD/context768-layer/model.safetensors" ] || python -m specharness train kangaroo -o conversations=768 \
    -o context=0.5 -o epochs=12 --threads 2 --out "$AD/context768-layer" 2>&1 | grep --line-buffered -v $'\r'
[ -f "$AD/context768-finetune/model.safetensors" ] || python -m specharness train kangaroo -o conversations=768 \
    -o context=0.5 -o epochs=3 -o lr=0.0005 -o init=shipped --threads 2 --out "$AD/context768-finetune" \
    2>&1 | grep --line-buffered -v $'\r'
for d in context768-layer context768-finetune; do cp "$AD/$d/report.json" "$OUT/$d.report.json"; done
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
ADAPTERS=(shipped=methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2 general256="$AD/general256"
          context768-layer="$AD/context768-layer" context768-finetune="$AD/context768-finetune")
python "$OUT/agreement.py" results/smollm2-cpu-epyc-eagle-budget/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl \
    "$OUT/questions.jsonl" "$OUT/held_apart.json" "${ADAPTERS[@]}" --sizes 2048,4096,8192,16384,0 \
    2>&1 | grep -v Warning | tee "$OUT/held_apart.log"
python "$OUT/agreement.py" results/smollm2-cpu-epyc-n10-v7/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl \
    "$BENCH" "$OUT/table_questions.json" "${ADAPTERS[@]}" --sizes 4096 2>&1 | grep -v Warning | tee "$OUT/table_questions.log"
EAGLE_OLD="$AD/eagle-replaced486"
mkdir -p "$EAGLE_OLD"
for f in model.safetensors config.json; do  # the EAGLE head 0da1de2 replaced
    [ -f "$EAGLE_OLD/$f" ] || git show "0da1de2^:methods/eagle/heads/SmolLM2-135M-Instruct/$f" > "$EAGLE_OLD/$f"
done
HEADS=(shipped=methods/eagle/heads/SmolLM2-135M-Instruct replaced486="$EAGLE_OLD")
python "$OUT/eagle_agreement.py" results/smollm2-cpu-epyc-eagle-budget/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl \
    "$OUT/questions.jsonl" "$OUT/eagle_held_apart.json" "${HEADS[@]}" 2>&1 | grep -v Warning | tee "$OUT/eagle_held_apart.log"
python "$OUT/eagle_agreement.py" results/smollm2-cpu-epyc-n10-v7/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl \
    "$BENCH" "$OUT/eagle_table_questions.json" "${HEADS[@]}" 2>&1 | grep -v Warning | tee "$OUT/eagle_table_questions.log"
