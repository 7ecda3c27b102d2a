#!/usr/bin/env bash
# Issue 12's question "why does Kangaroo struggle at 135M: data or depth?": the Kangaroo adapter and
# the EAGLE head, each trained on 256 and on all 1045 training conversations of ONE self-distilled
# set of 1100 (5% = 55 conversations held out, the same for every size; smaller training sets are
# nested in larger ones: -o train_conversations). Each trainer's report.json gives held-out top-1
# agreement on the target's own continuation and on the drafter's own drafted prefix (the off-policy
# gap); one interleaved run then measures each checkpoint's CR on Spec-Bench (float32 eager, the
# reference engine: acceptance, not speed, is the point), and the report draws the scaling figure.
# Every checkpoint trains for 4 epochs (the shipped ones: kangaroo 12, eagle 10; 4 keeps the whole
# script near an hour on 2 cores): a fixed number of passes, so the larger set also takes more steps.
# Rerunning resumes everything: data generation from its per-batch checkpoints (partial/ in the
# data directory), skips finished trainings, and resumes the result files.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-data-scaling
CKPT="${SCALING_CKPT:-${SPECHARNESS_CACHE:-$HOME/.cache/specharness}/scaling}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
DATA=(-o conversations=1100 -o held_out=0.05)
if [ "${STAGE:-all}" != eagle3 ]; then  # STAGE=eagle3: only the EAGLE-3 stage below
    for size in 256 all; do
        n=$([ "$size" = all ] && echo 0 || echo "$size")
        [ -f "$CKPT/kangaroo-$size/report.json" ] || python -m specharness train kangaroo "${DATA[@]}" \
            -o train_conversations="$n" -o epochs=4 --threads 2 --out "$CKPT/kangaroo-$size"
        [ -f "$CKPT/eagle-$size/report.json" ] || python -m specharness train eagle "${DATA[@]}" \
            -o train_conversations="$n" -o epochs=4 --threads 2 --out "$CKPT/eagle-$size"
    done
    python -m specharness compare \
        --methods "vanilla,kangaroo:adapter=$CKPT/kangaroo-256,kangaroo:adapter=$CKPT/kangaroo-all,eagle:head=$CKPT/eagle-256,eagle:head=$CKPT/eagle-all" \
        --dtype float32 --compile none --bench-file "$BENCH" --limit "${LIMIT:-4}" --max-new-tokens 128 \
        --repeats 1 --warmup 1 --threads 2 --out-dir "$OUT" --resume
fi
# EAGLE-3 (issue 36) on the same data and sizes, 4 epochs x 3 unrolled steps, with the options the EAGLE
# checkpoints above ran at (depth 5, the head's 8192 draft rows): its own interleaved run with its own
# vanilla in eagle3/ (the four checkpoints above were run at 2063665, before EAGLE-3 existed); the report
# reads both folders, each method against the vanilla of its own command.
for size in 256 all; do
    n=$([ "$size" = all ] && echo 0 || echo "$size")
    [ -f "$CKPT/eagle3-$size/report.json" ] || python -m specharness train eagle3 "${DATA[@]}" \
        -o train_conversations="$n" -o epochs=4 --threads 2 --out "$CKPT/eagle3-$size"
done
E3=depth=5:draft_vocab=8192
python -m specharness compare \
    --methods "vanilla,eagle3:head=$CKPT/eagle3-256:$E3,eagle3:head=$CKPT/eagle3-all:$E3" \
    --dtype float32 --compile none --bench-file "$BENCH" --limit "${LIMIT:-4}" --max-new-tokens 128 \
    --repeats 1 --warmup 1 --threads 2 --out-dir "$OUT/eagle3" --resume
python -m specharness report "$OUT" "$OUT/eagle3" --out "$OUT/report"
