#!/usr/bin/env bash
# The user's path (issue 34): the README's first command, verbatim, in a clone of this commit in an
# empty temp folder, with a fresh HOME (so fresh ~/.cache/specharness: no model, kernel or graph),
# a new venv and a fresh inductor cache; then a second run with another Kangaroo option in the same
# clone. Nothing else may run on the machine. Logs (seconds since launch on each line) go beside
# this script: user_path_first.log, user_path_second.log; the runs' result files to user_path_runs/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
git clone -q "$repo" "$work/specharness"
cd "$work/specharness"
python -m venv "$work/venv"
export HOME="$work/home" TORCHINDUCTOR_CACHE_DIR="$work/inductor" PATH="$work/venv/bin:$PATH"
unset SPECHARNESS_CACHE VIRTUAL_ENV
mkdir -p "$HOME"
first=$(grep -m1 '^pip install .*python -m specharness run' README.md)  # the README's command 1
echo "command 1: $first"
t0=$(date +%s.%N)
(time bash -c "$first") 2>&1 | python "$here/../smollm2-cpu-epyc-graph-store/timestamps.py" "$t0" > "$here/user_path_first.log"  # each run then moved into run<N>_<commit>/
t0=$(date +%s.%N)
(time python -m specharness run --method kangaroo -o eta=0.4 --limit 5) 2>&1 \
  | python "$here/../smollm2-cpu-epyc-graph-store/timestamps.py" "$t0" > "$here/user_path_second.log"
mkdir -p "$here/user_path_runs"
cp -r results/runs/. "$here/user_path_runs/" 2>/dev/null || find . -name '*.jsonl' -newer README.md -exec cp {} "$here/user_path_runs/" \;
echo "clone left in $work (delete it when read)"
