#!/usr/bin/env bash
# The engine profile of smollm2-cpu-xeon-profile-v4 re-taken with the narrow attention kernel
# (specharness/narrow_attention.py: our C++ kernel for forwards of 2-8 positions over a bfloat16
# cache), on the same kind of 2-core Intel Xeon with AMX and with the same command, except that
# Medusa's drafting costs are timed on seeded random heads (heads_path=random: a step costs the same
# whatever the weights, and trained heads live in a cache this machine may not have).
# The drafters' entries were then re-taken at the cost model's weights_options change (profile --drafters-only,
# the same -o and --variant; its command is in profile.json). narrow_attention_ab.py / .txt is the interleaved full-model A/B of the kernel. About 20 minutes;
# run it with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared -o medusa.heads_path=random --variant medusa:lm_head=shared:tree=sized:heads_path=random \
    --out results/smollm2-cpu-xeon-profile-v5
