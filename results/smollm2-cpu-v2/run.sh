#!/usr/bin/env bash
# The engine-v2 benchmark: every method interleaved question by question on SmolLM2-135M-Instruct,
# 5 Spec-Bench questions per subtask (both MT-bench turns), 128 new tokens, 2 timed repeats after a
# warm-up, 2 threads, the engine configuration this machine measured fastest (--dtype/--compile auto:
# see ../smollm2-cpu-profile). Then the greedy divergences are certified and the report is built with
# the profile's cost model. Needs Spec-Bench's question.jsonl (--bench-file) and trained heads (eagle
# ships; medusa: python -m specharness train medusa -o lm_head=shared).
# Nine methods, not the eleven planned: early_exit and hf-assisted-early-exit (in ../smollm2-cpu-n10)
# were left out to fit one working session. History of the committed files (each header's 'command'
# and 'resumed' record it): started with --limit 10; stopped after 6 MT-bench questions; resumed with
# LIMIT=5 (MT-bench and translation ran while a fresh-clone check shared the 2 cores: their timings are
# noisy, flagged as unstable); stopped after 2 summarization questions; finished with LIMIT=2. So MT-bench
# has 6 questions, translation 5, the others 2, below the issues' 10 per subtask: rerun with LIMIT=10
# to extend the same files. The first certification (fixed bfloat16 tolerance 0.05, below one ulp
# at these logits) exited 1; since commit "lossless: calibrated tolerance" the tolerance is twice
# the measured kernel noise and every divergence here is certified a near-tie.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-v2
python -m specharness compare \
    --methods vanilla,hf-generate,hf-prompt-lookup,kangaroo,medusa:lm_head=shared,medusa:lm_head=shared:tree=sized,eagle,pld,recycling \
    --bench-file "${SPECBENCH:-../shared/specbench/question.jsonl}" --limit "${LIMIT:-5}" --max-new-tokens 128 \
    --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT" --resume
python -m specharness lossless --certify "$OUT" --bench-file "${SPECBENCH:-../shared/specbench/question.jsonl}"
python -m specharness report "$OUT" --profile results/smollm2-cpu-profile/profile.json --out "$OUT/report"
