#!/usr/bin/env bash
# A quiet profile of the engine's default (bfloat16 + max-autotune) and the float32 eager reference,
# with what the width curve can be on this machine: each dtype's floor, max(memory roofline, matmul
# FLOPs / the best matmul throughput measured here), and the model's matmuls with hot weights.
# Medusa runs on the shared LM head (its own heads are not in a fresh cache), as a chain (its
# default) and as the sized tree that results/smollm2-cpu-n10-v2 ran, so the cost model explains
# each file with the variant measured on its own options. Run it with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared --variant medusa:lm_head=shared:tree=sized \
    --out results/smollm2-cpu-profile-v3
# The cost model of the engine-v2 runs against this profile (their committed reports use the quieter
# results/smollm2-cpu-profile-v2): how far a second profile of the same machine moves the predictions.
for run in n10-v2 n10-v2-early-exit; do
    python -m specharness report "results/smollm2-cpu-$run" --profile results/smollm2-cpu-profile-v3/profile.json \
        --out "/tmp/specharness-report-$run"
    cp "/tmp/specharness-report-$run/cost_model_profile.md" "results/smollm2-cpu-profile-v3/cost_model_$run.md"
done
