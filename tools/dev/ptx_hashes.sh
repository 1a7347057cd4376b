#!/usr/bin/env bash
# Compares the PTX of every kernel of the standard library and of the benchmark's element-wise
# family (tools/dev/ptx_hashes.cpp, built as build/bin/flexjit_ptx_hashes) with the list saved in
# tools/dev/ptx_hashes.txt; with --save, writes that list instead. Exit 1 when any kernel's PTX
# differs. The family's masks reach the kernel paths the standard ones do not (the diagonal
# window, constant divisors, the element select).
set -euo pipefail
cd "$(dirname "$0")/../.."
saved=tools/dev/ptx_hashes.txt
now=$(mktemp)
trap 'rm -f "$now"' EXIT
{
  build/bin/flexjit_ptx_hashes dsl/lib/standard.mask
  build/bin/flexjit_ptx_hashes tools/bench/family.mask | grep -v '^kv_cache_write\|^merge_states'
} >"$now"
if [ "${1:-}" = "--save" ]; then
  cp "$now" "$saved"
  echo "ptx_hashes: saved $(wc -l <"$saved") kernels to $saved"
  exit 0
fi
if diff -u "$saved" "$now"; then
  echo "ptx_hashes: all $(wc -l <"$saved") kernels' PTX is identical to $saved"
else
  echo "ptx_hashes: the PTX differs from $saved (lines above)" >&2
  exit 1
fi
