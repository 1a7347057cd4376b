#!/usr/bin/env bash
# Installs what is missing, then configures and builds flexjit into build/ (the CLI lands in
# build/bin/flexjit). Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/dev/deps.sh
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
