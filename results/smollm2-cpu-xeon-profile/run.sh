#!/usr/bin/env bash
# The engine profile on a 2-core Intel Xeon with AMX (avx512_bf16, amx_bf16), the kind of machine
# issue 11's targets were set on; profile-v3 ran the same command on a 2-core AMD EPYC without AMX.
# Same configurations: the engine's default (bfloat16 + max-autotune) and the float32 eager
# reference, Medusa on the shared LM head as a chain and as the sized tree. About 20 minutes; run it
# with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared --variant medusa:lm_head=shared:tree=sized \
    --out results/smollm2-cpu-xeon-profile
