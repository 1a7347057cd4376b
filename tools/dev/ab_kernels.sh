#!/usr/bin/env bash
# A/B of template or launcher changes on the GPU machine: times the named workloads' kernels
# (tools/bench/profile_kernel.py, page 16) under each library in .carry/ab/NAME.so, in two rounds
# of alternating order, then prints one table. Build each library here (templates are embedded:
# `ninja -C build flexjit_runtime`, then copy and strip build/lib/libflexjit_runtime.so.0.*),
# carry .carry, and run with the workloads as arguments:
#   tools/dev/ab_kernels.sh prefill_causal_16k family_8k_dilated
# LAUNCHES (default 20) sets the timed launches per workload and round.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FLEXJIT_CACHE_DIR=${FLEXJIT_CACHE_DIR:-/tmp/flexjit-ab-cache}
out=${OUT:-/tmp/flexjit-ab}
mkdir -p "$out"
libs=()
for lib in .carry/ab/*.so; do libs+=("$(basename "$lib" .so)"); done
[ ${#libs[@]} -gt 0 ] || { echo "no library in .carry/ab/" >&2; exit 2; }
reversed=()
for ((i = ${#libs[@]} - 1; i >= 0; i--)); do reversed+=("${libs[i]}"); done
status=0
for round in 1 2; do
  order=("${libs[@]}")
  [ "$round" = 2 ] && order=("${reversed[@]}")
  for lib in "${order[@]}"; do
    FLEXJIT_LIBRARY=$PWD/.carry/ab/$lib.so python3 tools/bench/profile_kernel.py "$@" \
      --launches "${LAUNCHES:-20}" 2>&1 | sed "s/^/$lib $round /" | tee -a "$out/ab.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
done
# Table: workload, then each library's two medians.
python3 - "$out/ab.log" "${libs[@]}" <<'PY'
import re, sys
path, libs = sys.argv[1], sys.argv[2:]
times = {}
for line in open(path):
    m = re.match(r"(\S+) (\d) (\S+) \S+: median ([0-9.]+) ms", line)
    if m:
        times.setdefault(m.group(3), {}).setdefault(m.group(1), []).append(m.group(4))
print("| workload | " + " | ".join(libs) + " |")
print("|---|" + "---|" * len(libs))
for w, by_lib in times.items():
    print(f"| {w} | " + " | ".join(" / ".join(by_lib.get(l, ["-"])) for l in libs) + " |")
PY
exit $status
