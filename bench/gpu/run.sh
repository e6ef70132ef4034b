#!/usr/bin/env bash
# The whole GPU validation of hetc's CUDA backend, in one call on a lent GPU
# machine (docs/CUDA.md, "Running on a lent GPU"; bench/gpu/README.md).
#
#   bench/gpu/run.sh [--pack DIR] [--skip-bench] [--bench-steps N] [--no-torch-compile]
#                    [--bench-dtype fp32|bf16] [--profile] [--timeline]
#
# Needs the folder bench/gpu/pack.sh made on the development machine
# (default .gpu/, carried with the call): the stage binaries, the kernel test,
# the host reference losses and the runtime libraries; the machine itself
# gives CUDA, PyTorch and python3.  Parts, each under its own timeout:
#   (a) kernels   test_cuda_kernels: every device kernel vs its host twin;
#                 test_cuda_direct: the direct-call entries (hetrt_cu_*) vs
#                 their host twins; test_cuda_table: every op of the stage
#                 graphs has a kernel
#   (b) e2e       gpt_tiny --backend=cuda, one stage and tiny_hetero's three
#                 stages (ranks share the GPU: links and all-reduce run
#                 CPU-mediated, NCCL refuses two ranks on one GPU), 12 steps,
#                 losses vs `hetc train` on the host (computed when packing):
#                 max relative difference <= 1e-4; and the one stage in
#                 --precision bf16-mixed vs hetc train in bf16 (<= 1e-2)
#   (c) bench     bench/gpu/run.py: GPT-2 124M shape, B 8 x T 1024, hetc
#                 (packed build) vs PyTorch eager and torch.compile, fp32; with
#                 --bench-dtype bf16 hetc's bf16-mixed --fuse build vs PyTorch
#                 under bf16 autocast
#   (d) profile   (--profile) bench/gpu/kernel_profile.py: that build's kernels under
#                 ncu, grouped by family, ms per step and the GPU-busy share
#   (e) timeline  (--timeline) the same build for 6 steps with ktrace.c preloaded
#                 (CUPTI activity records, no serialisation): whole steps' GPU
#                 time by family and the idle share (ktrace_report.py)
# Logs go to $OUT (or --out DIR; default /tmp/hetc_gpu_out): env.log,
# kernels.log, e2e.log, bench.log, profile.log, ncu.csv, timeline.log,
# summary.md -- at most 8 files.  The
# summary table is printed last.  Exit 0 when every part that ran passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
pack=.gpu out=${OUT:-/tmp/hetc_gpu_out} bench=1 bench_steps=20 bench_compile=1 profile=0 timeline=0
bench_dtype=fp32
while (($#)); do
  case "$1" in
    --pack) pack=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-bench) bench=0; shift ;;
    --bench-steps) bench_steps=$2; shift 2 ;;
    --no-torch-compile) bench_compile=0; shift ;;
    --bench-dtype) bench_dtype=$2; shift 2
      [[ $bench_dtype == fp32 || $bench_dtype == bf16 ]] ||
        { echo "run.sh: --bench-dtype must be fp32 or bf16, not '$bench_dtype'" >&2; exit 2; } ;;
    --profile) profile=1; shift ;;
    --timeline) timeline=1; shift ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
[ -f "$pack/env.sh" ] || { echo "run.sh: no pack at $pack (run bench/gpu/pack.sh on the development machine and carry $pack)" >&2; exit 2; }
G=$(cd "$pack" && pwd)
. "$G/env.sh"
export PYTHONUNBUFFERED=1 HETRT_TIMEOUT_S=${HETRT_TIMEOUT_S:-120}
rows=()   # "part|what|result|detail"
fail=0
row() { rows+=("$1|$2|$3|$4"); [ "$3" = PASS ] || [ "$3" = info ] || fail=1; }
t0=$(date +%s)
budget=${RUN_BUDGET_S:-540}   # the whole script: the tool's limit is 600 s a command
# seconds a part may take: its own cap, or what is left of the budget
left() { local l=$(( t0 + budget - $(date +%s) - 15 )); (( l < $1 )) && echo $(( l > 5 ? l : 5 )) || echo "$1"; }

# --- environment --------------------------------------------------------------
{
  echo "== $(date -u)"; uname -a; nvidia-smi 2>&1 | head -20
  echo "== glibc here: $(ldd --version 2>&1 | head -1); the pack needs $(cat "$G/glibc_needed" 2>/dev/null)"
  echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "== stage binary's libraries"; ldd "$G/e2e/one/stage_0"
  echo "== mpirun"; mpirun --version 2>&1 | head -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1
} > "$out/env.log" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
missing=$(grep -c 'not found' <(ldd "$G/e2e/one/stage_0" "$G/bin/test_cuda_kernels" 2>&1))
if ((missing)); then
  row env "libraries" FAIL "$missing not found (env.log)"
else
  row env "libraries, GPU" PASS "${gpu:-no nvidia-smi}"
fi

# --- (a) kernels vs host twins ------------------------------------------------
{
  echo "== test_cuda_table"; timeout "$(left 30)" "$G/bin/test_cuda_table"; echo "exit $?"
  echo "== test_cuda_kernels"; timeout "$(left 120)" "$G/bin/test_cuda_kernels"; echo "exit $?"
  echo "== test_cuda_direct"; timeout "$(left 60)" "$G/bin/test_cuda_direct"; echo "exit $?"
} > "$out/kernels.log" 2>&1
for t in test_cuda_table test_cuda_kernels test_cuda_direct; do
  rc=$(sed -n "/^== $t\$/,/^exit /p" "$out/kernels.log" | sed -n 's/^exit //p')
  nf=$(sed -n "/^== $t\$/,/^exit /p" "$out/kernels.log" | grep -c '^FAIL')
  case "$rc" in
    0) row kernels "$t" PASS "$nf failure lines" ;;
    77) row kernels "$t" FAIL "skipped: no GPU seen" ;;
    *) row kernels "$t" FAIL "exit $rc, $nf failure lines (kernels.log)" ;;
  esac
done

# --- (b) end to end vs hetc train on the host --------------------------------
work=$(mktemp -d /tmp/hetc_gpu_e2e_XXXXXX)
: > "$out/e2e.log"
for name in one one_bf16 one_fused one_bf16_fused one_bf16_sr one_interp hetero; do
  d=$G/e2e/$name
  [ -x "$d/launch.sh" ] || { row e2e "gpt_tiny $name" FAIL "not packed"; continue; }
  [ -f "$d/ref_losses.json" ] || { row e2e "gpt_tiny $name" FAIL "no reference losses (a --quick pack?)"; continue; }
  steps=$(python3 -c 'import json,sys; print(max(map(int, json.load(open(sys.argv[1])))))' "$d/ref_losses.json")
  {
    echo "== $name: $(sed -n 's/^# \([0-9]* stages.*\)/\1/p' "$d/launch.sh")"
    HETRT_VERBOSE=1 timeout "$(left 90)" "$d/launch.sh" --data "$ROOT/examples/tiny_corpus.bin" \
      --steps "$steps" --checkpoint-dir "$work/$name"
    echo "exit $?"
  } > "$work/$name.log" 2>&1
  cat "$work/$name.log" >> "$out/e2e.log"
  # bf16-mixed: a bf16 rounding another summation order flips moves a value
  # by 2^-8, so 1e-2 per step (the issue's criterion is 1.5 % mean, 3 % each)
  tol=1e-4; [[ $name == one_bf16* ]] && tol=1e-2
  res=$(python3 - "$work/$name.log" "$d/ref_losses.json" "$tol" <<'EOF'
import json, re, sys
t = open(sys.argv[1]).read()
got = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", t, re.M)}
ref = {int(k): v for k, v in json.load(open(sys.argv[2])).items()}
if len(got) != len(ref):
    rc = re.findall(r"^exit (\d+)$", t, re.M)
    why = "; no CUDA device" if "no CUDA device" in t else ""
    print(f"FAIL|{len(got)} of {len(ref)} steps ran, exit {rc[-1] if rc else '?'}{why} (e2e.log)")
    raise SystemExit
rel = [abs(got[k] - ref[k]) / max(abs(ref[k]), 1e-30) for k in ref]
worst = max(rel); k = max(ref); tol = float(sys.argv[3])
print(f"{'PASS' if worst <= tol else 'FAIL'}|{len(got)} steps, max rel {worst:.2e} (<= {tol:g}), "
      f"loss {got[1]:.4f} -> {got[k]:.4f} (host {ref[1]:.4f} -> {ref[k]:.4f})")
EOF
)
  [ -n "$res" ] || res="FAIL|the loss comparison failed (e2e.log)"
  links=$(grep -o 'NCCL point-to-point\|CPU-mediated here\|: NCCL$' "$work/$name.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  row e2e "gpt_tiny $name" "${res%%|*}" "${res#*|}${links:+ [links:$links]}"
done
rm -rf "$work"

# --- (c) throughput vs PyTorch -------------------------------------------------
if ((bench)); then
  bd=$G/bench/gpt2
  if [ -f "$bd/init.tar.gz" ] && [ ! -d "$bd/init" ]; then tar -C "$bd" -xzf "$bd/init.tar.gz"; fi
  [ "$bench_dtype" = bf16 ] && bd=$G/bench/gpt2_bf16   # its init links to gpt2's
  extra=(); ((bench_compile)) || extra+=(--skip-compile)
  timeout "$(left 330)" python3 bench/gpu/run.py --prebuilt "$bd" --steps "$bench_steps" \
    --dtype "$bench_dtype" "${extra[@]}" > "$out/bench.log" 2>&1
  rc=$?
  if ((rc)); then
    row bench "GPT-2 124M B8xT1024 $bench_dtype" FAIL "exit $rc (bench.log)"
  fi
  while IFS= read -r l; do
    IFS='|' read -r _ _ label tps mfu ratio loss _ <<< "$l"
    row bench "$(echo $label)" info "$(echo $tps) tok/s, MFU $(echo $mfu), $(echo $ratio) of best PyTorch, step-1 loss $(echo $loss)"
  done < <(grep '^| ' "$out/bench.log" | grep -v '^| GPU |' | grep -v -- '| --- |')
fi

# --- (d) where the GPU time goes ---------------------------------------------
if ((profile)); then
  bd=$G/bench/gpt2
  if [ -f "$bd/init.tar.gz" ] && [ ! -d "$bd/init" ]; then tar -C "$bd" -xzf "$bd/init.tar.gz"; fi
  timeout "$(left 300)" python3 bench/gpu/kernel_profile.py --build "$bd" --data "$ROOT/examples/tiny_corpus.bin" \
    --steps 2 --out "$out" --timeout "$(left 280)" --launch-count "${PROFILE_LAUNCHES:-0}" > "$out/profile.log" 2>&1
  rc=$?
  if ((rc)); then row profile "GPT-2 124M kernels (ncu)" FAIL "exit $rc (profile.log)"
  else row profile "GPT-2 124M kernels (ncu)" info "$(head -1 "$out/profile.log")"; fi
fi

# --- (e) whole steps on the GPU clock ------------------------------------------
if ((timeline)); then
  bd=$G/bench/gpt2
  if [ -f "$bd/init.tar.gz" ] && [ ! -d "$bd/init" ]; then tar -C "$bd" -xzf "$bd/init.tar.gz"; fi
  [ -f "$G/bin/libktrace.so" ] || echo "run.sh: the pack has no bin/libktrace.so (pack.sh's warning)" >&2
  kt=$(mktemp -d)
  { LD_PRELOAD=$G/bin/libktrace.so HETC_KTRACE_DIR=$kt timeout "$(left 120)" "$bd/launch.sh" \
      --data "$ROOT/examples/tiny_corpus.bin" --steps 6 --checkpoint-dir "$kt/ckpt"
    echo "exit $?"
    python3 bench/gpu/ktrace_report.py "$kt" --skip 1; } > "$out/timeline.log" 2>&1
  rc=$?
  rm -rf "$kt"
  if ((rc)); then row timeline "GPT-2 124M whole steps (CUPTI)" FAIL "exit $rc (timeline.log)"
  else row timeline "GPT-2 124M whole steps (CUPTI)" info "$(grep '^steps:' "$out/timeline.log" | head -1)"; fi
fi

# --- summary -----------------------------------------------------------------
{
  echo "## hetc GPU validation: ${gpu:-?}, $(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - t0 )) s"
  echo
  echo "| part | what | result | detail |"
  echo "| --- | --- | --- | --- |"
  for r in "${rows[@]}"; do IFS='|' read -r a b c d <<< "$r"; echo "| $a | $b | $c | $d |"; done
  echo
  echo "overall: $( ((fail)) && echo FAIL || echo PASS )  (logs: $out)"
} > "$out/summary.md"
cat "$out/summary.md"
exit $fail
