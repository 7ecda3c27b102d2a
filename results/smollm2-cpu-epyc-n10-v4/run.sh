#!/usr/bin/env bash
# Issue 32: the learned drafters on the defaults re-tuned in results/smollm2-cpu-epyc-defaults (EAGLE
# depth 3 over 4096 head rows, Medusa's sized tree over 4096 rows; Kangaroo unchanged), on Spec-Bench,
# with EAGLE's head pass over accepted tokens now timed as drafting. Against vanilla in one interleaved
# run, with pld as the anchor to results/smollm2-cpu-epyc-n10-v3 (same settings, the whole table) and
# Medusa's chain (the Kangaroo paper's comparison). Spec-Bench, 10 questions per subtask (MT-bench both
# turns: 70 turns), 128 new tokens, the engine's default (bfloat16 max-autotune here), 2 threads, 1
# warm-up and 2 timed repeats per method, methods interleaved question by question in rotating order,
# nothing compiled while timing. Then every bfloat16 divergence certified, the profile, the report.
# Run it with nothing else on the machine (about 55 minutes); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-n10-v4
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
METHODS=vanilla,pld,kangaroo,eagle,medusa,medusa:tree=chain
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the profile and report"
[ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
    --widths 1,2,4,8,16 --contexts 256 --variant medusa:tree=chain --out "$OUT/profile" 2>&1 \
    | grep --line-buffered -v $'\r' | tee "$OUT/profile.log"
python -m specharness report "$OUT/runs" --profile results/smollm2-cpu-epyc-n10-v4/profile/profile.json --out "$OUT/report"
