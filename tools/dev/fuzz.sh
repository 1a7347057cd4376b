#!/usr/bin/env bash
# Fuzzes with libFuzzer under ASan and UBSan: the front end (lexer, parser, checker,
# diagnostics) for SECONDS (default 60), then the CLI's option checks and `--set` array literals
# (tools/cli/validate.cpp, settings.cpp) for a third of that. Builds tests/fuzz into build-fuzz/
# with clang++-16 (or $FLEXJIT_FUZZ_CXX). The seeds in tests/fuzz/corpus and
# tests/fuzz/cli_corpus are only read; new inputs go to build-fuzz/corpus and
# build-fuzz/cli_corpus, which later runs start from. A crash, a leak, a UB report, an input
# taking over 5 s or 2 GB fails the script, with the reproducer in build-fuzz/findings/; replay
# it with `build-fuzz/bin/flexjit_dsl_fuzzer FILE` (or flexjit_cli_fuzzer). Extra arguments go
# to libFuzzer (e.g. -fork=2 for two processes, -runs=N).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true

cmake -S . -B build-fuzz -G Ninja -DFLEXJIT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${FLEXJIT_FUZZ_CXX:-clang++-16}" >/dev/null
cmake --build build-fuzz --target flexjit_dsl_fuzzer flexjit_cli_fuzzer
mkdir -p build-fuzz/corpus build-fuzz/cli_corpus build-fuzz/findings
rm -f build-fuzz/findings/*

# fuzz TARGET SECONDS CORPUS... [libFuzzer options]: one libFuzzer run; its exit status.
fuzz() {
  local target=$1 time=$2
  shift 2
  echo "fuzz: ${time} s over ${target} (build-fuzz/bin/${target})"
  "build-fuzz/bin/${target}" -max_total_time="$time" -rss_limit_mb=2048 -timeout=5 \
    -artifact_prefix=build-fuzz/findings/ -print_final_stats=1 "$@"
}

status=0
fuzz flexjit_dsl_fuzzer "$seconds" -dict=tests/fuzz/dsl.dict "$@" build-fuzz/corpus \
  tests/fuzz/corpus || status=$?
fuzz flexjit_cli_fuzzer "$(( (seconds + 2) / 3 ))" "$@" build-fuzz/cli_corpus \
  tests/fuzz/cli_corpus || status=$?
if ((status != 0)) || [ -n "$(ls -A build-fuzz/findings)" ]; then
  echo "fuzz: FAILED (exit $status); reproducers:" >&2
  ls build-fuzz/findings >&2
  exit 1
fi
echo "fuzz: no findings"
