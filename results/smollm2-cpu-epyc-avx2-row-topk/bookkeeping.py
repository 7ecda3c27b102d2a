"""Each ab.sh process's median per-round timers (ms) by method, from its result files' rounds.

    python results/smollm2-cpu-epyc-avx2-row-topk/bookkeeping.py SCRATCH
"""
import glob, json, os, statistics, sys

for run in sorted(glob.glob(os.path.join(sys.argv[1], "*-*/"))):
    cells = []
    for method in ("vanilla", "recycling", "pld"):
        timers = {"draft_s": [], "verify_s": [], "accept_s": []}
        for line in open(os.path.join(run, f"{method}-bfloat16-max-autotune-temp0-n128.jsonl")).read().splitlines()[1:]:
            for choice in json.loads(line)["choices"]:
                for rounds in choice["rounds"]:
                    for key in timers:
                        timers[key].extend(rounds[key])
        cells.append(f"{method} accept {statistics.median(timers['accept_s']) * 1e3:.3f} "
                     f"verify {statistics.median(timers['verify_s']) * 1e3:.2f} ({len(timers['accept_s'])} rounds)")
    print(os.path.basename(run.rstrip("/")), *cells, sep="\t")
