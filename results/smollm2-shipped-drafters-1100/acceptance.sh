#!/usr/bin/env bash
# What the retrained drafters buy on Spec-Bench text, not on self-generated text: acceptance and CR
# (not speed) of the old and new checkpoints side by side, with Kangaroo's stop threshold eta and
# draft cap gamma around their defaults. float32 eager (the reference engine, where greedy outputs
# must equal vanilla's token for token), 1 question per subtask, 64 new tokens, one interleaved
# compare. OLD = the checkpoints as committed before this folder (run.sh extracts them the same way).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-shipped-drafters-1100/acceptance
CACHE="${SPECHARNESS_CACHE:-$HOME/.cache/specharness}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
OLD="$(mktemp -d)"
git archive f9d702e methods/eagle/heads methods/kangaroo/adapters | tar -x -C "$OLD"
OE="$OLD/methods/eagle/heads/SmolLM2-135M-Instruct"; OK="$OLD/methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2"
NE="$CACHE/eagle-1100"; NK="$CACHE/kangaroo-1100"; NM="$CACHE/medusa-1100"
python -m specharness compare --methods "vanilla,eagle:head=$OE,eagle:head=$NE,kangaroo:adapter=$OK,kangaroo:adapter=$NK,kangaroo:adapter=$NK:eta=0.3,kangaroo:adapter=$NK:eta=0.8,kangaroo:adapter=$NK:eta=0:gamma=2,medusa:heads_path=$NM,medusa:heads_path=$NM:tree=sized" \
    --dtype float32 --compile none --bench-file "$BENCH" --limit 1 --max-new-tokens 64 \
    --repeats 1 --warmup 1 --threads 2 --out-dir "$OUT" --resume
python -m specharness report "$OUT" --out "$OUT/report"
