#!/usr/bin/env bash
# The main job: builds flexjit, checks the standard masks, prints their IR and tile classes,
# compiles every standard kernel with NVRTC, and on a machine with a CUDA GPU runs each one on
# random paged inputs against the float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/dev/build.sh
flexjit=build/bin/flexjit
masks=dsl/lib/standard.mask
window=256

step() { printf '\n== %s\n' "$*"; }

step "flexjit check $masks"
$flexjit check "$masks"
step "flexjit ir $masks"
$flexjit ir "$masks"
for mask in causal sliding; do
  step "flexjit hints --mask $mask (1024 queries x 1024 keys, 64x64 tiles, window=$window)"
  $flexjit hints "$masks" --mask "$mask" --q-len 1024 --kv-len 1024 --tile 64x64 --set window=$window
done

have_gpu=0
if ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1' && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  have_gpu=1
fi
archs="sm_80 sm_90a"
step "NVRTC: every standard kernel for $archs"
for arch in $archs; do
  for mask in causal sliding; do
    for dtype in bf16 fp16; do
      for head_dim in 64 128; do
        $flexjit compile "$masks" --mask $mask --dtype $dtype --head-dim $head_dim --arch $arch
      done
    done
  done
done

if [ "$have_gpu" = 1 ]; then
  for mask in causal sliding; do
    for dtype in bf16 fp16; do
      step "flexjit run --mask $mask --dtype $dtype (GPU vs float64 reference)"
      $flexjit run "$masks" --mask $mask --dtype $dtype --set window=$window \
        --query-lens 1,7,300,2048 --context-lens 511,64,0,0
    done
  done
else
  step "no CUDA GPU here: kernels compiled, not run (flexjit run needs a GPU)"
fi
