#!/usr/bin/env bash
# Kangaroo's eta and gamma for the adapter shipped since 2026-12-06 (trained on 2200 bfloat16-written conversations;
# eta 0.6 and gamma 3 were chosen on the one before it), and its row of the table on today's engine.
# 1. sim.py predicts every (eta, gamma) offline: teacher-forced drafts and confidences on vanilla's own answers,
#    costs from ../smollm2-kangaroo-bf16-data's timed rounds of this adapter (width 5-8: 11.6 ms, scaled from
#    ../smollm2-cpu-epyc-kangaroo-gamma's gamma-6 rounds), on the held-apart questions (the 11th-20th of each
#    subtask) and on the table's (the first 10).
# 2. The table's questions (n10-v7's settings and Kangaroo options): vanilla and kangaroo, for the README (table/).
# 3. One interleaved compare on the held-apart questions: vanilla, the defaults (0.6, 3), the prediction's best
#    (gamma 1: one draft a round) and its worst tried here (eta 0.3), n10-v7's settings (held-apart/).
# 4. The table's questions again, the new adapter against the one it replaced (table-ab/).
# Then certify and report each folder. The result headers' commands name the folders as first written (runs-table,
# runs, runs-table-ab; reports report-<that>): they were renamed to stage folders so that each report rebuilds
# from its own folder.
# About 70 min on 2 cores with a fresh graph store; rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/smollm2-kangaroo-eta}"
BENCH="${SPECBENCH:-../shared/specbench/question.jsonl}"
AD=methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2
ROUNDS="results/smollm2-kangaroo-bf16-data/runs/kangaroo-adapter=kangaroo-2200-bf16-bfloat16-max-autotune-temp0-n128.jsonl"
python results/smollm2-cpu-epyc-eagle-budget/held_apart.py "$BENCH" "$OUT/questions.jsonl" 10 20
[ -f "$OUT/sim_held_apart.json" ] || python "$OUT/sim.py" results/smollm2-kangaroo-bf16-data/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl \
    "$OUT/questions.jsonl" "$ROUNDS" "$AD" "$OUT/sim_held_apart.json" --width8-ms 11.6 2>&1 | grep -v Warning \
    | tee "$OUT/sim_held_apart.txt"
[ -f "$OUT/sim_table.json" ] || python "$OUT/sim.py" results/smollm2-cpu-epyc-n10-v7/runs/vanilla-bfloat16-max-autotune-temp0-n128.jsonl \
    "$BENCH" "$ROUNDS" "$AD" "$OUT/sim_table.json" --width8-ms 11.6 2>&1 | grep -v Warning | tee "$OUT/sim_table.txt"
python -m specharness compare --methods vanilla,kangaroo:exit_layer=2:eta=0.6:gamma=3 --bench-file "$BENCH" \
    --limit 10 --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 --out-dir "$OUT/table" --resume \
    2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare-table.log"
python -m specharness compare \
    --methods vanilla,kangaroo:exit_layer=2:eta=0.6:gamma=3,kangaroo:exit_layer=2:eta=0.6:gamma=1,kangaroo:exit_layer=2:eta=0.3:gamma=3 \
    --bench-file "$OUT/questions.jsonl" --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/held-apart" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare-held-apart.log"
# 4: f1e296e's adapter, extracted into OLD, so that step 2's row is not read against n10-v7's run on another
#    machine and compile.
OLD="${OLD_ADAPTER:-$HOME/.cache/specharness/adapters/kangaroo-1045-f32}"
if [ ! -f "$OLD/model.safetensors" ]; then
    git cat-file -e f1e296e 2>/dev/null || { echo "run.sh: commit f1e296e (the old adapter) is not in this clone; \
set OLD_ADAPTER to its directory"; exit 1; }
    mkdir -p "$OLD"
    for f in $(git ls-tree --name-only f1e296e methods/kangaroo/adapters/SmolLM2-135M-Instruct-l2/); do
        git show "f1e296e:$f" > "$OLD/$(basename "$f")"
    done
fi
python -m specharness compare \
    --methods "vanilla,kangaroo:exit_layer=2:eta=0.6:gamma=3,kangaroo:exit_layer=2:eta=0.6:gamma=3:adapter=$OLD" \
    --bench-file "$BENCH" --limit 10 --max-new-tokens 128 --repeats 2 --warmup 1 --threads 2 \
    --out-dir "$OUT/table-ab" --resume 2>&1 | grep --line-buffered -v $'\r' | tee -a "$OUT/compare-table-ab.log"
for R in table held-apart table-ab; do  # each run's folder holds its files, certify verdicts and report/
    python -m specharness lossless --certify "$OUT/$R" --bench-file "$([ "$R" = held-apart ] && echo "$OUT/questions.jsonl" || echo "$BENCH")" \
        2>&1 | tee "$OUT/certify-$R.log" || echo "certify: not every divergence is certified (certify-$R.log)"
    python -m specharness report "$OUT/$R" --out "$OUT/$R/report"
done
