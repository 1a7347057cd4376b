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

}  // namespace

int32_t apply_operation(ExprKind kind, std::span<const int32_t> operands) {
  const int count = operand_count(kind);
  if (count == 0 || static_cast<int>(operands.size()) != count) not_an_operation(kind);
  const int32_t a = operands[0];
  const int32_t b = count > 1 ? operands[1] : 0;
  switch (kind) {
    case ExprKind::Add:
      return fj::wrap_add(a, b);
    case ExprKind::Sub:
      return fj::wrap_sub(a, b);
    case ExprKind::Mul:
      return fj::wrap_mul(a, b);
    case ExprKind::Div:
      return fj::floordiv(a, b);
    case ExprKind::Mod:
      return fj::floormod(a, b);
    case ExprKind::Min:
      return fj::min(a, b);
    case ExprKind::Max:
      return fj::max(a, b);
    case ExprKind::Abs:
      return fj::wrap_abs(a);
    case ExprKind::Neg:
      return fj::wrap_neg(a);
    case ExprKind::EQ:
      return a == b;
    case ExprKind::NE:
      return a != b;
    case ExprKind::LT:
      return a < b;
    case ExprKind::LE:
      return a <= b;
    case ExprKind::GT:
      return a > b;
    case ExprKind::GE:
      return a >= b;
    case ExprKind::And:
      return a != 0 && b != 0;
    case ExprKind::Or:
      return a != 0 || b != 0;
    case ExprKind::Not:
      return a == 0;
    case ExprKind::Select:
      return a != 0 ? b : operands[2];
    case ExprKind::IntImm:
    case ExprKind::BoolImm:
    case ExprKind::Var:
    case ExprKind::Param:
      break;
  }
  not_an_operation(kind);
}

fj::Interval apply_operation(ExprKind kind, std::span<const fj::Interval> operands) {
  const int count = operand_count(kind);
  if (count == 0 || static_cast<int>(operands.size()) != count) not_an_operation(kind);
  const fj::Interval a = operands[0];
  const fj::Interval b = count > 1 ? operands[1] : a;
  switch (kind) {
    case ExprKind::Add:
      return fj::ival::add(a, b);
    case ExprKind::Sub:
      return fj::ival::sub(a, b);
    case ExprKind::Mul:
      return fj::ival::mul(a, b);
    case ExprKind::Div:
      return fj::ival::div(a, b);
    case ExprKind::Mod:
      return fj::ival::mod(a, b);
    case ExprKind::Min:
      return fj::ival::min(a, b);
    case ExprKind::Max:
      return fj::ival::max(a, b);
    case ExprKind::Abs:
      return fj::ival::abs(a);
    case ExprKind::Neg:
      return fj::ival::neg(a);
    case ExprKind::EQ:
      return fj::ival::eq(a, b);
    case ExprKind::NE:
      return fj::ival::ne(a, b);
    case ExprKind::LT:
      return fj::ival::lt(a, b);
    case ExprKind::LE:
      return fj::ival::le(a, b);
    case ExprKind::GT:
      return fj::ival::gt(a, b);
    case ExprKind::GE:
      return fj::ival::ge(a, b);
    case ExprKind::And:
      return fj::ival::logical_and(a, b);
    case ExprKind::Or:
      return fj::ival::logical_or(a, b);
    case ExprKind::Not:
      return fj::ival::logical_not(a);
    case ExprKind::Select:
      return fj::ival::select(a, b, operands[2]);
    case ExprKind::IntImm:
    case ExprKind::BoolImm:
    case ExprKind::Var:
    case ExprKind::Param:
      break;
  }
  not_an_operation(kind);
}

}  // namespace flexjit::ir
