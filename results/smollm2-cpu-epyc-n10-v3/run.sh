#!/usr/bin/env bash
# Issue 32 item 5: the whole table again on today's engine, on this project's machine kind (a 2-core
# AMD EPYC with AVX512-BF16, no AMX). Every method in `specharness list` on its defaults (the shipped
# drafters of results/smollm2-shipped-drafters-1100), Medusa as chain and sized tree, EAGLE as tree
# (EAGLE-2) and chain (EAGLE-1); kangaroo-oracle is left out (an acceptance bound whose look-ahead is
# not timed). Spec-Bench, 10 questions per subtask (MT-bench both turns: 70 turns), 128 new tokens,
# the engine's default (bfloat16 max-autotune here), 2 threads, 1 warm-up and 2 timed repeats per
# method, methods interleaved question by question in rotating order, nothing compiled while timing.
# Then: every bfloat16 divergence from vanilla certified a near-tie (or reported as a bug), the
# engine's and drafters' profile on the same commit and machine (the report's cost model), the report.
# Run it with nothing else on the machine (about 2 h with cold graph caches); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-epyc-n10-v3
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
# EAGLE's and Medusa's options as they were then (their defaults changed since: results/smollm2-cpu-epyc-defaults);
# the committed files were made with the bare names (eagle, eagle:mode=chain, medusa, medusa:tree=sized), so a
# rerun with these names writes new files beside them
OLD_EAGLE=depth=5:draft_vocab=8192
METHODS=vanilla,pld,recycling,lookahead,self-spec,kangaroo,early_exit,eagle:$OLD_EAGLE,eagle:mode=chain:$OLD_EAGLE
METHODS+=,medusa:tree=chain:draft_vocab=0,medusa:tree=sized:draft_vocab=0,hf-generate,hf-prompt-lookup,hf-assisted-early-exit
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | tee -a "$OUT/compare.log"
# an uncertified divergence fails certify (exit 1); the files still get their profile and report
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the profile and report"
[ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
    --widths 1,2,4,8,16 --contexts 256 --variant medusa:tree=sized:draft_vocab=0 --variant eagle:mode=chain:$OLD_EAGLE \
    --out "$OUT/profile" 2>&1 | tee "$OUT/profile.log"
python -m specharness report "$OUT/runs" --profile results/smollm2-cpu-epyc-n10-v3/profile/profile.json --out "$OUT/report"
