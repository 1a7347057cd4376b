#!/usr/bin/env bash
# Builds flexjit and runs the CPU test suite (everything but the [gpu] tests) under ctest, checks
# what users install (tools/dev/package_check.sh: the wheel in a fresh virtual environment, the
# CMake/pkg-config consumer of `cmake --install`), builds the CLI and the C API's bad-argument
# suite once more under ASan and UBSan and runs the bad-input tables with them
# (tools/dev/sanitize.sh), then fuzzes the front end for a minute and the CLI's option checks for
# 20 s (tools/dev/fuzz.sh).
# The [gpu] tests: build/bin/flexjit_tests_gpu on a machine with a CUDA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/dev/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
tools/dev/package_check.sh
tools/dev/sanitize.sh
tools/dev/fuzz.sh 60
