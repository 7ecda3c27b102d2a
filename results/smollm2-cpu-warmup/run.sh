#!/usr/bin/env bash
# Issue 11's warm-up goal: how long a second run compiles. On one fresh inductor cache each:
#  - warm.py twice (vanilla's three graphs): compile seconds and inductor's FX-graph-cache counters;
#  - the main job (run --method kangaroo, 1 question, 32 tokens) twice: its header's warm-up record.
# Output: warmup.log. Run it with nothing else on the machine (about 15 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
out=results/smollm2-cpu-warmup/warmup.log
{ echo "# $(date -u +%FT%TZ) commit $(git rev-parse HEAD) $(python -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)')"
  export TORCHINDUCTOR_CACHE_DIR="$scratch/vanilla"
  for run in first second; do
      echo "## warm.py, $run process"
      python results/smollm2-cpu-warmup/warm.py 2>/dev/null | grep -E "Bypassing|compile_s"
  done
  export TORCHINDUCTOR_CACHE_DIR="$scratch/kangaroo"
  for run in first second; do
      echo "## run --method kangaroo, $run process"
      started=$(date +%s)
      python -m specharness run --method kangaroo --dtype bfloat16 --compile max-autotune --threads 2 --limit 1 \
          --subtasks qa --repeats 1 --max-new-tokens 32 --out "$scratch/$run/k.jsonl" > "$scratch/$run.log" 2>&1
      echo "process: $(( $(date +%s) - started )) s"
      python -c "import json,glob; print(json.dumps(json.load(open(glob.glob('$scratch/$run/k*.meta.json')[0]))['warmup']))"
  done; } > "$out.partial"
mv "$out.partial" "$out"
