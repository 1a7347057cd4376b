// The meaning of every IR operation, as one function per domain: concrete values (the
// evaluator, constant folding) and intervals (tile classification). Both call the functions
// of templates/fj_ops.cuh that the emitted CUDA calls, so host and device agree.
#pragma once

#include <cstdint>
#include <span>

#include "fj_ops.cuh"
#include "flexjit/compiler/ir.h"

namespace flexjit::ir {

// The value of operation `kind` (any node kind with operands) on constant operands, Bool
// values being 0 and 1. Requires operands.size() == operand_count(kind) > 0.
int32_t apply_operation(ExprKind kind, std::span<const int32_t> operands);

// An interval holding every value of operation `kind` on operands drawn from the operand
// intervals (sound; exact where fj_ops.cuh says so). Same requirements.
fj::Interval apply_operation(ExprKind kind, std::span<const fj::Interval> operands);

}  // namespace flexjit::ir
