// Constant folding with the host functions of templates/fj_ops.cuh, row by row of
// FJ_FOR_EACH_OPERATION.
#include "flexjit/dsl/constant.h"

#include <functional>

#include "fj_ops.cuh"
#include "flexjit/dsl/operations.h"

namespace flexjit::dsl {
namespace {

// A host function's result as a constant: Bool for a comparison or a logical operation,
// else a number of the operands' type (or the conversion's type).
template <class Result>
Constant constant_of(ops::Typing typing, bool floats, Result result) {
  switch (typing) {
    case ops::Typing::Equality:
    case ops::Typing::Ordering:
    case ops::Typing::Logic:
      return Constant::of_bool(result != 0);
    case ops::Typing::ToInt:
    case ops::Typing::Bitwise:
      return Constant::of_int(static_cast<int32_t>(result));
    case ops::Typing::ToFloat:
    case ops::Typing::Math:
      return Constant::of_float(static_cast<float>(result));
    case ops::Typing::Arithmetic:
    case ops::Typing::Numeric:
    case ops::Typing::Select:
      break;
  }
  return floats ? Constant::of_float(static_cast<float>(result))
                : Constant::of_int(static_cast<int32_t>(result));
}

// One row's host function: on floats when an operand is a Float (the others promoted) or the
// operation takes floats only (Math), else on the ints.
template <int Arity, class IntFunction, class FloatFunction>
Constant apply(ops::Typing typing, std::span<const Constant> args, IntFunction int_fn,
               FloatFunction float_fn) {
  bool floats = typing == ops::Typing::Math;
  for (const Constant& arg : args)
    floats = floats || arg.type == Type::Float;
  if constexpr (Arity == 1) {
    return floats ? constant_of(typing, true, float_fn(args[0].as_float()))
                  : constant_of(typing, false, int_fn(args[0].i));
  } else {
    static_assert(Arity == 2);
    return floats ? constant_of(typing, true, float_fn(args[0].as_float(), args[1].as_float()))
                  : constant_of(typing, false, int_fn(args[0].i, args[1].i));
  }
}

#define FJ_FOLD_CASE(Enum, name, node, arity, typing, syntax, spelling, source, emit, int_fn, \
                     float_fn, ...)                                                           \
  case Enum::name:                                                                            \
    return apply<arity>(ops::Typing::typing, args, FJ_OPERATION_FUNCTION(int_fn),             \
                        FJ_OPERATION_FUNCTION(float_fn));
#define FJ_FOLD_UNARY(name, ...) FJ_FOLD_CASE(UnaryOp, name, __VA_ARGS__)
#define FJ_FOLD_BINARY(name, ...) FJ_FOLD_CASE(BinaryOp, name, __VA_ARGS__)
#define FJ_FOLD_FUNCTION(name, ...) FJ_FOLD_CASE(Function, name, __VA_ARGS__)

Constant fold_row(UnaryOp op, std::span<const Constant> args) {
  switch (op) { FJ_FOR_EACH_SOURCE(UNARY, FJ_FOLD_UNARY) }
  return {};
}

Constant fold_row(BinaryOp op, std::span<const Constant> args) {
  switch (op) { FJ_FOR_EACH_SOURCE(BINARY, FJ_FOLD_BINARY) }
  return {};
}

Constant fold_row(Function function, std::span<const Constant> args) {
  switch (function) {
    FJ_FOR_EACH_SOURCE(CALL, FJ_FOLD_FUNCTION)
    case Function::Clamp:  // min(max(x, lo), hi)
    case Function::Where:
      break;
  }
  return {};
}

#undef FJ_FOLD_CASE
#undef FJ_FOLD_UNARY
#undef FJ_FOLD_BINARY
#undef FJ_FOLD_FUNCTION

}  // namespace

float Constant::as_float() const {
  return type == Type::Float ? f : fj::int_to_float(i);
}

Constant fold_unary(UnaryOp op, Constant a) {
  const Constant args[] = {a};
  return fold_row(op, args);
}

Constant fold_binary(BinaryOp op, Constant a, Constant b) {
  const Constant args[] = {a, b};
  return fold_row(op, args);
}

Constant fold_function(Function function, std::span<const Constant> args) {
  if (function == Function::Clamp) {
    const Constant low[] = {args[0], args[1]};
    const Constant high[] = {fold_row(Function::Max, low), args[2]};
    return fold_row(Function::Min, high);
  }
  if (function == Function::Where) {
    const Constant& chosen = args[0].i != 0 ? args[1] : args[2];
    const bool floats = args[1].type == Type::Float || args[2].type == Type::Float;
    return floats ? Constant::of_float(chosen.as_float()) : chosen;
  }
  return fold_row(function, args);
}

}  // namespace flexjit::dsl
