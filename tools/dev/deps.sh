#!/usr/bin/env bash
# Installs the Debian packages flexjit builds with, when missing, and checks the CUDA toolkit
# (NVRTC and headers; the CUDA driver is only needed to launch kernels, and is loaded at run time).
set -euo pipefail

# clang-16 and libclang-rt-16-dev: libFuzzer and the sanitizers of tools/dev/fuzz.sh.
# python3-venv: the virtual environments of tools/dev/package_check.sh (the wheel's build and
# install; their Python packages come from PyPI).
# openmpi-bin and python3-mpi4py: the context-parallel example across MPI ranks
# (examples/context_parallel_mpi.py), which ctest runs as context_parallel_mpi.
packages=(cmake ninja-build g++ pkg-config libfmt-dev libcli11-dev catch2 llvm-16-dev
          libxxhash-dev nlohmann-json3-dev clang-16 libclang-rt-16-dev python3-venv
          openmpi-bin python3-mpi4py)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "deps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_home=${CUDA_HOME:-/usr/local/cuda}
for file in include/cuda.h include/nvrtc.h include/cuda_fp16.h include/cuda_bf16.h; do
  if [ ! -f "$cuda_home/$file" ]; then
    echo "deps: the CUDA toolkit is missing $cuda_home/$file (set CUDA_HOME; CUDA 13 expected)" >&2
    exit 1
  fi
done
if ! ls "$cuda_home"/lib64/libnvrtc.so* >/dev/null 2>&1 && \
   ! ls "$cuda_home"/targets/*/lib/libnvrtc.so* >/dev/null 2>&1; then
  echo "deps: NVRTC (libnvrtc.so) not found under $cuda_home" >&2
  exit 1
fi
