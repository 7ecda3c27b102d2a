#!/usr/bin/env bash
# The headline table again on the engine of ../smollm2-cpu-epyc-bookkeeping: the prefill runs the LM head at the
# prompt's last position alone (12-17% off every prefill, which was 24% of vanilla's time), and a round makes fewer
# torch calls outside the target (the engine's kept rows as views; recycling's matrix as a dict of lists). n10-v10's
# settings and methods (Spec-Bench, 10 questions per subtask, 70 turns, 128 new tokens, greedy, 1 warm-up and 2
# timed repeats, rotating order, 2 threads, the default engine: bfloat16 max-autotune here), less pld's old rule
# (measured against the vote in n10-v10). Left out for time, as in n10-v8 to n10-v10 (their drafters have not
# changed since ../smollm2-cpu-epyc-n10-v8-rest measured them): self-spec, lookahead, early_exit, medusa's chain,
# hf-prompt-lookup. Then certify, the profile, the report. Every option is named, so a later change of defaults
# does not change what a rerun measures.
# Run from anywhere on a quiet machine (about 65 min); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-n10-v11}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096:budget=auto
SAM=sam:k=7:fallback=recycling:min_match=2:budget=max
PLD=pld:max_ngram=3:min_ngram=1:k=7:nodes=7:budget=max
METHODS=vanilla,$PLD:occurrences=16,recycling:top_k=8:nodes=7:budget=max
METHODS+=,$SAM,$SAM:fallback_options=warm=true,kangaroo:exit_layer=2:eta=0.6:gamma=3:budget=max
METHODS+=,eagle:$EAGLE,eagle:mode=chain:$EAGLE,eagle3:$EAGLE
METHODS+=,medusa:tree=sized:tree_size=7:draft_vocab=4096:budget=auto,hf-generate
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
