#include "cpu/float16.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace flexjit {

uint16_t to_bits(float value, fj_dtype dtype) {
  if (dtype == FJ_DTYPE_BF16) return __nv_bfloat16_raw(__float2bfloat16_rn(value)).x;
  return __half_raw(__float2half_rn(value)).x;
}

float from_bits(uint16_t bits, fj_dtype dtype) {
  if (dtype == FJ_DTYPE_BF16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

}  // namespace flexjit
