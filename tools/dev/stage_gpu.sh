#!/usr/bin/env bash
# Copies the binaries the GPU machine needs into .carry/ (git-ignored), stripped so the tree
# plus the carried folder stay under the device tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .carry
mkdir -p .carry/bin .carry/lib
cp build/bin/flexjit build/bin/flexjit_tests_gpu build/bin/flexjit_bench_compile \
  build/bin/flexjit_bench_classify .carry/bin/
cp build/lib/libflexjit_runtime.so .carry/lib/
strip .carry/bin/* .carry/lib/*
du -sh .carry
