#!/bin/bash
# PAUSE_PGID: a process group to stop during the second run (this machine was shared). Warm-up of `run --method kangaroo` (bf16 max-autotune), twice on one inductor cache; prints the header's warmup
set -uo pipefail
cd "$(dirname "$0")/../.."
export TORCHINDUCTOR_CACHE_DIR=${IND:-$(mktemp -d ${TMPDIR:-/tmp}/ind.XXXX)}
echo "cache $TORCHINDUCTOR_CACHE_DIR prepack=${TORCHINDUCTOR_CPP_WEIGHT_PREPACK:-1}"
for run in 1 2; do
  out=$(mktemp -d ${TMPDIR:-/tmp}/run.XXXX)
  [ "$run" = 2 ] && [ -n "${PAUSE_PGID:-}" ] && kill -STOP -- -$PAUSE_PGID
  s=$(date +%s)
  python -m specharness run --method kangaroo --dtype bfloat16 --compile max-autotune --threads 2 --limit 1 \
     --subtasks qa --repeats 1 --max-new-tokens 32 --out $out/k.jsonl > $out/log 2>&1
  echo "run $run rc=$? $(( $(date +%s) - s )) s"
  [ "$run" = 2 ] && [ -n "${PAUSE_PGID:-}" ] && kill -CONT -- -$PAUSE_PGID
  python -c "import json,glob; m=json.load(open(glob.glob('$out/k*.meta.json')[0])); print(json.dumps(m.get('warmup')))"
done
