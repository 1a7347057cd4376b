// The meaning of every IR operation, as one function per domain: concrete values (the
// evaluator, constant folding) and intervals (tile classification). Both call the functions
// of templates/fj_ops.cuh that the emitted CUDA calls, so host and device agree.
#pragma once

#include <cstdint>
#include <span>

#include "fj_ops.cuh"
#include "flexjit/compiler/ir.h"

namespace flexjit::ir {

// A concrete value of any IR type: Bool (0 or 1) and Int in `i`, Float in `f`. Which member
// is meaningful is given by the type of the expression it is the value of.
struct Value {
  int32_t i = 0;
  float f = 0.0f;

  static Value of_bool(bool value) { return {value ? 1 : 0, 0.0f}; }
  static Value of_int(int32_t value) { return {value, 0.0f}; }
  static Value of_float(float value) { return {0, value}; }
};

// The abstract value of an expression over a box of inputs: `ints` for Bool and Int
// expressions (Bool as {0, 1}), `floats` for Float ones. The host's one interval value: the
// analysis here and the frames of the compiled interval program (analysis/interval_tape.h) use
// it; the other part is everything here, unwritten in a frame.
struct IntervalValue {
  fj::Interval ints = fj::Interval::everything();
  fj::FloatInterval floats = fj::FloatInterval::everything();
};

// The value of operation `kind` (any node kind with operands except Load) on constant
// operands whose types are `operand_types`. Requires operands.size() == operand_types.size()
// == operand_count(kind) > 0 and result_type(kind, operand_types) to have a value.
Value apply_operation(ExprKind kind, std::span<const Type> operand_types,
                      std::span<const Value> operands);

// A sound abstract value of operation `kind` on operands drawn from the operand abstract
// values (exact where fj_ops.cuh says so). Same requirements.
IntervalValue apply_operation(ExprKind kind, std::span<const Type> operand_types,
                              std::span<const IntervalValue> operands);

// Element [row, col] of `array` read as `type` (Int or Float), 0 outside the extents.
Value load(const fj::ArrayParam& array, Type type, int32_t row, int32_t col);
// Every element that a read at rows `row`, columns `col` may return (sound).
IntervalValue load(const fj::ArrayParam& array, Type type, const fj::Interval& row,
                   const fj::Interval& col);

}  // namespace flexjit::ir
