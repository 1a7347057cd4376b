#!/usr/bin/env bash
# Runs the benchmark harness on the GPU machine over a copy of the tree plus the library staged
# by tools/dev/stage_gpu.sh in .carry/lib. Logs, JSON and this run's table (report.md, to append
# to bench/RESULTS.md on the machine that commits) go to $OUT, else /tmp/flexjit-bench. The table
# is also appended to the tree's bench/RESULTS.md here, and printed last. Extra arguments go to
# bench.py (e.g. --quick, --only decode).
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64:$PWD/.carry/lib:${LD_LIBRARY_PATH:-}"
export FLEXJIT_LIBRARY=${FLEXJIT_LIBRARY:-$PWD/.carry/lib/libflexjit_runtime.so}
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flexjit-bench}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader

python3 tools/bench/bench.py --json "$out/bench.json" --report "$out/report.md" \
  --append-results bench/RESULTS.md "$@" 2>&1 | tee "$out/bench.log"
exit "${PIPESTATUS[0]}"
