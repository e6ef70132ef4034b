#!/usr/bin/env bash
# Time `hetc import` on big generated models whose weights are sparse files
# (no disk, never read): Alpa's GPT-39B by default, LLaMA-2-70B shapes with
# --all.  Prints generation time, file sizes, import wall time and peak RSS;
# asserts nothing about time.
#
# usage: bench/import_big/run.sh [--all] [--dump] [HETC]
#   HETC    the hetc binary (default: build/hetc, else the newest build*/hetc)
#   --all   also the LLaMA-2-70B-shaped model (GQA, SwiGLU, RoPE)
#   --dump  add --dump-ir-after=all (IR text after every pass) to the import
set -euo pipefail
all=0 dump=() hetc=""
for a in "$@"; do
  case $a in
    --all) all=1 ;;
    --dump) dump=(--dump-ir-after=all) ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) hetc=$(realpath "$a") ;;  # before the cd below
  esac
done
cd "$(dirname "$0")/../.."
# newest build*/hetc by mtime (build dir names are plain words)
# shellcheck disable=SC2012
if [ -z "$hetc" ]; then
  if [ -x build/hetc ]; then hetc=build/hetc
  else hetc=$(ls -t build*/hetc 2>/dev/null | head -1 || true); fi
fi
if [ -z "$hetc" ] || [ ! -x "$hetc" ]; then
  echo "run.sh: no hetc binary; build it or pass its path" >&2; exit 2
fi
[ -x /usr/bin/time ] || { echo "run.sh: /usr/bin/time missing (Debian: apt-get install time)" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/import_big.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# name | gen_model.py arguments | hetc import bindings
models=("gpt39b|--family gpt --layers 48 --hidden 8192 --heads 64 --vocab 51200 --seq 1024|--batch 1 --seq 1024")
[ $all = 1 ] && models+=("llama70b|--family llama --layers 80 --hidden 8192 --heads 64 --kv-heads 8 --ffn 28672 --vocab 32000 --seq 4096|--batch 1 --seq 4096")

echo "hetc: $hetc ($("$hetc" --version 2>/dev/null || echo '?'))"
for spec in "${models[@]}"; do
  IFS='|' read -r name genargs bind <<<"$spec"
  dir=$tmp/$name
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  python3 tools/gen_model.py $genargs -o "$dir/model.onnx" | sed 's/^/  gen: /'
  t1=$(date +%s.%N)
  logical=$(stat -c %s "$dir/model.onnx.data")
  ondisk=$(du -k "$dir/model.onnx.data" | cut -f1)
  echo "$name: generated in $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s; model.onnx $(stat -c %s "$dir/model.onnx") bytes;" \
       "data $logical bytes logical, ${ondisk} KiB on disk"
  rc=0
  # shellcheck disable=SC2086
  /usr/bin/time -v -o "$dir/time.txt" "$hetc" import "$dir/model.onnx" $bind "${dump[@]}" \
    -o "$dir/out" >"$dir/import.log" 2>&1 || rc=$?
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time.txt")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time.txt")
  echo "$name: hetc import $bind ${dump[*]}: exit $rc, wall $wall, peak RSS ${rss} KiB"
  sed 's/^/  import: /' "$dir/import.log" | tail -12
  if [ ${#dump[@]} -gt 0 ] && [ -d "$dir/out/ir" ]; then
    echo "  IR dumps: $(find "$dir/out/ir" -type f | wc -l) files, $(du -sk "$dir/out/ir" | cut -f1) KiB"
  fi
done
