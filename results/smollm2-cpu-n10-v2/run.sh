#!/usr/bin/env bash
# The issues' joint run on engine v2: every self-drafter against vanilla and transformers' generate,
# interleaved question by question (rotating order) on the engine's default settings (bfloat16 +
# max-autotune, measured on this machine), 10 questions per Spec-Bench subtask, 128 new tokens,
# 2 warm-up generations per method (every graph compiled before timing), 2 timed repeats, 2 threads.
# Run it with nothing else on the machine. Rerunning resumes the same files (--resume).
# History of the committed files (2026-11-30): a first process was stopped after MT-bench question 81
# (to take the subtasks in turn); a second ran the rest. Reruns of q81 showed why some answers took
# 60 s: warm-up never prefilled a prompt wider than the widest width bucket, so the dynamic-width
# graph of each layer split compiled in the middle of a timed answer (vanilla q81, kangaroo q81/q82,
# medusa q82). Fixed in the engine (warm-up prefills such a prompt); q81 and q82 were removed from
# every file and redone by a third process (--resume), which compiled nothing while timing.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-n10-v2
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
python -m specharness compare \
    --methods vanilla,hf-generate,hf-prompt-lookup,kangaroo,medusa:lm_head=shared,medusa:lm_head=shared:tree=sized,eagle,pld,recycling,lookahead,self-spec \
    --bench-file "$BENCH" --limit "${LIMIT:-10}" --max-new-tokens 128 \
    --repeats 2 --warmup 2 --threads 2 --out-dir "$OUT" --resume
python -m specharness lossless --certify "$OUT" --bench-file "$BENCH"
python -m specharness report "$OUT" --profile results/smollm2-cpu-profile-v2/profile.json --out "$OUT/report"
