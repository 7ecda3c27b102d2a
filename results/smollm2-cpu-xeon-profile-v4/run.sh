#!/usr/bin/env bash
# The engine profile of smollm2-cpu-xeon-profile-v3 re-taken with the bfloat16 K/V cache (attention
# over it through SDPA's flash kernel at widths > 1; specharness/target.py attend), on the same kind
# of 2-core Intel Xeon with AMX and with the same command. attention_ab.py / .txt is the A/B of
# attention alone that chose the kernels; bf16_cache_ab.py / .txt the interleaved full-model A/B of
# the change. About 20 minutes; run it with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared --variant medusa:lm_head=shared:tree=sized \
    --out results/smollm2-cpu-xeon-profile-v4
