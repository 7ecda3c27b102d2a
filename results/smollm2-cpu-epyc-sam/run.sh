#!/usr/bin/env bash
# SAM-Decoding (issue 36, part 2) against pld and recycling on today's engine. Two compare stages, each one
# interleaved compare with its own vanilla (rotating order, 1 warm-up + 2 timed repeats, bfloat16
# max-autotune, 2 threads, nothing compiled while timing), its certify and its report:
#   defaults/  the built-in sample questions (12 questions, 14 turns, written for this project, not
#              Spec-Bench's), 96 new tokens: min_match and the fallback scanned, to choose sam's defaults
#              on text the benchmark does not judge;
#   specbench/ Spec-Bench, 10 questions per subtask (70 turns), 128 new tokens: sam on those defaults,
#              with each fallback, beside pld and recycling.
#   profile/   the drafters' costs per round on the same engine (vanilla, pld, recycling, sam's three
#              fallbacks), and the Spec-Bench report again with the profile's prediction.
# Run from the repository root with nothing else on the machine (about 10 + 50 + 10 minutes; STAGE=defaults,
# specbench or profile runs one); rerunning resumes. Every option that was scanned is named, so a later
# change of defaults does not change what a rerun measures.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/smollm2-cpu-epyc-sam}
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
stage() {  # $1 folder, $2 methods, then compare's question and length arguments
    local dir=$1 methods=$2
    shift 2
    python -m specharness compare --methods "$methods" "$@" --dtype bfloat16 --compile max-autotune --threads 2 \
        --repeats 2 --warmup 1 --out-dir "$OUT/$dir/runs" --resume \
        2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/$dir/compare.log"
    python -m specharness lossless --certify "$OUT/$dir/runs" "${@:1:2}" 2>&1 | tee "$OUT/$dir/certify.log" \
        || echo "certify: not every divergence is certified ($dir/certify.log)"
    python -m specharness report "$OUT/$dir/runs" --out "$OUT/$dir/report"
}
if [ "${STAGE:-all}" != specbench ] && [ "${STAGE:-all}" != profile ]; then
    METHODS=vanilla,pld,recycling
    METHODS+=,sam:k=7:fallback=none:min_match=1,sam:k=7:fallback=none:min_match=2:short_matches=false
    METHODS+=,sam:k=7:fallback=recycling:min_match=1,sam:k=7:fallback=recycling:min_match=2
    METHODS+=,sam:k=7:fallback=recycling:min_match=2:short_matches=false,sam:k=7:fallback=recycling:min_match=3
    METHODS+=,sam:k=7:fallback=eagle:min_match=2,sam:k=7:fallback=eagle:min_match=3
    mkdir -p "$OUT/defaults"
    stage defaults "$METHODS" --bench sample --max-new-tokens 96
fi
if [ "${STAGE:-all}" = all ] || [ "${STAGE:-all}" = specbench ]; then
    # each fallback at stage 1's best min_match (README); short_matches on (the default)
    METHODS=vanilla,pld,recycling,sam:k=7:fallback=recycling:min_match=2
    METHODS+=,sam:k=7:fallback=none:min_match=1,sam:k=7:fallback=eagle:min_match=2
    mkdir -p "$OUT/specbench"
    stage specbench "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" --max-new-tokens 128
fi
if [ "${STAGE:-all}" = all ] || [ "${STAGE:-all}" = profile ]; then
    # the drafters' costs per round (bookkeeping included) on the same engine, then the report's prediction
    [ -f "$OUT/profile/profile.json" ] || python -m specharness profile --threads 2 --configs bfloat16/max-autotune \
        --widths 1,2,4,8 --contexts 256 --methods vanilla,pld,recycling,sam --variant sam:fallback=none:min_match=1 \
        --variant sam:fallback=eagle --out "$OUT/profile" 2>&1 | grep --line-buffered -v $'\r' | tee "$OUT/profile.log"
    python -m specharness report "$OUT/specbench/runs" --profile "$OUT/profile/profile.json" --out "$OUT/specbench/report"
fi
