#!/usr/bin/env bash
# The GPU check (docs/gpu.md): greedy identity against transformers' generate, the engine profile
# and a short interleaved compare, time-boxed (9 minutes by default) into one output folder of at
# most 8 files.
#
#   bash scripts/gpu-check.sh --device cuda --model FILE.gguf --out DIR   # on a GPU
#   bash scripts/gpu-check.sh --device cpu --dry-run --out DIR            # every stage, tiny sizes (tests)
#
# Every option of 'python -m specharness gpu-check --help' passes through (--budget SECONDS,
# --methods, --plugin, --work, --threads). Exit 0: every stage ran and identity held; 1: the
# summary says what to look at; 2: a bad argument (one line).
set -euo pipefail
PY=${PYTHON:-$(command -v python3 || command -v python)}
# progress bars refresh every 10 s, not 10 times a second: the log comes back as one file
export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=${TQDM_MININTERVAL:-10}
exec "$PY" -m specharness gpu-check "$@"
