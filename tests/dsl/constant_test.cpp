// Constant folding (flexjit/dsl/constant.h) follows templates/fj_ops.cuh, as the IR's folding,
// the evaluator and the kernels do.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "flexjit/dsl/constant.h"

using namespace flexjit::dsl;

namespace {

Constant fold(Function function, Constant a, Constant b) {
  const Constant args[] = {a, b};
  return fold_function(function, args);
}

bool is_zero_with_sign(Constant c, bool negative) {
  return c.type == Type::Float && c.f == 0.0f && std::signbit(c.f) == negative;
}

}  // namespace

// The checker used std::fmin / std::fmax, which leave the sign of a zero result unspecified;
// fj::fmin and fj::fmax (what the kernels compute) take -0.0 as the smaller zero.
TEST_CASE("constant min and max order signed zeros and ignore NaN as fj_ops does",
          "[dsl][constant]") {
  const Constant zero = Constant::of_float(0.0f);
  const Constant negative_zero = Constant::of_float(-0.0f);
  const Constant nan = Constant::of_float(std::numeric_limits<float>::quiet_NaN());
  const Constant two = Constant::of_float(2.0f);

  CHECK(is_zero_with_sign(fold(Function::Min, zero, negative_zero), true));
  CHECK(is_zero_with_sign(fold(Function::Min, negative_zero, zero), true));
  CHECK(is_zero_with_sign(fold(Function::Max, zero, negative_zero), false));
  CHECK(is_zero_with_sign(fold(Function::Max, negative_zero, zero), false));
  // An int meets a float as a float: int 0 is +0.0.
  CHECK(is_zero_with_sign(fold(Function::Min, Constant::of_int(0), negative_zero), true));
  CHECK(is_zero_with_sign(fold(Function::Max, negative_zero, Constant::of_int(0)), false));
  // clamp(x, lo, hi) is min(max(x, lo), hi).
  const Constant clamp_args[] = {negative_zero, zero, Constant::of_float(1.0f)};
  CHECK(is_zero_with_sign(fold_function(Function::Clamp, clamp_args), false));

  CHECK(fold(Function::Min, nan, two).f == 2.0f);
  CHECK(fold(Function::Min, two, nan).f == 2.0f);
  CHECK(fold(Function::Max, nan, two).f == 2.0f);
  CHECK(fold(Function::Max, two, nan).f == 2.0f);
  CHECK(std::isnan(fold(Function::Min, nan, nan).f));
  CHECK(std::isnan(fold(Function::Max, nan, nan).f));
}
