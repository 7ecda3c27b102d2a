#!/usr/bin/env bash
# The methods n10-v8 left out for time, in a run of their own with its own vanilla, right after it on the same
# machine and code: lookahead, self-spec, early_exit, medusa's chain and transformers' prompt lookup (n10-v8's
# settings: Spec-Bench, 10 questions per subtask, 70 turns, 128 new tokens, greedy, 1 warm-up and 2 timed repeats,
# rotating order, 2 threads, the default engine: bfloat16 max-autotune here). Left out: hf-assisted-early-exit
# (transformers' LayerSkip, 0.26x in ../smollm2-cpu-epyc-n10-v3: a quarter of an hour for a known answer) and
# kangaroo-oracle (a greedy upper bound, not a decoder). The report uses n10-v8's profile (same engine code, taken
# just before). Every option is named, so a later change of defaults does not change what a rerun measures.
# Run from anywhere on a quiet machine (about 40 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-n10-v8-rest}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
METHODS=vanilla,lookahead:window=4:ngram=3:guesses=2:pool=8,self-spec:skip_ratio=0.2:gamma=7:eta=0.6:budget=max
METHODS+=,early_exit:exit_layer=2:gamma=6:draft_vocab=4096:budget=max
METHODS+=,medusa:tree=chain:draft_vocab=4096:budget=auto,hf-prompt-lookup:num_tokens=10
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
python -m specharness report "$OUT/runs" --profile results/smollm2-cpu-epyc-n10-v8/profile/profile.json \
    --out "$OUT/report"
