#!/bin/sh
# Before / after figures of the f32 host kernels: builds bench_host_kernels
# against kernels/host of REV (default: the commit before the threaded
# kernels) with the project's flags, then runs old and new alternately for
# HETC_THREADS=1 and 2, printing the load average (the machine is shared).
#   bench/host_kernels/run.sh BUILD_DIR [REV] [REPS]
set -e
BUILD=${1:-build}; REV=${2:-1470072}; REPS=${3:-15}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
git -C "$ROOT" archive "$REV" kernels/host | tar -x -C "$TMP"
BLAS_INC=$(ls -d /usr/include/*/openblas-pthread 2>/dev/null | head -1)
cc -O2 -std=c11 -D_GNU_SOURCE -I"$TMP/kernels/host" ${BLAS_INC:+-I$BLAS_INC} \
   "$ROOT/bench/host_kernels/bench_host_kernels.c" "$TMP"/kernels/host/*.c \
   -o "$TMP/bench_old" -lopenblas -lpthread -lm
NEW="$BUILD/bench/host_kernels/bench_host_kernels"
for t in 1 2; do
  echo "== old ($REV) HETC_THREADS=$t  load: $(cut -d' ' -f1-3 /proc/loadavg)"
  HETC_THREADS=$t "$TMP/bench_old" "$REPS"
  echo "== new HETC_THREADS=$t  load: $(cut -d' ' -f1-3 /proc/loadavg)"
  HETC_THREADS=$t "$NEW" "$REPS"
done
