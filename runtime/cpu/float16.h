// bf16 and fp16 on the host: what the CPU backend reads and writes (and the check harness makes
// its inputs with).
#pragma once

#include <cstdint>

#include "flexjit/flexjit.h"

namespace flexjit {

// Round to nearest even into bf16 or fp16 bits, and back.
uint16_t to_bits(float value, fj_dtype dtype);
float from_bits(uint16_t bits, fj_dtype dtype);

}  // namespace flexjit
