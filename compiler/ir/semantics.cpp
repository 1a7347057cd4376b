#include "flexjit/compiler/semantics.h"

#include <cstdio>
#include <cstdlib>

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

Value apply_operation(ExprKind kind, std::span<const Type> operand_types,
                      std::span<const Value> operands) {
  check_operands(kind, operand_types, operands.size());
  const bool is_float = operand_types[0] == Type::Float;
  const Value a = operands[0];
  const Value b = operands.size() > 1 ? operands[1] : Value{};
  switch (kind) {
    case ExprKind::Add:
      return is_float ? Value::of_float(fj::fadd(a.f, b.f)) : Value::of_int(fj::wrap_add(a.i, b.i));
    case ExprKind::Sub:
      return is_float ? Value::of_float(fj::fsub(a.f, b.f)) : Value::of_int(fj::wrap_sub(a.i, b.i));
    case ExprKind::Mul:
      return is_float ? Value::of_float(fj::fmul(a.f, b.f)) : Value::of_int(fj::wrap_mul(a.i, b.i));
    case ExprKind::Div:
      return is_float ? Value::of_float(fj::fdiv(a.f, b.f)) : Value::of_int(fj::floordiv(a.i, b.i));
    case ExprKind::Mod:
      return is_float ? Value::of_float(fj::fmod_floor(a.f, b.f))
                      : Value::of_int(fj::floormod(a.i, b.i));
    case ExprKind::Min:
      return is_float ? Value::of_float(fj::fmin(a.f, b.f)) : Value::of_int(fj::min(a.i, b.i));
    case ExprKind::Max:
      return is_float ? Value::of_float(fj::fmax(a.f, b.f)) : Value::of_int(fj::max(a.i, b.i));
    case ExprKind::Abs:
      return is_float ? Value::of_float(fj::fabs(a.f)) : Value::of_int(fj::wrap_abs(a.i));
    case ExprKind::Neg:
      return is_float ? Value::of_float(fj::fneg(a.f)) : Value::of_int(fj::wrap_neg(a.i));
    // Bools are 0 or 1 in `i`, so they compare as ints.
    case ExprKind::EQ:
      return Value::of_bool(is_float ? a.f == b.f : a.i == b.i);
    case ExprKind::NE:
      return Value::of_bool(is_float ? a.f != b.f : a.i != b.i);
    case ExprKind::LT:
      return Value::of_bool(is_float ? a.f < b.f : a.i < b.i);
    case ExprKind::LE:
      return Value::of_bool(is_float ? a.f <= b.f : a.i <= b.i);
    case ExprKind::GT:
      return Value::of_bool(is_float ? a.f > b.f : a.i > b.i);
    case ExprKind::GE:
      return Value::of_bool(is_float ? a.f >= b.f : a.i >= b.i);
    case ExprKind::And:
      return Value::of_bool(a.i != 0 && b.i != 0);
    case ExprKind::Or:
      return Value::of_bool(a.i != 0 || b.i != 0);
    case ExprKind::Not:
      return Value::of_bool(a.i == 0);
    case ExprKind::Select:
      return a.i != 0 ? operands[1] : operands[2];
    case ExprKind::ToInt:
      return Value::of_int(is_float ? fj::float_to_int(a.f) : a.i);
    case ExprKind::ToFloat:
      return Value::of_float(operand_types[0] == Type::Bool ? (a.i != 0 ? 1.0f : 0.0f)
                                                            : fj::int_to_float(a.i));
    case ExprKind::Tanh:
      return Value::of_float(fj::ftanh(a.f));
    case ExprKind::Exp:
      return Value::of_float(fj::fexp(a.f));
    case ExprKind::Exp2:
      return Value::of_float(fj::fexp2(a.f));
    case ExprKind::Log:
      return Value::of_float(fj::flog(a.f));
    case ExprKind::Log2:
      return Value::of_float(fj::flog2(a.f));
    case ExprKind::Sqrt:
      return Value::of_float(fj::fsqrt(a.f));
    case ExprKind::Sigmoid:
      return Value::of_float(fj::fsigmoid(a.f));
    case ExprKind::Floor:
      return Value::of_float(fj::ffloor(a.f));
    case ExprKind::Ceil:
      return Value::of_float(fj::fceil(a.f));
    case ExprKind::Load:
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::BoolImm:
    case ExprKind::Var:
    case ExprKind::Param:
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

}  // namespace

IntervalValue apply_operation(ExprKind kind, std::span<const Type> operand_types,
                              std::span<const IntervalValue> operands) {
  check_operands(kind, operand_types, operands.size());
  const bool is_float = operand_types[0] == Type::Float;
  const fj::Interval a = operands[0].ints;
  const fj::Interval b = operands.size() > 1 ? operands[1].ints : a;
  const fj::FloatInterval fa = operands[0].floats;
  const fj::FloatInterval fb = operands.size() > 1 ? operands[1].floats : fa;
  switch (kind) {
    case ExprKind::Add:
      return is_float ? of_floats(fj::fival::add(fa, fb)) : of_ints(fj::ival::add(a, b));
    case ExprKind::Sub:
      return is_float ? of_floats(fj::fival::sub(fa, fb)) : of_ints(fj::ival::sub(a, b));
    case ExprKind::Mul:
      return is_float ? of_floats(fj::fival::mul(fa, fb)) : of_ints(fj::ival::mul(a, b));
    case ExprKind::Div:
      return is_float ? of_floats(fj::fival::div(fa, fb)) : of_ints(fj::ival::div(a, b));
    case ExprKind::Mod:
      return is_float ? of_floats(fj::fival::mod(fa, fb)) : of_ints(fj::ival::mod(a, b));
    case ExprKind::Min:
      return is_float ? of_floats(fj::fival::min(fa, fb)) : of_ints(fj::ival::min(a, b));
    case ExprKind::Max:
      return is_float ? of_floats(fj::fival::max(fa, fb)) : of_ints(fj::ival::max(a, b));
    case ExprKind::Abs:
      return is_float ? of_floats(fj::fival::abs(fa)) : of_ints(fj::ival::abs(a));
    case ExprKind::Neg:
      return is_float ? of_floats(fj::fival::neg(fa)) : of_ints(fj::ival::neg(a));
    case ExprKind::EQ:
      return of_ints(is_float ? fj::fival::eq(fa, fb) : fj::ival::eq(a, b));
    case ExprKind::NE:
      return of_ints(is_float ? fj::fival::ne(fa, fb) : fj::ival::ne(a, b));
    case ExprKind::LT:
      return of_ints(is_float ? fj::fival::lt(fa, fb) : fj::ival::lt(a, b));
    case ExprKind::LE:
      return of_ints(is_float ? fj::fival::le(fa, fb) : fj::ival::le(a, b));
    case ExprKind::GT:
      return of_ints(is_float ? fj::fival::gt(fa, fb) : fj::ival::gt(a, b));
    case ExprKind::GE:
      return of_ints(is_float ? fj::fival::ge(fa, fb) : fj::ival::ge(a, b));
    case ExprKind::And:
      return of_ints(fj::ival::logical_and(a, b));
    case ExprKind::Or:
      return of_ints(fj::ival::logical_or(a, b));
    case ExprKind::Not:
      return of_ints(fj::ival::logical_not(a));
    case ExprKind::Select:
      return operand_types[1] == Type::Float
                 ? of_floats(fj::fival::select(a, operands[1].floats, operands[2].floats))
                 : of_ints(fj::ival::select(a, operands[1].ints, operands[2].ints));
    case ExprKind::ToInt:
      return of_ints(is_float ? fj::fival::to_int(fa) : a);  // a Bool's {0, 1} is already an int
    case ExprKind::ToFloat:
      return of_floats(fj::fival::from_int(a));  // a Bool converts as the int 0 or 1
    case ExprKind::Tanh:
      return of_floats(fj::fival::tanh(fa));
    case ExprKind::Exp:
      return of_floats(fj::fival::exp(fa));
    case ExprKind::Exp2:
      return of_floats(fj::fival::exp2(fa));
    case ExprKind::Log:
      return of_floats(fj::fival::log(fa));
    case ExprKind::Log2:
      return of_floats(fj::fival::log2(fa));
    case ExprKind::Sqrt:
      return of_floats(fj::fival::sqrt(fa));
    case ExprKind::Sigmoid:
      return of_floats(fj::fival::sigmoid(fa));
    case ExprKind::Floor:
      return of_floats(fj::fival::floor(fa));
    case ExprKind::Ceil:
      return of_floats(fj::fival::ceil(fa));
    case ExprKind::Load:
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::BoolImm:
    case ExprKind::Var:
    case ExprKind::Param:
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
