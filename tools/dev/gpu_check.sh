#!/usr/bin/env bash
# Runs on the GPU machine over a copy of the tree plus the binaries staged by
# tools/dev/stage_gpu.sh in .carry/: the [gpu] tests, compute-sanitizer over a reduced set,
# and `flexjit run` for each standard mask; prints a short table last. An argument picks one
# part (tests, sanitizer, compile, runs) so each fits one device call; none runs them all.
set -uo pipefail
part=${1:-all}
want() { [ "$part" = all ] || [ "$part" = "$1" ]; }
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64:$PWD/.carry/lib:${LD_LIBRARY_PATH:-}"
export FLEXJIT_SOURCE_DIR=$PWD
out=${OUT:-/tmp/flexjit-gpu}
mkdir -p "$out"
bin=.carry/bin
masks=dsl/lib/standard.mask
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

status=0
gpu_tests=skipped
if want tests; then
  echo "== [gpu] tests ($(date +%T))"
  $bin/flexjit_tests_gpu "[gpu]" 2>&1 | tee "$out/gpu_tests.log" | tail -n 25
  gpu_tests=${PIPESTATUS[0]}
  [ "$gpu_tests" = 0 ] || status=1
fi

sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if ! want sanitizer; then
  :
elif [ -x "$sanitizer" ]; then
  echo "== compute-sanitizer memcheck (reduced)"
  for mask in causal sliding rswa document prefix_ranges causal_alibi; do
    "$sanitizer" --tool memcheck --error-exitcode 9 $bin/flexjit run $masks --mask $mask \
      --set window=100 --heads 8 --kv-heads 2 --query-lens 1,7,300 --context-lens 700,50,0 \
      --page-size 16 --iterations 0 >"$out/sanitizer_$mask.log" 2>&1
    rc=$?
    echo "memcheck $mask: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/sanitizer_$mask.log") ($(date +%T))"
    [ "$rc" = 0 ] || status=1
  done
  "$sanitizer" --tool memcheck --error-exitcode 9 $bin/flexjit_tests_gpu \
    "encoder path*,KV-cache write*,merge_states*" >"$out/sanitizer_ops.log" 2>&1
  rc=$?
  echo "memcheck encoder/kv write/merge tests: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/sanitizer_ops.log" | tail -1)"
  [ "$rc" = 0 ] || status=1
  "$sanitizer" --tool memcheck --error-exitcode 9 $bin/flexjit_tests_gpu "[plan]" \
    >"$out/sanitizer_plan.log" 2>&1
  rc=$?
  echo "memcheck plan tests: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/sanitizer_plan.log" | tail -1)"
  [ "$rc" = 0 ] || status=1
  "$sanitizer" --tool memcheck --error-exitcode 9 $bin/flexjit_tests_gpu "[sweep-reduced]" \
    >"$out/sanitizer_sweep.log" 2>&1
  rc=$?
  echo "memcheck reduced sweep: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/sanitizer_sweep.log" | tail -1)"
  [ "$rc" = 0 ] || status=1
else
  echo "compute-sanitizer not found"
fi

if want compile; then
  echo "== compile speed (cold, disk hit from a new process, memory hit)"
  $bin/flexjit_bench_compile --cli $bin/flexjit --mask-file $masks 2>&1 | tee "$out/compile_bench.md"
fi

want runs || exit $status
echo "== flexjit run ($(date +%T))"
table=""
for mask in ${RUN_MASKS:-causal sliding prefix_lm rswa chunked document causal_softcap causal_alibi}; do
  for dtype in bf16 fp16; do
    log="$out/run_${mask}_${dtype}.log"
    $bin/flexjit run $masks --mask $mask --dtype $dtype --set window=1024 --heads 32 --kv-heads 8 \
      -D chunk=1024 \
      --query-lens 1,7,300,2048 --context-lens 2000,64,0,0 --iterations 20 >"$log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || status=1
    cat "$log"
    err=$(sed -n 's/^relative error *\([^ ]*\).*/\1/p' "$log")
    ms=$(sed -n 's/^kernel time *\([^ ]*\) ms.*/\1/p' "$log")
    tf=$(sed -n 's/.*(\([0-9.]*\) effective TFLOP.*/\1/p' "$log")
    table+=$(printf '\n| %-14s | %-5s | %-10s | %-9s | %-8s | %s |' "$mask" "$dtype" "$err" "$ms" "$tf" "$([ $rc = 0 ] && echo PASS || echo FAIL)")
  done
done
echo
echo "[gpu] tests exit: $gpu_tests"
echo "| mask           | dtype | rel. error | time (ms) | TFLOP/s  | check |"
echo "|----------------|-------|------------|-----------|----------|-------|$table"
exit $status
