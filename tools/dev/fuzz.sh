#!/usr/bin/env bash
# Fuzzes the front end (lexer, parser, checker, diagnostics) with libFuzzer under ASan and
# UBSan for SECONDS (default 60). Builds tests/fuzz into build-fuzz/ with clang++-16 (or
# $FLEXJIT_FUZZ_CXX). The seeds in tests/fuzz/corpus are only read; new inputs go to
# build-fuzz/corpus, which later runs start from. A crash, a leak, a UB report, an input taking
# over 5 s or 2 GB fails the script, with the reproducer in build-fuzz/findings/; replay it
# with `build-fuzz/bin/flexjit_dsl_fuzzer FILE`. Extra arguments go to libFuzzer
# (e.g. -fork=2 for two processes, -runs=N).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true

cmake -S . -B build-fuzz -G Ninja -DFLEXJIT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${FLEXJIT_FUZZ_CXX:-clang++-16}" >/dev/null
cmake --build build-fuzz --target flexjit_dsl_fuzzer
mkdir -p build-fuzz/corpus build-fuzz/findings
rm -f build-fuzz/findings/*

echo "fuzz: ${seconds} s over the front end (build-fuzz/bin/flexjit_dsl_fuzzer)"
status=0
build-fuzz/bin/flexjit_dsl_fuzzer -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=5 \
  -dict=tests/fuzz/dsl.dict -artifact_prefix=build-fuzz/findings/ -print_final_stats=1 \
  "$@" build-fuzz/corpus tests/fuzz/corpus || status=$?
if ((status != 0)) || [ -n "$(ls -A build-fuzz/findings)" ]; then
  echo "fuzz: FAILED (exit $status); reproducers:" >&2
  ls build-fuzz/findings >&2
  exit 1
fi
echo "fuzz: no findings"
