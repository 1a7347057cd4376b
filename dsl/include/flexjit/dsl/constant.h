// Compile-time constants of the language and the operations on them, as the checker folds
// them (const values, literal operands, `any`/`all` counts). The meaning of each operation is
// that of its row of FJ_FOR_EACH_OPERATION (operations.h): the host functions of
// templates/fj_ops.cuh, which the IR's folding, the evaluator and the emitted CUDA call too.
#pragma once

#include <cstdint>
#include <span>

#include "flexjit/dsl/ast.h"

namespace flexjit::dsl {

// A value of a known type: Int, and Bool (0 or 1), in `i`; Float in `f`.
struct Constant {
  Type type = Type::Error;
  int32_t i = 0;
  float f = 0.0f;

  static Constant of_int(int32_t v) { return {Type::Int, v, 0.0f}; }
  static Constant of_bool(bool v) { return {Type::Bool, v ? 1 : 0, 0.0f}; }
  static Constant of_float(float v) { return {Type::Float, 0, v}; }

  // The value promoted to float (an Int rounds to nearest; a Bool is 0.0 or 1.0).
  float as_float() const;
  bool is_zero() const { return type == Type::Float ? f == 0.0f : i == 0; }
};

// `op` applied to a constant the checker has typed for it (a number for `-`, a Bool for `!`).
Constant fold_unary(UnaryOp op, Constant a);
// `op` applied to constants the checker has typed for it; an Int meets a Float as a Float.
Constant fold_binary(BinaryOp op, Constant a, Constant b);
// A builtin function applied to constants the checker has typed for it (numbers promoted as
// for operators; `where`'s condition a Bool and its branches of one type after promotion).
Constant fold_function(Function function, std::span<const Constant> args);

}  // namespace flexjit::dsl
