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
# The commit the binaries were built from, for the benchmark's pages (results_page.git_commit):
# the GPU machine's .git is not this tree's.
dirty=$(git status --porcelain --untracked-files=no)
echo "$(git rev-parse --short HEAD)${dirty:++dirty}" >.carry/COMMIT
du -sh .carry
