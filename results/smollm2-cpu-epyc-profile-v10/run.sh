#!/usr/bin/env bash
# Three profiles of one commit, back to back (repository root, nothing else running; ~5 min each with a
# warm graph store, ~20 min more with a cold one): n10-v12's profile command plus kangaroo:eta=0, at the
# default 16 passes over the drafters. The first is this folder's profile, the others repeats/2 and /3.
set -euo pipefail
here=results/smollm2-cpu-epyc-profile-v10
for i in 1 2 3; do
  out=$here; [ "$i" = 1 ] || out=$here/repeats/$i
  mkdir -p "$out"
  python -m specharness profile --threads 2 --configs bfloat16/max-autotune --widths 1,2,4,8,16 --contexts 256 \
    --variant eagle:mode=chain --variant kangaroo:eta=0 --out "$out" 2>&1 | tee "$out/profile.log"
  [ "$i" = 1 ] || rm -f "$out/profile.png"  # one figure is enough
done
