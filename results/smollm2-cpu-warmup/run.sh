#!/usr/bin/env bash
# Issue 11's warm-up goal: how long a second run compiles. Two processes on one fresh inductor
# cache; each prints its compile seconds and inductor's FX-graph-cache counters (warmup.log).
# Run it with nothing else on the machine (about 8 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
export TORCHINDUCTOR_CACHE_DIR="$(mktemp -d)"
trap 'rm -rf "$TORCHINDUCTOR_CACHE_DIR"' EXIT
out=results/smollm2-cpu-warmup/warmup.log
{ echo "# $(date -u +%FT%TZ) commit $(git rev-parse HEAD) $(python -c 'import torch,transformers;print("torch",torch.__version__,"transformers",transformers.__version__)')"
  for run in first second; do
      echo "## $run process"
      python results/smollm2-cpu-warmup/warm.py 2>/dev/null | grep -E "Bypassing|compile_s"
  done; } > "$out.partial"
mv "$out.partial" "$out"
