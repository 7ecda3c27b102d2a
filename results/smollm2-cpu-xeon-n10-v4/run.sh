#!/usr/bin/env bash
# results/smollm2-cpu-xeon-n10 rerun on the engine of results/smollm2-cpu-xeon-profile-v4 (a bfloat16
# K/V cache with SDPA for wide forwards, inductor's C++ wrapper), with that profile's cost model: the
# same nine methods, questions, settings and interleaving. Run it with nothing else on the machine
# (about 80 minutes); rerunning resumes the same files.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/smollm2-cpu-xeon-n10-v4 PROFILE=results/smollm2-cpu-xeon-profile-v4/profile.json \
    bash results/smollm2-cpu-xeon-n10/run.sh
