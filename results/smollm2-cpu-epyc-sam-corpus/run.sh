#!/usr/bin/env bash
# Issue 36: sam with a static corpus (-o corpus=FILE), the paper's lever for the rounds where neither a
# match in the text nor the recycling fallback drafts anything (32% of sam's rounds on Spec-Bench in
# ../smollm2-cpu-epyc-sam). The corpus is the target's own answers to 243 self-generated conversations
# (the self-distillation recipe, conversations=256, its 13 held-out ones left out): corpus.txt, made by
# make_corpus.py. One interleaved compare of vanilla, pld, sam and sam with the corpus on Spec-Bench,
# 10 questions per subtask (70 turns), 128 new tokens, 1 warm-up and 2 timed repeats, 2 threads, the
# default engine; then certify and report. ~15 min alone on the machine (corpus.txt committed; without
# it, ~8 min more to generate the data). Rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-cpu-epyc-sam-corpus}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
if [ ! -f "$OUT/corpus.txt" ]; then
    # the ranking it writes is not needed: only the self-distillation data it generates into the cache
    python -m specharness train draft-vocab -o conversations=256 --out "$(mktemp -d)" 2>&1 | grep -v $'\r' | tee "$OUT/data.log"
    python "$OUT/make_corpus.py" 256 "$OUT/corpus.txt"
fi
SAM=sam:k=7:fallback=recycling:min_match=2
METHODS="vanilla,pld:max_ngram=3:k=7,$SAM,$SAM:corpus=$OUT/corpus.txt"
python -m specharness compare --methods "$METHODS" --bench-file "$BENCH" --limit "${LIMIT:-10}" \
    --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/runs" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare.log"
python -m specharness lossless --certify "$OUT/runs" --bench-file "$BENCH" 2>&1 | tee "$OUT/certify.log" \
    || echo "certify: not every divergence is certified (certify.log)"
python -m specharness report "$OUT/runs" --out "$OUT/report"
