#!/usr/bin/env bash
# Builds the CLI and the C API's bad-argument suite with -fsanitize=address,undefined into
# build-asan/, then runs the bad-input tables under them (issue 31): every C API entry point with
# null and invalid arguments (build-asan/bin/flexjit_tests_capi) and the CLI under its generated
# table of bad flags (tests/cli/test_bad_flags.py). Only those two targets are built, without
# LLVM (the host code is then the IR evaluator), and with -O1: the NVRTC-heavy suites stay in
# the plain build. Any ASan, LSan or UBSan report fails the script. Extra arguments go to the
# CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/dev/deps.sh
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFLEXJIT_WITH_LLVM=OFF -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" "$@" >/dev/null
cmake --build build-asan -j "$(nproc)" --target flexjit flexjit_tests_capi

# A report exits with its own code, so that no table mistakes it for the CLI's exit 1.
export ASAN_OPTIONS="exitcode=86:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:exitcode=87:print_stacktrace=1"
export FLEXJIT_CACHE_DIR="$PWD/build-asan/test-cache"
echo "sanitize: the C API's bad-argument table (build-asan/bin/flexjit_tests_capi)"
build-asan/bin/flexjit_tests_capi
echo "sanitize: the CLI's bad-flag table (tests/cli/test_bad_flags.py)"
FLEXJIT_CLI="$PWD/build-asan/bin/flexjit" FLEXJIT_SANITIZED=1 \
  python3 -m unittest discover -s tests/cli -t tests/cli
echo "sanitize: clean"
