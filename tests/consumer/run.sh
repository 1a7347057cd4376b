#!/usr/bin/env bash
# Builds tests/consumer/consumer.c against an installed flexjit (`cmake --install build --prefix
# PREFIX`) both ways, with find_package(flexjit) and with pkg-config, and runs each build: a
# CPU-backend attention call checked against float64. Usage: run.sh PREFIX [WORKDIR]
set -euo pipefail
prefix=$(realpath "$1")
work=${2:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"

# Nothing of the source tree may leak in: the installed header and library only.
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
# The imported target carries no run path for the library; the loader needs to be told.
LD_LIBRARY_PATH="$prefix/lib" "$work/cmake/consumer"
echo "PASS: consumer built with find_package(flexjit) ran"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046  # pkg-config prints several words
cc -std=c11 -Wall -Wextra -Werror -o "$work/consumer_pkgconfig" "$here/consumer.c" \
  $(pkg-config --cflags --libs flexjit) -lm -Wl,-rpath,"$(pkg-config --variable=libdir flexjit)"
"$work/consumer_pkgconfig"
echo "PASS: consumer built with pkg-config ($(pkg-config --modversion flexjit)) ran"
