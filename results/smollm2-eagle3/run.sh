#!/usr/bin/env bash
# EAGLE-3 (issue 36, part 1) against EAGLE on the same self-distilled data (1100 conversations, 55 held out):
#   1. `train eagle3` on 256 and on all 1045 training conversations (4 epochs x 3 unrolled steps each), and on
#      all 1045 for 10 epochs (EAGLE's budget): that one is the head shipped in methods/eagle3/heads/ (copied
#      there by hand, with its card);
#   2. agreement.py: held-out top-1 of the shipped EAGLE head and the three EAGLE-3 heads on ONE measure, the
#      heads unrolled on their own outputs as they draft (float32);
#   3. one interleaved compare on Spec-Bench (bfloat16 max-autotune, 2 threads, 1 warm-up + 2 timed repeats,
#      nothing compiled while timing): vanilla, eagle, eagle3 (the shipped heads) and sam with the eagle3
#      fallback; its certify and report.
# Run from the repository root with nothing else on the machine (about 20 + 5 + 57 + 4 + 25 minutes); rerunning
# skips finished trainings and resumes the compare. LIMIT questions per subtask (default 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/smollm2-eagle3}
CKPT="${EAGLE3_CKPT:-${SPECHARNESS_CACHE:-$HOME/.cache/specharness}/eagle3-scaling}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
mkdir -p "$OUT/training"
for run in all:4 256:4 all-10ep:10; do
    size=${run%%:*}; epochs=${run##*:}; n=$([ "${size%-*}" = all ] && echo 0 || echo "$size")
    [ -f "$CKPT/eagle3-$size/report.json" ] || python -m specharness train eagle3 -o conversations=1100 \
        -o held_out=0.05 -o train_conversations="$n" -o epochs="$epochs" --threads 2 --out "$CKPT/eagle3-$size" \
        2>&1 | grep -E "^(epoch|specharness)" > "$OUT/training/eagle3-$size.log"
    cp "$CKPT/eagle3-$size/report.json" "$OUT/training/eagle3-$size.report.json"
done
[ -f "$OUT/agreement/agreement.json" ] || python "$OUT/agreement.py" --out "$OUT/agreement" eagle=shipped \
    eagle3-256="$CKPT/eagle3-256" eagle3-1045="$CKPT/eagle3-all" eagle3-1045-10ep="$CKPT/eagle3-all-10ep" \
    2>&1 | grep -v $'\r'
# specbench-10ep/: the head shipped now (eagle3-all-10ep, copied to methods/eagle3/heads/). specbench/ was run
# at a2a5234, when the shipped head was eagle3-all (4 epochs): that commit's run.sh reruns it.
dir="$OUT/specbench-10ep"
python -m specharness compare --methods vanilla,eagle,eagle3,sam:fallback=eagle3 --bench-file "$BENCH" \
    --limit "${LIMIT:-4}" --max-new-tokens 128 --dtype bfloat16 --compile max-autotune --threads 2 --repeats 2 \
    --warmup 1 --out-dir "$dir" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare-10ep.log"
python -m specharness lossless --certify "$dir" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify-10ep.log" \
    || echo "certify: not every divergence is certified ($OUT/certify-10ep.log)"
python -m specharness report "$dir" --out "$dir/report"
