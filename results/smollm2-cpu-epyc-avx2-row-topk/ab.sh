# Whole runs with the kernel off and on, processes alternated twice: vanilla, recycling and pld on
# Spec-Bench's first question per subtask, 2 timed repeats, bfloat16 max-autotune, 2 threads.
#   bash results/smollm2-cpu-epyc-avx2-row-topk/ab.sh SCRATCH    (then: python .../bookkeeping.py SCRATCH)
set -euo pipefail
export SPECHARNESS_ENGINE=bfloat16/max-autotune
here="$(cd "$(dirname "$0")" && pwd)"
for i in 1 2; do for v in off on; do
  python "$here/run_switch.py" $v compare --methods vanilla,recycling,pld --limit 1 --repeats 2 --threads 2 \
    --bench-file ../shared/specbench/question.jsonl --out-dir "$1/$v-$i" > "$1/$v-$i.log" 2>&1
done; done
