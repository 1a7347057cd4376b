#!/usr/bin/env bash
# What users install, checked as they would use it (issue 32): builds the wheel (`pip wheel .`,
# pyproject.toml), checks that its binaries need only glibc and libstdc++, installs it into a
# fresh virtual environment and runs the CLI and a CPU-backend call from there, outside the
# source tree; then installs build/ (`cmake --install`) and builds and runs tests/consumer
# against that prefix with find_package and pkg-config. Needs build/ (tools/dev/build.sh).
# Prints PASS/FAIL lines; exits non-zero on the first failure. Work files: build-package/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$root/build-package
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
trap 'echo "FAIL: package check (line $LINENO)" >&2' ERR
start=$SECONDS

# The build environment: scikit-build-core from PyPI (CMake and Ninja are Debian's).
python3 -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
CMAKE_ARGS="${launcher[*]} -DCUDAToolkit_ROOT=${CUDA_HOME:-/usr/local/cuda}" \
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
  "$work/build-env/bin/pip" wheel -q --disable-pip-version-check --no-build-isolation \
  --no-deps -C build-dir="$work/skbuild" -w "$work/wheel" . >"$work/wheel.log" 2>&1 || { tail -30 "$work/wheel.log"; fail "pip wheel ."; }
wheels=("$work"/wheel/flexjit-*-py3-none-linux_*.whl)
[ -f "${wheels[0]}" ] || fail "no py3-none-linux wheel in $work/wheel: $(ls "$work/wheel")"
wheel=${wheels[0]}
size=$(stat -c %s "$wheel")
((size <= 50 * 1024 * 1024)) || fail "$(basename "$wheel") is $size bytes, over 50 MB"
echo "PASS: built $(basename "$wheel") ($((size / 1024)) KiB) in $((SECONDS - start)) s"

# Every binary in the wheel needs only the C and C++ runtimes: no libfmt, libLLVM, libnvrtc.
mkdir "$work/unpacked"
python3 -m zipfile -e "$wheel" "$work/unpacked"
allowed='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so'
for binary in "$work"/unpacked/flexjit/lib/*.so "$work"/unpacked/*.data/scripts/flexjit; do
  [ -f "$binary" ] || fail "the wheel lacks $binary"
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  extra=$(grep -Ev "$allowed" <<<"$needed" || true)
  [ -z "$extra" ] || fail "$(basename "$binary") needs $(tr '\n' ' ' <<<"$extra")"
done
echo "PASS: the wheel's library and CLI need only glibc, libstdc++ and libgcc"

# A fresh environment with nothing but the wheel, used from outside the source tree.
python3 -m venv "$work/env"
"$work/env/bin/pip" install -q --disable-pip-version-check --no-index --no-deps "$wheel"
cd "$(mktemp -d)"
export PATH="$work/env/bin:$PATH"
unset PYTHONPATH FLEXJIT_LIBRARY
version=$(flexjit --version)
expected="flexjit $("$work/env/bin/python" -c 'import importlib.metadata as m; print(m.version("flexjit"))')"
[ "$version" = "$expected" ] || fail "flexjit --version printed '$version', not '$expected'"
echo "PASS: $(command -v flexjit) --version: $version"
masks=$("$work/env/bin/python" -c \
  'import flexjit, pathlib; print(pathlib.Path(flexjit.__file__).parent / "masks/standard.mask")')
flexjit check "$masks" || fail "flexjit check $masks"
flexjit hints "$masks" --mask sliding --set window=256 --q-len 1024 --kv-len 1024 --tile 128x64 \
  >hints.txt || fail "flexjit hints"
grep -q '#' hints.txt || fail "flexjit hints printed no full tile"
echo "PASS: the installed CLI checks the installed standard masks and prints a tile map"
flexjit run "$masks" --mask sliding --set window=64 --device cpu --query-lens 7,100 \
  --context-lens 50,0 --heads 8 --kv-heads 2 >run.txt 2>&1 || { cat run.txt; fail "flexjit run"; }
echo "PASS: the installed CLI runs sliding on the CPU backend against float64"
# Without NVRTC (FLEXJIT_NVRTC is the only place tried when set) a GPU compile fails clearly.
if FLEXJIT_NVRTC=/nonexistent/libnvrtc.so.13 flexjit compile "$masks" --mask causal \
  --arch sm_80 >nvrtc.txt 2>&1; then
  fail "a GPU compile without NVRTC succeeded"
fi
grep -q 'cannot load NVRTC.*searched' <(tr '\n' ' ' <nvrtc.txt) || \
  { cat nvrtc.txt; fail "the missing-NVRTC error does not say what was searched"; }
echo "PASS: without NVRTC a GPU compile fails naming what was searched"
"$work/env/bin/python" "$root/tests/consumer/wheel_check.py"
cd "$root"

# The CMake package and pkg-config file of `cmake --install`, used by a C project.
cmake --install build --prefix "$work/install" >/dev/null
for unwanted in include/flexjit/internal lib/libflexjit_runtime_core.a; do
  [ ! -e "$work/install/$unwanted" ] || fail "cmake --install installed $unwanted"
done
soname=$(readelf -d "$work/install/lib/libflexjit_runtime.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libflexjit_runtime.so.0 ] || fail "SONAME is '$soname'"
echo "PASS: cmake --install: flexjit.h, $soname, the CMake package and flexjit.pc"
tests/consumer/run.sh "$work/install" "$work/consumer"
echo "PASS: package check in $((SECONDS - start)) s"
