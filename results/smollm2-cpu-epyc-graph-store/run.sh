#!/usr/bin/env bash
# How long a run takes to start timing, with and without the graph store (model/graph_store.py):
# the README's main job on one question, Kangaroo + vanilla, bfloat16 max-autotune (the engine table's
# choice on AVX512-BF16). Nothing else may run on the machine. Writes the logs beside this script.
#   before: SPECHARNESS_AOT_GRAPHS=0 (torch.compile), run twice so the second hits inductor's disk cache
#   first:  an empty store: every graph is exported and built as a package
#   second: another Kangaroo option: every graph loads from the store
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) && mkdir -p "$tmp/b" "$tmp/s"
export SPECHARNESS_CACHE=${SPECHARNESS_CACHE:-$HOME/.cache/specharness}
run() {  # name, then the run's arguments
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  (time python -m specharness run --method kangaroo --limit 1 --subtasks qa "$@") 2>&1 \
    | python "$here/timestamps.py" "$t0" > "$here/$name.log"
}
SPECHARNESS_AOT_GRAPHS=0 run before_warmup --out "$tmp/b/b0.jsonl"
SPECHARNESS_AOT_GRAPHS=0 run before --out "$tmp/b/b1.jsonl"
rm -rf "$SPECHARNESS_CACHE/graphs"
run first_run --out "$tmp/s/k1.jsonl"
run second_run -o eta=0.4 --out "$tmp/s/k2.jsonl"
python "$here/store_ab.py" > "$here/store_ab.txt"
