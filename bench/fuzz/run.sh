#!/usr/bin/env bash
# Run every libFuzzer target for longer than the suite does and report
# executions and crashes.  usage: bench/fuzz/run.sh [SECONDS_EACH]  (default 300)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-300}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-14 \
  -DHETC_SANITIZE=ON -DHETC_FUZZ=ON >/dev/null
ninja -C build-fuzz fuzz_ir_parse fuzz_onnx_import >/dev/null
for t in ir_parse onnx_import; do
  seeds=tests/ir/golden; [ $t = onnx_import ] && seeds=tests/models
  corpus=build-fuzz/fuzz/long_corpus_$t; mkdir -p "$corpus"
  log=build-fuzz/fuzz/$t.log
  rc=0
  build-fuzz/fuzz/fuzz_$t -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 \
    -artifact_prefix=build-fuzz/fuzz/crash_$t- "$corpus" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  crashes=$(find build-fuzz/fuzz -maxdepth 1 -name "crash_$t-*" | wc -l)
  echo "fuzz_$t: ${secs}s, ${execs:-?} executions, $crashes crash files, exit $rc"
done
