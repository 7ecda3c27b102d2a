#!/usr/bin/env bash
# The table again after the graph store's fix (../smollm2-cpu-epyc-narrow-build): from cc1d947 every graph on our
# linear kernel (widths 4-16) failed to build as a package and ran through torch.compile, ~1 ms a forward slower, so
# n10-v6 verified 3+ positions at that cost. n10-v6's settings (Spec-Bench, 10 questions per subtask, 70 turns, 128
# new tokens, greedy, 1 warm-up and 2 timed repeats, rotating order, 2 threads, the default engine: bfloat16
# max-autotune here), for the methods the fix touches most and transformers' generate: vanilla, the three retrieval
# drafters, kangaroo, eagle (tree and chain), eagle3 and medusa's sized tree. Left out for time (each is in n10-v6):
# self-spec, lookahead, early_exit, medusa's chain, hf-prompt-lookup. Then certify, the profile, the report (with
# the ceilings table). Every option is named, so a later change of defaults does not change what a rerun measures.
# Run from anywhere on a quiet machine (about 1 h 40 min with a fresh graph store); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-n10-v7}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096
METHODS=vanilla,pld:max_ngram=3:k=7,recycling:top_k=8:nodes=7,sam:k=7:fallback=recycling:min_match=2
METHODS+=,kangaroo:exit_layer=2:eta=0.6:gamma=3,eagle:$EAGLE,eagle:mode=chain:$EAGLE,eagle3:$EAGLE
METHODS+=,medusa:tree=sized:tree_size=7:draft_vocab=4096,hf-generate
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
# an uncertified divergence fails certify (exit 1); the files still get their profile and report
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the profile and report"
[ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
    --widths 1,2,4,8,16 --contexts 256 --variant eagle:mode=chain \
    --out "$OUT/profile" 2>&1 | grep --line-buffered -v $'\r' | tee "$OUT/profile.log"
python -m specharness report "$OUT/runs" --profile "$OUT/profile/profile.json" --out "$OUT/report"
