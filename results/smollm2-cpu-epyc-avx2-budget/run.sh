#!/usr/bin/env bash
# Draft sizes fitted to a CPU with AVX2 only, where verifying 8 positions costs ~1.6x one step (the AVX512-BF16
# EPYC: 1.1-1.3x; ../smollm2-cpu-epyc-budget measured budget=auto there: neutral). One interleaved compare of
# vanilla and the training-free drafters plus kangaroo, each at its own draft size (budget=max, their default)
# and with budget=auto (eagle and medusa default to auto already). n10-v11's options verbatim; Spec-Bench, LIMIT
# questions per subtask (default 2: 14 turns), 128 new tokens, greedy, 1 warm-up + 2 timed repeats, rotating
# order, 2 threads, the default engine. Then certify and report. Rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-avx2-budget}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
PLD=pld:max_ngram=3:min_ngram=1:k=7:nodes=7:occurrences=16
REC=recycling:top_k=8:nodes=7
SAM=sam:k=7:fallback=recycling:min_match=2
KAN=kangaroo:exit_layer=2:eta=0.6:gamma=3
METHODS=vanilla
for m in $PLD $REC $SAM $KAN; do METHODS+=",$m:budget=max,$m:budget=auto"; done
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-2}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --out "$OUT/report"
