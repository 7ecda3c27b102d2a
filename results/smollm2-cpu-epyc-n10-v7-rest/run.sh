#!/usr/bin/env bash
# The rest of the table on n10-v7's engine (../smollm2-cpu-epyc-n10-v7 left five methods out for time): vanilla,
# lookahead, self-spec, early_exit, medusa's chain and transformers' prompt lookup, with n10-v7's settings
# (Spec-Bench, 10 questions per subtask, 70 turns, 128 new tokens, greedy, 1 warm-up and 2 timed repeats, rotating
# order, 2 threads, the default engine: bfloat16 max-autotune here). EAGLE's tree runs twice in the same rotation,
# at its own size and with budget=auto: the sizer had never run on the graph store's packages, whose width curve
# (T=8 / T=1 1.45 at context 256) is the one it was built for. Then certify and the report against n10-v7's
# profile (same engine code). Every option is named, so a later change of defaults does not change what a rerun
# measures. Run from anywhere on a quiet machine (about 1 h); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-n10-v7-rest}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096
METHODS=vanilla,lookahead:window=4:ngram=3:guesses=2,self-spec:skip_ratio=0.2:gamma=7
METHODS+=,early_exit:exit_layer=2:gamma=6:draft_vocab=4096,medusa:tree=chain:draft_vocab=4096
METHODS+=,eagle:$EAGLE,eagle:$EAGLE:budget=auto,hf-prompt-lookup:num_tokens=10
mkdir -p "$OUT"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
# an uncertified divergence fails certify (exit 1); the files still get their report
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log); going on to the report"
# the report first against n10-v7's profile (same engine code, taken three hours earlier: report-n10-v7-profile/),
# then against this run's own, taken right after it
python -m specharness report "$OUT/runs" --profile results/smollm2-cpu-epyc-n10-v7/profile/profile.json \
    --out "$OUT/report-n10-v7-profile"
[ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
    --widths 1,2,4,8,16 --contexts 256 --methods vanilla,lookahead,self-spec,hf-prompt-lookup \
    --variant early_exit:draft_vocab=4096 --variant medusa:tree=chain:draft_vocab=4096 \
    --variant eagle:$EAGLE:budget=max --variant eagle:$EAGLE:budget=auto --out "$OUT/profile" 2>&1 \
    | grep --line-buffered -v $'\r' | tee "$OUT/profile.log"
python -m specharness report "$OUT/runs" --profile "$OUT/profile/profile.json" --out "$OUT/report"
