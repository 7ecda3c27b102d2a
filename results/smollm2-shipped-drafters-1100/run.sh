#!/usr/bin/env bash
# Issue 32 item 4: the shipped drafters retrained on ONE self-distilled set of 1100 conversations
# (55 held out; results/smollm2-data-scaling showed agreement still rising at this size): the EAGLE
# head (10 epochs, as the head it replaces), the Kangaroo adapter (12 epochs, as the one it replaces)
# and Medusa's residual heads on the shared LM head (the trainer's defaults: 2 epochs). Then
# heldout.py scores the new checkpoints and the ones they replace on the same 55 held-out
# conversations. SHIP=1 copies the new checkpoints into methods/*/ (their cards are written by hand
# from the reports). Rerunning resumes: data generation from its per-batch checkpoints, finished
# trainings are skipped. About 3.5 h on 2 cores, most of it generating the data.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-shipped-drafters-1100
CACHE="${SPECHARNESS_CACHE:-$HOME/.cache/specharness}"
DATA=(-o conversations=1100 -o held_out=0.05)
[ -f "$CACHE/eagle-1100/report.json" ] || python -m specharness train eagle "${DATA[@]}" -o epochs=10 \
    --threads 2 --out "$CACHE/eagle-1100" > "$OUT/train-eagle.log" 2>&1
[ -f "$CACHE/kangaroo-1100/report.json" ] || python -m specharness train kangaroo "${DATA[@]}" -o epochs=12 \
    --threads 2 --out "$CACHE/kangaroo-1100" > "$OUT/train-kangaroo.log" 2>&1
# Medusa's trainer stops at its wall-time budget (-o max_minutes, teacher pass included) with the heads
# saved as they are and its report saying so; a rerun resumes it (--resume) until the recipe completes
M="$CACHE/medusa-1100"
if ! python -c "import json, sys; sys.exit(not json.load(open('$M/report.json'))['completed'])" 2>/dev/null; then
    python -m specharness train medusa "${DATA[@]}" -o lm_head=shared -o max_minutes="${MEDUSA_MINUTES:-45}" \
        --threads 2 --out "$M" $([ -f "$M/train_state.pt" ] && echo --resume) >> "$OUT/train-medusa.log" 2>&1
fi
for kind in eagle kangaroo medusa; do cp "$CACHE/$kind-1100/report.json" "$OUT/$kind-1100.report.json"; done
# the checkpoints they replace (as committed before this folder), then the new ones, on one held-out set
OLD="$(mktemp -d)"
git archive f9d702e methods/eagle/heads methods/kangaroo/adapters | tar -x -C "$OLD"
python "$OUT/heldout.py" "eagle=$OLD/methods/eagle/heads/SmolLM2-135M-Instruct" "eagle=$CACHE/eagle-1100" \
    "kangaroo=$OLD/methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2" "kangaroo=$CACHE/kangaroo-1100" \
    "medusa=$CACHE/medusa-1100" > "$OUT/heldout.jsonl"
if [ "${SHIP:-0}" = 1 ]; then
    for f in model.safetensors config.json report.json; do
        cp "$CACHE/eagle-1100/$f" methods/eagle/heads/SmolLM2-135M-Instruct/
        cp "$CACHE/kangaroo-1100/$f" methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2/
    done
    mkdir -p methods/medusa/heads/SmolLM2-135M-Instruct
    for f in medusa_lm_head.pt config.json report.json; do cp "$CACHE/medusa-1100/$f" methods/medusa/heads/SmolLM2-135M-Instruct/; done
fi
