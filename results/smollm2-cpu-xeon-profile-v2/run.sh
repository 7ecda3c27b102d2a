#!/usr/bin/env bash
# The engine profile of smollm2-cpu-xeon-profile re-taken after attention's additive bias (d3264e7),
# on the same kind of 2-core Intel Xeon with AMX and with the same command. A directory of its own:
# smollm2-cpu-xeon-n10's cost model was built on the profile in smollm2-cpu-xeon-profile, which stays
# as it was. About 20 minutes; run it with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared --variant medusa:lm_head=shared:tree=sized \
    --out results/smollm2-cpu-xeon-profile-v2
