#!/usr/bin/env bash
# The engine profile of smollm2-cpu-xeon-profile-v2 re-taken with the AMX GEMM template's weight
# prefetch (specharness/amx_prefetch.py), on the same kind of 2-core Intel Xeon with AMX and with the
# same command; amx_prefetch_ab.py / .txt is the interleaved full-model A/B of the prefetch alone.
# About 20 minutes; run it with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared --variant medusa:lm_head=shared:tree=sized \
    --out results/smollm2-cpu-xeon-profile-v3
