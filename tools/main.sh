#!/usr/bin/env bash
# The main job: builds flexjit, checks the standard masks, prints their IR and tile classes,
# compiles every standard kernel with NVRTC, and runs each one on random inputs against the
# float64 reference: on the GPU where there is one, else on the CPU backend (docs/cpu.md).
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
  step "flexjit hints --mask $mask (1024 queries after 1024 keys, 128x128 tiles, window=$window)"
  $flexjit hints "$masks" --mask "$mask" --q-len 1024 --kv-len 2048 --tile 128x128 --set window=$window
done
step "flexjit hints --mask sliding_sym (encoder, 1024 x 1024, 128x128 tiles, window=$window)"
$flexjit hints "$masks" --mask sliding_sym --q-len 1024 --kv-len 1024 --tile 128x128 --set window=$window
step "flexjit hints --mask chunked -D chunk=256 (1024 queries after 1024 keys, 128x128 tiles)"
$flexjit hints "$masks" --mask chunked -D chunk=256 --q-len 1024 --kv-len 2048 --tile 128x128
step "flexjit hints --mask rswa (prefix 300 and window=$window, 2048 x 2048, 128x128 tiles)"
$flexjit hints "$masks" --mask rswa --q-len 2048 --kv-len 2048 --tile 128x128 --set window=$window \
  --set prefix_len=300
step "flexjit hints --mask document (documents of 500, 700, 300 and 548 tokens, 64x64 tiles)"
$flexjit hints "$masks" --mask document --q-len 2048 --kv-len 2048 --tile 64x64 \
  --set "doc=0*500,1*700,2*300,3*548"

for arch in sm_80 sm_90a; do
  step "NVRTC: every standard mask and variant x head dims 64,128,256 x bf16,fp16, paged (page 16) and encoder, for $arch"
  $flexjit compile "$masks" --all --head-dims 64,128,256 --dtypes bf16,fp16 --page-sizes 16,0 --arch $arch
done

if ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1' && command -v nvidia-smi >/dev/null &&
   nvidia-smi -L >/dev/null 2>&1; then
  for dtype in bf16 fp16; do
    # Array parameters (prefix lengths, document ids, ranges, slopes) are random, shaped by
    # their declared dimensions.
    for mask in causal sliding prefix_lm prefix_ranges rswa chunked document causal_softcap \
      causal_alibi gemma2_local llama4_local; do
      step "flexjit run --mask $mask --dtype $dtype (paged; GPU vs float64 reference)"
      $flexjit run "$masks" --mask $mask --dtype $dtype --set window=$window -D chunk=512 \
        --query-lens 1,7,300,2048 --context-lens 511,64,0,0
    done
    for mask in bidirectional sliding_sym document; do
      step "flexjit run --mask $mask --dtype $dtype --encoder (contiguous K/V; GPU vs float64 reference)"
      $flexjit run "$masks" --mask $mask --dtype $dtype --set window=$window --encoder \
        --query-lens 1,77,512,1000
    done
  done
else
  # No GPU: the same masks on the CPU backend, with smaller batches (8 query heads over 2 kv
  # heads, the longest prompt 700 tokens) so that the float64 reference stays quick.
  for dtype in bf16 fp16; do
    for mask in causal sliding prefix_lm prefix_ranges rswa chunked document causal_softcap \
      causal_alibi gemma2_local llama4_local; do
      step "flexjit run --device cpu --mask $mask --dtype $dtype (paged; CPU backend vs float64 reference)"
      $flexjit run "$masks" --device cpu --mask $mask --dtype $dtype --set window=$window \
        -D chunk=512 --heads 8 --kv-heads 2 --query-lens 1,7,300,700 --context-lens 511,64,0,0 \
        --iterations 3
    done
    for mask in bidirectional sliding_sym document; do
      step "flexjit run --device cpu --mask $mask --dtype $dtype --encoder (contiguous K/V; CPU backend vs float64 reference)"
      $flexjit run "$masks" --device cpu --mask $mask --dtype $dtype --set window=$window \
        --encoder --heads 8 --kv-heads 2 --query-lens 1,77,512,700 --iterations 3
    done
  done
fi
