#!/usr/bin/env bash
# Prepare the GPU validation (bench/gpu/run.sh) on a machine WITHOUT a GPU.
#
#   bench/gpu/pack.sh [--quick] [--build DIR] [--out DIR]     build + pack + check
#   bench/gpu/pack.sh --check-only [--out DIR]                only the checks
#
# The lent GPU machine has CUDA 13 (cudart, cuBLASLt; NCCL in PyTorch's
# wheels), PyTorch, onnx and onnxruntime, but none of hetc's Debian build
# dependencies (LLVM 14, protobuf-c, libyaml, OpenMPI, OpenBLAS, ...) and no
# network; what travels is the working tree plus at most 8 ignored paths, 64
# MiB in all.  libLLVM alone is 105 MiB, so the hetc compiler does not
# travel: the stage programs are compiled HERE, with their plans, configs and
# initial checkpoints, and the host reference losses (`hetc train`) are
# computed here too.  Into ONE ignored folder (default .gpu/):
#
#   bin/       test_cuda_kernels, test_cuda_direct (kernels and the direct-call
#              entries vs host twins), test_cuda_table
#   e2e/NAME/  `hetc --backend=cuda` builds of examples/gpt_tiny.onnx: `one`
#              (one stage, direct kernel calls), `one_bf16` (the
#              same in --precision bf16-mixed), `one_fused` (--fuse: the
#              fused kernels as launched PTX), `one_bf16_fused`, `one_interp`
#              (--interpret-nodes) and `hetero` (examples/clusters/
#              tiny_hetero.yaml, 3 stages); e2e/NAME/ref_losses.json: `hetc
#              train`'s losses (host)
#   bench/gpt2_bf16/  the same in --precision bf16-mixed --fuse (its init:
#              bench/gpt2's)
#   bench/gpt2/  the GPT-2 124M shape (tools/gen_model.py, zero weights:
#              throughput only) compiled --backend=cuda, B 8 x T 1024; its
#              initial checkpoint (500 MB of zeros) as init.tar.gz
#   lib/       every shared library those ELF files need that the GPU machine
#              lacks (found with ldd), debug info stripped
#   ompi/      OpenMPI's mpirun and MCA plugins, relocated (OPAL_PREFIX)
#   env.sh     the environment run.sh sources (OPAL_PREFIX, plugin paths,
#              LD_LIBRARY_PATH with the machine's CUDA/NCCL libraries)
#
# Checks (also --check-only): size under 60 MiB; every ELF's libraries
# resolve from lib/ or the machine's own set (glibc, libstdc++, CUDA, NCCL);
# mpirun runs from the folder without loading any system OpenMPI/PMIx file
# (LD_DEBUG=files); the stage binary and the kernel test stop with a clear
# "no CUDA device" message, not a crash.  --quick skips the 3-stage and the
# 124M builds and the reference losses, and compresses least (the ctest
# gpu_pack uses it: not a pack to carry).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
build=build out=.gpu quick=0 check_only=0
while (($#)); do
  case "$1" in
    --quick) quick=1; shift ;;
    --check-only) check_only=1; shift ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pack.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
LIMIT_MIB=62   # the tool's limit: 64 MiB for the tree and the carried paths together
# libraries the GPU machine provides itself (its glibc, compiler runtime, CUDA)
SYSTEM_RE='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libutil|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-ml)\.so'
die() { echo "pack.sh: $*" >&2; exit 1; }
G=$(mkdir -p "$out" && cd "$out" && pwd)

# --- build ------------------------------------------------------------------
pack() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    die "nvcc not found: the CUDA backend cannot be built here"
  if [ ! -x "$build/hetc" ] || [ ! -x "$build/tests/cuda/test_cuda_direct" ]; then
    echo "== building hetc with the CUDA backend (sm_80, sm_90) in $build"
    scripts/build "$build" -DHETC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="80;90"
  fi
  [ -x "$build/tests/cuda/test_cuda_kernels" ] ||
    die "$build has no CUDA backend (configure with -DHETC_CUDA=ON)"
  local hetc=$build/hetc G0=$G
  # everything is made in root/, then travels as one xz tarball (stage
  # binaries and OpenBLAS compress 3-4x) that env.sh unpacks into /tmp
  rm -rf "$G0"; G=$G0/root; mkdir -p "$G"/{bin,lib,e2e,bench,ompi}
  cp "$build/tests/cuda/test_cuda_kernels" "$build/tests/cuda/test_cuda_table" \
     "$build/tests/cuda/test_cuda_direct" "$G/bin/"
  # the timeline recorder (run.sh --timeline): CUPTI, packed with it below
  local cuda_home; cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
  cc -std=c11 -O2 -Wall -shared -fPIC -I"$cuda_home/include" bench/gpu/ktrace.c \
     -L"$cuda_home/lib64" -L"$cuda_home/lib" -lcupti -o "$G/bin/libktrace.so" ||
    echo "pack: warning: bench/gpu/ktrace.c did not build against $cuda_home's CUPTI: run.sh --timeline will fail" >&2

  # e2e: the same settings as tests/cuda/test_cuda_e2e.py
  local SEQ=64 MB=4 GB=16 STEPS=12
  local OPT=(--lr 3e-3 --warmup 3 --lr-schedule cosine)
  printf 'name: one-gpu\ndtype: fp16\nmeshes:\n  - name: gpu\n    device: A100-80GB\n    nodes: 1\n    devices_per_node: 1\n' \
    > "$G/e2e/one_gpu.yaml"
  # NAME:CLUSTER[:FLAGS] (FLAGS comma-separated): one stage with direct kernel calls (the default of
  # --backend=cuda: codegen/lower_node_cuda.c) and with every node
  # interpreted, and tiny_hetero's 3 stages
  # one_bf16: the one stage in --precision bf16-mixed (issue 17), against
  # hetc train --precision bf16-mixed on the host
  # one_fused: the one stage with --fuse, its fused kernels generated PTX
  # launched by hetrt_cu_launch (gpt_tiny fuses the update's clip scale);
  # one_bf16_fused: the same in bf16-mixed, where the Casts fuse with GELU,
  # the residual adds and their gradients (kernels loading / storing bf16)
  # one_bf16_sr: bf16-mixed with the weight copies rounded stochastically
  # (hkc_round_bf16_sr draws the host twin's bits)
  local cases=("one:$G/e2e/one_gpu.yaml" "one_interp:$G/e2e/one_gpu.yaml:--interpret-nodes"
               "one_bf16:$G/e2e/one_gpu.yaml:--precision=bf16-mixed"
               "one_fused:$G/e2e/one_gpu.yaml:--fuse"
               "one_bf16_fused:$G/e2e/one_gpu.yaml:--precision=bf16-mixed,--fuse"
               "one_bf16_sr:$G/e2e/one_gpu.yaml:--precision=bf16-mixed,--bf16-rounding=stochastic")
  ((quick)) || cases+=("hetero:examples/clusters/tiny_hetero.yaml")
  for c in "${cases[@]}"; do
    local name cl flags d pflag f fl
    IFS=: read -r name cl flags <<< "$c"
    d=$G/e2e/$name
    # every case names its precision, the compile and its host reference
    # alike: fp32 unless its FLAGS say otherwise (hetc's default is
    # bf16-mixed, --backend=cuda's fp32)
    pflag=--precision=fp32
    local flag=() rflag=()
    IFS=, read -r -a fl <<< "$flags"
    for f in "${fl[@]+"${fl[@]}"}"; do
      if [[ $f == --precision=* ]]; then pflag=$f; else flag+=("$f"); fi
      # what changes the numbers goes to the host reference too
      [[ $f == --bf16-rounding=* ]] && rflag+=("$f")
    done
    echo "== compile $name ($cl) --backend=cuda ${flag[*]+"${flag[*]}"} $pflag"
    "$hetc" examples/gpt_tiny.onnx "$cl" --backend=cuda ${flag[@]+"${flag[@]}"} "$pflag" --seq $SEQ --microbatch $MB \
      --global-batch $GB --threads 2 --steps $STEPS "${OPT[@]}" -o "$d" > "$d.compile.log" 2>&1 ||
      { tail -20 "$d.compile.log" >&2; die "hetc compile of $name failed"; }
    # the initial checkpoint is layer-wise, the same for every plan: one copy
    if [ "$name" != one ] && diff -rq "$G/e2e/one/init" "$d/init" > /dev/null; then
      rm -rf "$d/init"; ln -s ../one/init "$d/init"
    fi
    ((quick)) && continue   # the checks need no reference losses
    local K ref
    K=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['microbatches'])" "$d/plan.json")
    # the reference depends only on the accumulation count K and the
    # precision (same model, data and optimizer): one hetc train per pair
    ref=$G/e2e/ref_k${K}_${pflag#--precision=}${rflag[0]:+_${rflag[0]#--bf16-rounding=}}.json
    if [ -f "$ref" ]; then cp "$ref" "$d/ref_losses.json"; continue; fi
    echo "== reference: hetc train (host), $STEPS steps, accum $K $pflag"
    "$hetc" train examples/gpt_tiny.onnx --data examples/tiny_corpus.bin --steps $STEPS \
      --microbatch $MB --accum "$K" --seq $SEQ "${OPT[@]}" "$pflag" ${rflag[@]+"${rflag[@]}"} --no-checkpoint \
      > "$d/ref_train.log"
    python3 - "$d/ref_train.log" "$d/ref_losses.json" <<'EOF'
import json, re, sys
t = open(sys.argv[1]).read()
l = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", t, re.M)}
assert l, "no loss lines in " + sys.argv[1]
json.dump(l, open(sys.argv[2], "w"), indent=0)
EOF
    cp "$d/ref_losses.json" "$ref"
    rm -f "$d"/stage_*.ll
  done

  if ! ((quick)); then
    # bench: GPT-2 124M shape, the shape bench/gpu/run.py trains in PyTorch
    local bd=$G/bench/gpt2 tmp
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/hetc_pack_XXXXXX")
    echo "== GPT-2 124M ONNX (zero weights) and its --backend=cuda build"
    python3 tools/gen_model.py --family gpt --layers 12 --hidden 768 --heads 12 --vocab 50257 \
      --seq 1024 -o "$tmp/gpt2.onnx" > "$tmp/gen.log"
    printf 'name: one-gpu\ndtype: fp32\nmeshes:\n  - name: gpu\n    device: A100-80GB\n    nodes: 1\n    devices_per_node: 1\n' \
      > "$tmp/one_gpu.yaml"
    "$hetc" "$tmp/gpt2.onnx" "$tmp/one_gpu.yaml" --backend=cuda --precision=fp32 --seq 1024 --microbatch 8 \
      --global-batch 8 --steps 20 --lr 1e-3 -o "$bd" > "$G/bench/gpt2.compile.log" 2>&1 ||
      { tail -20 "$G/bench/gpt2.compile.log" >&2; die "hetc compile of the GPT-2 bench failed"; }
    tar -C "$bd" -czf "$bd/init.tar.gz" init
    # the same model in bf16-mixed with the fused kernels as PTX (issue 17's
    # bench in bf16: run.sh --bench-dtype bf16); its initial checkpoint is
    # the fp32 build's (fp32 master weights), unpacked there by run.sh
    local bd16=$G/bench/gpt2_bf16
    "$hetc" "$tmp/gpt2.onnx" "$tmp/one_gpu.yaml" --backend=cuda --precision=bf16-mixed --fuse --seq 1024 \
      --microbatch 8 --global-batch 8 --steps 20 --lr 1e-3 -o "$bd16" > "$G/bench/gpt2_bf16.compile.log" 2>&1 ||
      { tail -20 "$G/bench/gpt2_bf16.compile.log" >&2; die "hetc compile of the bf16 GPT-2 bench failed"; }
    diff -rq "$bd/init" "$bd16/init" > /dev/null ||
      die "the bf16 GPT-2 bench's initial checkpoint differs from the fp32 build's"
    rm -rf "$bd16/init"; ln -s ../gpt2/init "$bd16/init"
    rm -rf "$bd/init" "$tmp"
  fi

  # strip debug info of what we ship (the stage binaries keep their symbols)
  strip --strip-debug "$G"/bin/* "$G"/e2e/*/stage_* "$G"/bench/*/stage_* 2>/dev/null || true

  # OpenMPI: mpirun + its plugins under a relocatable prefix.  Debian's
  # layout relative to the prefix: bin/, lib/x86_64-linux-gnu/openmpi/lib/
  # openmpi3 (MCA components), share/openmpi (help texts).
  local op=$G/ompi plug=lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  mkdir -p "$op/bin" "$op/$plug" "$op/share" "$op/pmix2/lib/pmix"
  cp -L "$(readlink -f "$(command -v mpirun)")" "$op/bin/mpirun"
  cp -L /usr/bin/orted "$op/bin/" 2>/dev/null || true
  cp -r /usr/share/openmpi "$op/share/"
  local p
  for p in /usr/$plug/mca_*.so; do
    # interconnect plugins (UCX, libfabric, PSM, verbs) need libraries the
    # machine lacks and a one-node job never uses
    case "$(basename "$p")" in
      *ucx*|*ofi*|*psm*|*openib*|*_flux*|*treematch*|*io_romio*|*fcoll*|*fbtl*|*sharedfp*|*_fs_*|*monitoring*) continue ;;
    esac
    cp "$p" "$op/$plug/"
  done
  # PMIx (Debian: prefix /usr/lib/x86_64-linux-gnu/pmix2) relocates by PMIX_PREFIX
  cp /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so "$op/pmix2/lib/pmix/"
  strip --strip-unneeded "$op/bin/"* "$op/$plug/"*.so "$op/pmix2/lib/pmix/"*.so

  # every library the ELF files need that the machine lacks, transitively
  local elfs f lib seen=" "
  mapfile -t elfs < <(find "$G" -type f \( -name 'stage_*' -o -name '*.so' -o -path '*/bin/*' \) \
                        ! -name '*.log' ! -name '*.ll' -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
  while ((${#elfs[@]})); do
    local next=()
    for f in "${elfs[@]}"; do
      while read -r lib; do
        local base; base=$(basename "$lib")
        [[ $base =~ $SYSTEM_RE ]] && continue
        [[ $seen == *" $base "* ]] && continue
        seen+="$base "
        cp -L "$lib" "$G/lib/$base"; chmod u+w "$G/lib/$base"
        strip --strip-unneeded "$G/lib/$base"
        next+=("$G/lib/$base")
      done < <(LD_LIBRARY_PATH="$G/lib" ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
    done
    elfs=("${next[@]+"${next[@]}"}")
  done

  # glibc: the newest symbol version any packed file needs (run.sh logs it
  # beside the machine's)
  find "$G" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print0 |
    xargs -0 objdump -T 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1 \
    > "$G/glibc_needed"
  echo "== compressing $(du -sm --apparent-size "$G" | cut -f1) MiB"
  tar -C "$G" -cf - . | xz -T2 "$( ((quick)) && echo -0 || echo -6)" > "$G0/pack.tar.xz"
  rm -rf "$G"; G=$G0

  cat > "$G/env.sh" <<'EOF'
# sourced by bench/gpu/run.sh: the packed runtime (bench/gpu/pack.sh).
# pack.tar.xz is unpacked once per pack into HETC_GPU (python's tarfile:
# the machine may lack xz); G is that tree from here on.
_tb=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pack.tar.xz
HETC_GPU=${TMPDIR:-/tmp}/hetc_gpu_$(id -u)_$(echo "$_tb" | cksum | cut -d' ' -f1)
_stamp=$(stat -c '%s.%Y' "$_tb")
if [ "$(cat "$HETC_GPU/.stamp" 2>/dev/null)" != "$_stamp" ]; then
  rm -rf "$HETC_GPU" && mkdir -p "$HETC_GPU" &&
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$_tb" "$HETC_GPU" && echo "$_stamp" > "$HETC_GPU/.stamp" ||
    echo "env.sh: cannot unpack $_tb into $HETC_GPU" >&2
fi
export HETC_GPU
G=$HETC_GPU
export OPAL_PREFIX=$G/ompi
export PATH=$G/ompi/bin:$PATH
export OMPI_MCA_mca_base_component_path=$G/ompi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
export PMIX_PREFIX=$G/ompi/pmix2
export PMIX_MCA_mca_base_component_path=$G/ompi/pmix2/lib/pmix
export PMIX_MCA_pcompress_base_silence_warning=1  # no zlib plugin packed: one-node jobs send little
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MPIRUN=$G/ompi/bin/mpirun
# the machine's CUDA libraries: the toolkit, else the pip wheels PyTorch uses
cudalibs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cudalibs+=":$d"
done
for pat in 'libnccl.so.2' 'libcublasLt.so.13' 'libcudart.so.13'; do
  found=$(ldconfig -p 2>/dev/null | grep -F "$pat" | head -1)
  [ -n "$found" ] && continue
  for d in $cudalibs; do [ -e "${d#:}/$pat" ] && found=1; done
  [ -n "$found" ] && continue
  hit=$(python3 -c 'import nvidia, os, sys
for p in nvidia.__path__:
    for r, _, fs in os.walk(p):
        if sys.argv[1] in fs: print(r); raise SystemExit' "$pat" 2>/dev/null || true)
  [ -n "$hit" ] && cudalibs+=":$hit"
done
export LD_LIBRARY_PATH=$G/lib$cudalibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
EOF
}

# --- checks -----------------------------------------------------------------
check() {
  local bad=0 f lib
  [ -f "$G/env.sh" ] || die "$G is no pack (no env.sh): run bench/gpu/pack.sh first"
  # what travels: the tracked and untracked-not-ignored files, plus the pack
  local mib tree
  mib=$(du -sm --apparent-size "$G" | cut -f1)
  tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c '%s' 2>/dev/null |
         awk '{s += $1} END {printf "%d", s / 1048576 + 0.5}')
  echo "pack: $G is $mib MiB, the working tree $tree MiB: $((mib + tree)) MiB travel (limit $LIMIT_MIB)"
  ((mib + tree <= LIMIT_MIB)) ||
    { echo "FAIL: $((mib + tree)) MiB would travel, over $LIMIT_MIB (the tool takes 64)" >&2; bad=1; }
  # every ELF's libraries: from the pack (unpacked by env.sh as on the GPU
  # machine), or from the machine's own set
  local P L
  # (this check's own unpacked copy goes under a directory of its own, removed
  # at the end; on the GPU machine env.sh keeps it in TMPDIR or /tmp)
  local ct; ct=$(mktemp -d "${TMPDIR:-/tmp}/hetc_pack_check_XXXXXX")
  P=$(env -i PATH=/usr/bin:/bin TMPDIR="$ct" bash -c ". '$G/env.sh' && echo \$HETC_GPU")
  L=$P/lib
  [ -d "$L" ] || { echo "FAIL: env.sh did not unpack pack.tar.xz" >&2; bad=1; }
  while read -r f; do
    while read -r lib path; do
      if [ "$path" = "not" ]; then
        [[ $lib =~ $SYSTEM_RE ]] && continue   # CUDA/NCCL: found on the GPU machine
        echo "FAIL: $f: $lib not found" >&2; bad=1
      elif [[ ! $lib =~ $SYSTEM_RE ]] && [[ $path != "$P"/* ]]; then
        echo "FAIL: $f: $lib resolves outside the pack ($path)" >&2; bad=1
      fi
    done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$L" ldd "$f" 2>/dev/null |
             awk '$2 == "=>" {print $1, $3}')
  done < <(find "$P" -type f ! -name '*.gz' ! -name '*.log' ! -name '*.json' ! -name '*.bin' \
             -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
  echo "pack: needs glibc $(sed 's/GLIBC_//' "$P/glibc_needed") or newer on the GPU machine"
  # Jobs under the packed mpirun, as on the GPU machine: a cleared
  # environment plus env.sh; as root with mount namespaces, the system's
  # OpenMPI / PMIx directories are hidden too (a tmpfs over each), so a
  # plugin or help file found only there fails here.  Otherwise LD_DEBUG
  # shows any OpenMPI file loaded from the system.
  local hide=0 log; log=$(mktemp)
  [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null && hide=1
  # sanitizer settings pass (a sanitizer build's ctest sets them)
  local keep=() v
  for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do [ -n "${!v:-}" ] && keep+=("$v=${!v}"); done
  packed() {  # packed 'COMMAND': run COMMAND (a bash string) the GPU machine's way
    local script="export TMPDIR='$ct'; . '$G/env.sh'; $1"
    if ((hide)); then
      unshare -m bash -c 'for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
          /usr/share/openmpi /etc/openmpi; do [ -d "$d" ] && mount -t tmpfs none "$d"; done
        exec env -i PATH=/usr/bin:/bin HOME=/tmp "$@" bash -c "$0"' "$script" "${keep[@]+"${keep[@]}"}"
    else
      env -i PATH=/usr/bin:/bin HOME=/tmp LD_DEBUG=files "${keep[@]+"${keep[@]}"}" bash -c "$script"
    fi
  }
  sysload() {  # what of the system's OpenMPI the job loaded (LD_DEBUG lines)
    grep -E '(file=|calling init: )/usr/lib/x86_64-linux-gnu/(openmpi/|libmpi|libopen-|libhwloc|libevent)' "$1"
  }
  echo "pack: jobs under the packed mpirun ($( ((hide)) && echo "system OpenMPI hidden by unshare -m" ||
        echo "system OpenMPI visible: LD_DEBUG watches for it"))"
  # (1) MPI itself: a host-backend build of tiny_pair's 2 stages (not packed:
  # same libraries minus CUDA) trains 2 steps, messages between the ranks
  if [ -x "$build/hetc" ]; then
    local hd; hd=$(mktemp -d "${TMPDIR:-/tmp}/hetc_pack_host_XXXXXX")
    if "$build/hetc" examples/gpt_tiny.onnx examples/clusters/tiny_pair.yaml --seq 64 --microbatch 4 \
         --global-batch 8 --threads 1 --steps 2 -o "$hd/b" > "$hd/compile.log" 2>&1; then
      packed "HETC_THREADS=1 HETRT_TIMEOUT_S=60 timeout 180 '$hd/b/launch.sh' --data '$ROOT/examples/tiny_corpus.bin' \
                --steps 2 --checkpoint-dir '$hd/ckpt'" > "$log" 2>&1 && rc=0 || rc=$?
      local nl; nl=$(grep -c '^step *[0-9]*/2 | loss' "$log")
      if ((rc != 0 || nl != 2)) || sysload "$log" > /dev/null; then
        echo "FAIL: host 2-stage job under the packed mpirun: exit $rc, $nl of 2 loss lines" >&2
        sysload "$log" | head -3 >&2; grep -v '^ *[0-9]*:' "$log" | tail -15 >&2; bad=1
      else
        echo "pack: packed mpirun: host 2-stage job trained 2 steps: $(grep '^step *2/2' "$log" | cut -c1-40)"
      fi
    else
      echo "FAIL: hetc compile of the host check job failed ($hd/compile.log)" >&2; bad=1
    fi
    rm -rf "$hd"
  else
    echo "pack: no $build/hetc: the host MPI job check is skipped"
  fi
  # (2) the packed CUDA stage binary: without a GPU every rank stops at once
  # naming the missing device (exit 1, no crash, no hang)
  packed "HETRT_TIMEOUT_S=60 timeout 120 '$P/e2e/one/launch.sh' --data '$ROOT/examples/tiny_corpus.bin' \
            --steps 1 --checkpoint-dir '$ct/ckpt'" > "$log" 2>&1 && rc=0 || rc=$?
  if ((rc == 0 || rc == 124)) || ! grep -q "no CUDA device" "$log" || sysload "$log" > /dev/null; then
    echo "FAIL: the packed launch.sh of e2e/one: exit $rc, want 1 with 'no CUDA device'" >&2
    sysload "$log" | head -3 >&2; grep -v '^ *[0-9]*:' "$log" | tail -20 >&2; bad=1
  else
    echo "pack: packed launch.sh of e2e/one here: exit $rc, '$(grep -o 'no CUDA device[^.]*' "$log" | head -1)'"
  fi
  # the kernel test: exit 77 (skip) without a GPU, never a crash
  packed "'$P/bin/test_cuda_kernels'" > "$log" 2>&1 && rc=0 || rc=$?
  if ((rc != 77)); then
    echo "FAIL: packed test_cuda_kernels here: exit $rc (want 77: no GPU)" >&2; tail -5 "$log" >&2; bad=1
  else
    echo "pack: packed test_cuda_kernels here: exit 77, '$(head -1 "$log")'"
  fi
  rm -f "$log"
  rm -rf "$ct"
  ((bad == 0)) || die "checks failed"
  echo "pack: ok ($G)"
}

((check_only)) || pack
check
