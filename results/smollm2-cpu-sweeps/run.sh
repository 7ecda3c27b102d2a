#!/bin/bash
# Reproduces results/smollm2-cpu-sweeps (about 60 min on 2 cores): train the sweep and ablation adapters, time data generation, then one sweep compare.
cd "$(dirname "$0")/../.."  # the repository root
date; echo START-TRAIN
R="-o conversations=256 -o max_answer_tokens=192 -o epochs=12"
A=$HOME/.cache/specharness/adapters/kangaroo
for L in 1 4 6 10 14 18 22; do
  [ -f $A/SmolLM2-135M-Instruct-l$L/report.json ] && continue
  rm -rf $A/SmolLM2-135M-Instruct-l$L
  python -m specharness train kangaroo $R -o exit_layer=$L --threads 2 2>&1 | grep -v "it/s\|step/s" | tail -4
done
for V in "-o ffn=true" "-o head=own"; do
  python -m specharness train kangaroo $R -o exit_layer=2 $V --threads 2 2>&1 | grep -v "it/s\|step/s" | tail -4
done
date; echo START-DATAGEN-TIMING
rm -rf /tmp/runs/dg /tmp/runs/dg-ad
python -m specharness train kangaroo -o conversations=32 -o max_answer_tokens=192 -o epochs=1 -o data=/tmp/runs/dg --out /tmp/runs/dg-ad --threads 2 2>&1 | grep -v "it/s\|step/s" | tail -3
python -c "import json;r=json.load(open('/tmp/runs/dg-ad/report.json'));print('DATAGEN', r['data']['conversations'], r['data']['answer_tokens'], r['data']['generation_wall_s'], r['data_wall_s_this_invocation'], r['peak_rss_gb'])"
date; echo START-SWEEP
M=vanilla
for G in 4 6 8; do for E in 0 0.2 0.4 0.6 0.8 0.9; do M="$M,kangaroo:eta=$E:gamma=$G"; done; done
M="$M,kangaroo:draft_vocab=0,kangaroo:adapter=random"
for G in 4 6 8; do M="$M,kangaroo-oracle:gamma=$G"; done
for L in 1 4 6 10 14 18 22; do M="$M,kangaroo:exit_layer=$L:adapter=$A/SmolLM2-135M-Instruct-l$L"; done
M="$M,kangaroo:adapter=$A/SmolLM2-135M-Instruct-l2-ffn,kangaroo:adapter=$A/SmolLM2-135M-Instruct-l2-ownhead"
python -m specharness compare --methods "$M" --limit 1 --max-new-tokens 128 --repeats 1 --warmup 1 --threads 2 --out-dir results/smollm2-cpu-sweeps 2>&1 | tail -5
date; echo DONE
