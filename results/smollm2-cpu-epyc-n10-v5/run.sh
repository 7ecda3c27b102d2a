#!/usr/bin/env bash
# Issue 32 item 5: the whole table again on today's engine, on this project's machine kind (a 2-core
# AMD EPYC with AVX512-BF16, no AMX). Every method of `specharness list` on its defaults (the shipped
# drafters), Medusa as sized tree and chain, EAGLE as tree (EAGLE-2) and chain (EAGLE-1), EAGLE-3 and
# SAM-Decoding (issue 36) beside them; kangaroo-oracle is left out (an acceptance bound whose look-ahead
# is not timed), and so is hf-assisted-early-exit (transformers' LayerSkip, 0.26x in ../smollm2-cpu-epyc-n10-v3:
# a fifth of this run's time; it was dropped 5 questions in so that the run fits one working session). Spec-Bench, 10 questions per subtask (MT-bench both turns: 70 turns), 128 new tokens,
# the engine's default (bfloat16 max-autotune here), 2 threads, 1 warm-up and 2 timed repeats per method,
# methods interleaved question by question in rotating order, nothing compiled while timing. Then every
# bfloat16 divergence from vanilla certified a near-tie (or reported), the profile of every drafter on the
# same commit and machine (the report's second cost model), the report.
# Every option that matters is named, so a later change of defaults does not change what a rerun measures.
# Run it from anywhere with nothing else on the machine (about 2 h 10 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-n10-v5}"  # a rerun for another folder sets OUT (and LIMIT)
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096
METHODS=vanilla,pld:max_ngram=3:k=7,recycling:top_k=8:nodes=7,lookahead:window=4:ngram=3:guesses=2
METHODS+=,sam:k=7:fallback=recycling:min_match=2,self-spec:skip_ratio=0.2:gamma=7
METHODS+=,kangaroo:exit_layer=2:eta=0.6:gamma=3,early_exit:exit_layer=2:gamma=6:draft_vocab=4096
METHODS+=,eagle:$EAGLE,eagle:mode=chain:$EAGLE,eagle3:$EAGLE
METHODS+=,medusa:tree=sized:tree_size=7:draft_vocab=4096,medusa:tree=chain:draft_vocab=4096
METHODS+=,hf-generate,hf-prompt-lookup:num_tokens=10
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
# an uncertified divergence fails certify (exit 1); the files still get their profile and report
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the profile and report"
[ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
    --widths 1,2,4,8,16 --contexts 256 --variant medusa:tree=chain --variant eagle:mode=chain \
    --out "$OUT/profile" 2>&1 | grep --line-buffered -v $'\r' | tee "$OUT/profile.log"
python -m specharness report "$OUT/runs" --profile "$OUT/profile/profile.json" --out "$OUT/report"
