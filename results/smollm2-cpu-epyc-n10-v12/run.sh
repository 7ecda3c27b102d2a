#!/usr/bin/env bash
# The headline table again on today's engine, on the AVX512-BF16 EPYC (n10-v11's machine kind). Since n10-v11: the
# row top-k/argmax kernel (../smollm2-cpu-epyc-avx2-row-topk: a round's topk and argmax as one call each), pld and
# recycling default to budget=auto (measured on the AVX2 EPYC, ../smollm2-cpu-epyc-avx2-budget), and kangaroo's
# option first_eta (../smollm2-cpu-epyc-avx2-kangaroo-first-eta). So beside n10-v11's methods this run holds, paired:
# pld and recycling at budget=max (their old default) as well as auto, and kangaroo at first_eta=0.35 as well as 0
# (the paper's). n10-v11's settings: Spec-Bench, 10 questions per subtask (70 turns), 128 new tokens, greedy, 1
# warm-up and 2 timed repeats, rotating order, 2 threads, the default engine (bfloat16 max-autotune here). Every
# option is named, so a later change of defaults does not change what a rerun measures. Then certify, the profile,
# the report. Run from anywhere on a quiet machine (about 100 min with a cold graph store); rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-n10-v12}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
EAGLE=depth=3:top_k=4:total_tokens=7:draft_vocab=4096:budget=auto
SAM=sam:k=7:fallback=recycling:min_match=2:budget=max
PLD=pld:max_ngram=3:min_ngram=1:k=7:nodes=7:occurrences=16
REC=recycling:top_k=8:nodes=7
KAN=kangaroo:exit_layer=2:eta=0.6:gamma=3:budget=max
METHODS=vanilla,$PLD:budget=auto,$PLD:budget=max,$REC:budget=auto,$REC:budget=max
METHODS+=,$SAM,$SAM:fallback_options=warm=true,$KAN:first_eta=0,$KAN:first_eta=0.35
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
