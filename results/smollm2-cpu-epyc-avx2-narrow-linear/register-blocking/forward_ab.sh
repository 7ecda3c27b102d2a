# Whole-model A/B of two commits' engines: a worktree each, their processes alternated 4 times (the
# first builds each tree's graphs into one shared scratch store). Usage, from the repository root:
#   bash results/smollm2-cpu-epyc-avx2-narrow-linear/register-blocking/forward_ab.sh BEFORE AFTER SCRATCH
set -euo pipefail
script="$(cd "$(dirname "$0")" && pwd)/forward_ab.py"
export SPECHARNESS_CACHE="$3/cache" TORCHINDUCTOR_CACHE_DIR="$3/inductor"
for rev in "$1" "$2"; do git worktree add -f "$3/$rev" "$rev" >/dev/null 2>&1 || true; done
for _ in 1 2 3 4; do
  for rev in "$1" "$2"; do (cd "$3/$rev" && PYTHONPATH="$3/$rev" python "$script" 2>/dev/null | tail -1); done
done
