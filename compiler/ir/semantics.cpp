#include "flexjit/compiler/semantics.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>

namespace flexjit::ir {

namespace {

[[noreturn]] void not_an_operation(ExprKind kind) {
  std::fprintf(stderr, "flexjit internal error: apply_operation on %s with wrong operands\n",
               kind_name(kind));
  std::abort();
}

// Checks apply_operation's contract: the operation is typed for these operands.
void check_operands(ExprKind kind, std::span<const Type> operand_types, size_t operand_count) {
  const int count = ir::operand_count(kind);
  if (count == 0 || kind == ExprKind::Load || static_cast<int>(operand_count) != count ||
      operand_types.size() != operand_count || !result_type(kind, operand_types)) {
    not_an_operation(kind);
  }
}

}  // namespace

namespace {

// A host function's result as the value of an expression of type `type`: a comparison's bool
// as a Bool, an int32 as an Int, a float as a Float.
template <class Result>
Value value_of(Type type, Result result) {
  switch (type) {
    case Type::Bool:
      return Value::of_bool(result != 0);
    case Type::Int:
      return Value::of_int(static_cast<int32_t>(result));
    case Type::Float:
      break;
  }
  return Value::of_float(static_cast<float>(result));
}

// One row's host function on the operands' Int (and Bool) or Float members.
template <int Arity, class IntFunction, class FloatFunction>
Value apply_row(Type result, bool is_float, std::span<const Value> operands, IntFunction int_fn,
                FloatFunction float_fn) {
  if constexpr (Arity == 1) {
    return is_float ? value_of(result, float_fn(operands[0].f))
                    : value_of(result, int_fn(operands[0].i));
  } else {  // Arity 2 (Select, the one of 3, is applied before)
    return is_float ? value_of(result, float_fn(operands[0].f, operands[1].f))
                    : value_of(result, int_fn(operands[0].i, operands[1].i));
  }
}

}  // namespace

Value apply_operation(ExprKind kind, std::span<const Type> operand_types,
                      std::span<const Value> operands) {
  check_operands(kind, operand_types, operands.size());
  // Select's condition is a Bool, its branches give the value.
  if (kind == ExprKind::Select) return operands[0].i != 0 ? operands[1] : operands[2];
  const Type result = *result_type(kind, operand_types);
  const bool is_float = operand_types[0] == Type::Float;
  switch (kind) {
#define FJ_APPLY_SCALAR(C, node, arity, typing, syntax, spelling, source, emit, int_fn, float_fn, \
                        ...)                                                                      \
  case ExprKind::node:                                                                            \
    return apply_row<arity>(result, is_float, operands, FJ_OPERATION_FUNCTION(int_fn),            \
                            FJ_OPERATION_FUNCTION(float_fn));
    FJ_FOR_EACH_OPERATION(FJ_APPLY_SCALAR, _)
#undef FJ_APPLY_SCALAR
    default:
      break;
  }
  not_an_operation(kind);
}

namespace {

IntervalValue of_ints(fj::Interval ints) {
  IntervalValue value;
  value.ints = ints;
  return value;
}

IntervalValue of_floats(fj::FloatInterval floats) {
  IntervalValue value;
  value.floats = floats;
  return value;
}

// An interval function's result: Int (and Bool) intervals or Float ones.
template <class Result>
IntervalValue interval_of(Result result) {
  if constexpr (std::is_same_v<Result, fj::FloatInterval>) {
    return of_floats(result);
  } else if constexpr (std::is_same_v<Result, fj::Interval>) {
    return of_ints(result);
  } else {
    static_assert(std::is_same_v<Result, int32_t>);  // ops::Undefined, never called
    return {};
  }
}

// One row's interval function on the operands' Int (and Bool) or Float intervals.
template <int Arity, class IntFunction, class FloatFunction>
IntervalValue apply_row(bool is_float, std::span<const IntervalValue> operands, IntFunction int_fn,
                        FloatFunction float_fn) {
  if constexpr (Arity == 1) {
    return is_float ? interval_of(float_fn(operands[0].floats))
                    : interval_of(int_fn(operands[0].ints));
  } else if constexpr (Arity == 2) {
    return is_float ? interval_of(float_fn(operands[0].floats, operands[1].floats))
                    : interval_of(int_fn(operands[0].ints, operands[1].ints));
  } else {
    // Select: the condition's ints, then the branches of their type.
    return is_float
               ? interval_of(float_fn(operands[0].ints, operands[1].floats, operands[2].floats))
               : interval_of(int_fn(operands[0].ints, operands[1].ints, operands[2].ints));
  }
}

}  // namespace

IntervalValue apply_operation(ExprKind kind, std::span<const Type> operand_types,
                              std::span<const IntervalValue> operands) {
  check_operands(kind, operand_types, operands.size());
  // The type that picks the function: the first operand's, except for Select, where it is
  // the branches'. A Bool's {0, 1} interval is an Int one (int(b) copies it, float(b)
  // converts it as one).
  const bool is_float = operand_types[kind == ExprKind::Select ? 1 : 0] == Type::Float;
  switch (kind) {
#define FJ_APPLY_INTERVAL(C, node, arity, typing, syntax, spelling, source, emit, int_fn, \
                          float_fn, ival_fn, fival_fn)                                    \
  case ExprKind::node:                                                                    \
    return apply_row<arity>(is_float, operands, FJ_OPERATION_FUNCTION(ival_fn),           \
                            FJ_OPERATION_FUNCTION(fival_fn));
    FJ_FOR_EACH_OPERATION(FJ_APPLY_INTERVAL, _)
#undef FJ_APPLY_INTERVAL
    default:
      break;
  }
  not_an_operation(kind);
}

Value load(const fj::ArrayParam& array, Type type, int32_t row, int32_t col) {
  return type == Type::Float ? Value::of_float(fj::load_float(array, row, col))
                             : Value::of_int(fj::load_int(array, row, col));
}

IntervalValue load(const fj::ArrayParam& array, Type type, const fj::Interval& row,
                   const fj::Interval& col) {
  return type == Type::Float ? of_floats(fj::fival::load_float(array, row, col))
                             : of_ints(fj::ival::load_int(array, row, col));
}

}  // namespace flexjit::ir
