#!/usr/bin/env bash
# The first GPU runs (2026-12-04), as they were made: device calls, not a local script. Kept to say
# exactly what ran; docs/gpu.md says how to make such calls.
#
# The repository's tree (86 MiB with results/) no longer fits a device command's 64 MiB, so the
# calls ran from a temporary, never-pushed branch without results/ and methods/eagle3/heads/
# (28 MiB), which let the GGUF travel in 3 parts instead of 5:
#   git checkout -b gpu-travel && git rm -r -q results methods/eagle3/heads && git commit -m travel
#   bash scripts/gpu-pack.sh            # -> gpu-pack/common + part00..part02
# Lease 1 (tree at 0a7936e), three calls back to back, carrying gpu-pack/common and part00, part01, part02:
#   bash scripts/gpu-pack.sh install && bash scripts/gpu-check.sh --device cuda \
#       --model /tmp/specharness-gpu/SmolLM2-135M-Instruct.gguf --out $OUT
#   -> lease1/ (every stage timed out but the margins; the compare's files -> compare/)
# Lease 2 (tree as committed in 6174571: --stages, incremental profile), same three calls, then two
# on the warm machine:
#   bash scripts/gpu-pack.sh install && bash scripts/gpu-check.sh --device cuda \
#       --model /tmp/specharness-gpu/SmolLM2-135M-Instruct.gguf --out $OUT --stages profile-compiled --budget 240
#   bash scripts/gpu-check.sh --device cuda --model /tmp/specharness-gpu/SmolLM2-135M-Instruct.gguf --out $OUT \
#       --stages identity --budget 150
#   bash scripts/gpu-check.sh --device cuda --model /tmp/specharness-gpu/SmolLM2-135M-Instruct.gguf --out $OUT \
#       --stages profile-eager --budget 80
#   -> lease2-profile-compiled/, lease2-identity/, lease2-profile-eager/
#
# Here, from what came back:
set -euo pipefail
cd "$(dirname "$0")/../.."
R=results/smollm2-h200-check
python - <<'PY'
import json
from pathlib import Path
from specharness import gpu_check, profile
R = Path("results/smollm2-h200-check")
parts = [json.loads((R / f"lease2-profile-{w}" / "profile.json").read_text()) for w in ("eager", "compiled")]
merged = gpu_check.merge_profiles(parts)
profile.save(merged, R)
profile.figure(merged, R / "profile.png")
PY
python -m specharness report $R/compare --out $R/compare/report
