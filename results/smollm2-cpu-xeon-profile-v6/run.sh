#!/usr/bin/env bash
# The engine profile of smollm2-cpu-xeon-profile-v5 re-taken with the narrow attention kernel's AMX
# path (specharness/narrow_attention.py: both products on AMX tiles from 9 query rows per key/value
# head, up to 64 positions; SDPA served 16 and up before), on the same kind of 2-core Intel Xeon with
# AMX and with the same command (Medusa's drafting timed on seeded random heads, heads_path=random).
# attention_amx_ab.py / .txt is attention alone by width (SDPA, the kernel's AVX512-BF16 path, its
# AMX path); amx_attention_ab.py / .txt is the interleaved full-model A/B. About 20 minutes; run it
# with nothing else on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m specharness profile --configs bfloat16/max-autotune,float32/none --threads 2 \
    -o medusa.lm_head=shared -o medusa.heads_path=random --variant medusa:lm_head=shared:tree=sized:heads_path=random \
    --out results/smollm2-cpu-xeon-profile-v6
