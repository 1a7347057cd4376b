#include "check/check_support.h"

namespace flexjit {

uint16_t nan_bits(fj_dtype dtype) {
  return dtype == FJ_DTYPE_BF16 ? 0x7fc0 : 0x7e00;
}

}  // namespace flexjit
