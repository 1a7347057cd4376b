#!/usr/bin/env bash
# Runs the benchmark harness on the GPU machine over a copy of the tree plus the library staged
# by tools/dev/stage_gpu.sh in .carry/lib, then writes the run's families to bench/results/
# (prefill.json, decode.json, ... : tools/bench/results_page.py ingest) and regenerates
# bench/RESULTS.md from them. Logs, the whole run's JSON (bench.json), this run's table
# (report.md) and a copy of bench/results/ and the page go to $OUT, else /tmp/flexjit-bench:
# commit bench/results/ and bench/RESULTS.md from there on the machine that commits. Extra
# arguments go to bench.py (e.g. --quick, --only decode); a partial run replaces only the
# families it ran. A family longer than one device call (family_16k with FA4) is run in parts:
# the rest with --only WORKLOAD, its bench.json then added with `results_page.py ingest --add`. With two GPUs or more a whole run also measures context parallelism.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64:$PWD/.carry/lib:${LD_LIBRARY_PATH:-}"
export FLEXJIT_LIBRARY=${FLEXJIT_LIBRARY:-$PWD/.carry/lib/libflexjit_runtime.so}
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The commit the staged binaries came from (stage_gpu.sh): this copy's .git HEAD is stale.
if [[ -z "${FLEXJIT_COMMIT:-}" && -s .carry/COMMIT ]]; then
  export FLEXJIT_COMMIT=$(cat .carry/COMMIT)
fi
out=${OUT:-/tmp/flexjit-bench}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader

python3 tools/bench/bench.py --json "$out/bench.json" --report "$out/report.md" "$@" 2>&1 |
  tee "$out/bench.log"
status=${PIPESTATUS[0]}
if [[ -s "$out/bench.json" ]]; then
  python3 tools/bench/results_page.py ingest "$out/bench.json" || status=1
fi
# Context parallelism (tools/bench/cp_decode.py, the family context_parallel) needs two GPUs or
# more: on such a machine a whole run (no --only) measures it too.
if (($(nvidia-smi --list-gpus | wc -l) >= 2)) && [[ " $* " != *" --only "* ]]; then
  python3 tools/bench/cp_decode.py --sequential 0 --json "$out/cp.json" 2>&1 | tee "$out/cp.log"
  if [[ ${PIPESTATUS[0]} != 0 || ! -s "$out/cp.json" ]]; then
    status=1
  else
    python3 tools/bench/results_page.py ingest "$out/cp.json" || status=1
  fi
fi
if [[ -s "$out/bench.json" ]]; then
  mkdir -p "$out/results"
  cp bench/results/*.json "$out/results/"
  cp bench/RESULTS.md "$out/RESULTS.md"
fi
exit "$status"
