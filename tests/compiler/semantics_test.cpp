// The language's scalar semantics (fj_ops.cuh) against independent references, and every
// interval operation against brute force.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "flexjit/compiler/semantics.h"

namespace flexjit {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

// Two's complement wrap-around, by C++20's modular conversion (independent of fj_ops.cuh).
int32_t wrap(int64_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x));
}

// Python's exact a // b through long double: its 64-bit mantissa resolves every quotient of
// int32s (one just below an integer n misses it by at least 2^-31, far above the rounding
// error near 2^31).
int64_t exact_floor_quotient(int32_t a, int32_t b) {
  return static_cast<int64_t>(std::floor(static_cast<long double>(a) / b));
}

int32_t python_floordiv(int32_t a, int32_t b) {
  return b == 0 ? 0 : wrap(exact_floor_quotient(a, b));
}

int32_t python_floormod(int32_t a, int32_t b) {
  return b == 0 ? 0 : wrap(int64_t{a} - exact_floor_quotient(a, b) * b);
}

TEST_CASE("floor division and modulo follow Python, with x/0 == x%0 == 0", "[semantics]") {
  struct Case {
    int32_t a, b, quotient, remainder;
  };
  const Case cases[] = {
      {7, 2, 3, 1},
      {-7, 2, -4, 1},
      {7, -2, -4, -1},
      {-7, -2, 3, -1},
      {6, 3, 2, 0},
      {-6, 3, -2, 0},
      {0, 5, 0, 0},
      {-1, 5, -1, 4},
      {1, -5, -1, -4},
      {5, 0, 0, 0},
      {-5, 0, 0, 0},
      {0, 0, 0, 0},
      {kMin, -1, kMin, 0},
      {kMin, 1, kMin, 0},
      {kMax, -1, -kMax, 0},
      {kMin, 2, -(1 << 30), 0},
      {-1, kMax, -1, kMax - 1},
      {kMin, kMax, -2, kMax - 1},
      {kMax, kMin, -1, -1},
      {kMin, kMin, 1, 0},
  };
  for (const Case& c : cases) {
    INFO(c.a << " / " << c.b);
    CHECK(fj::floordiv(c.a, c.b) == c.quotient);
    CHECK(fj::floormod(c.a, c.b) == c.remainder);
  }
}

TEST_CASE("floor division and modulo agree with a long double reference", "[semantics]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(kMin, kMax);
  std::uniform_int_distribution<int32_t> small(-50, 50);
  for (int i = 0; i < 100000; ++i) {
    const int32_t a = i % 2 ? any(rng) : small(rng);
    const int32_t b = i % 3 ? small(rng) : any(rng);
    INFO(a << " / " << b);
    REQUIRE(fj::floordiv(a, b) == python_floordiv(a, b));
    REQUIRE(fj::floormod(a, b) == python_floormod(a, b));
    if (b != 0) {
      // a == (a / b) * b + a % b, with wrap-around.
      REQUIRE(wrap(int64_t{fj::floordiv(a, b)} * b + fj::floormod(a, b)) == a);
      // The remainder has the divisor's sign and is smaller in magnitude.
      const int32_t r = fj::floormod(a, b);
      REQUIRE((r == 0 || (r < 0) == (b < 0)));
      REQUIRE(std::llabs(r) < std::llabs(int64_t{b}));
    }
  }
}

TEST_CASE("arithmetic wraps around modulo 2^32", "[semantics]") {
  CHECK(fj::wrap_add(kMax, 1) == kMin);
  CHECK(fj::wrap_add(kMin, -1) == kMax);
  CHECK(fj::wrap_sub(kMin, 1) == kMax);
  CHECK(fj::wrap_sub(0, kMin) == kMin);
  CHECK(fj::wrap_mul(65536, 65536) == 0);
  CHECK(fj::wrap_mul(kMax, 2) == -2);
  CHECK(fj::wrap_mul(-1, kMin) == kMin);
  CHECK(fj::wrap_mul(46341, 46341) == wrap(int64_t{46341} * 46341));
  CHECK(fj::wrap_neg(kMin) == kMin);
  CHECK(fj::wrap_neg(kMax) == kMin + 1);
  CHECK(fj::wrap_abs(kMin) == kMin);
  CHECK(fj::wrap_abs(-5) == 5);
  CHECK(fj::wrap_abs(kMax) == kMax);
  CHECK(fj::min(-3, 2) == -3);
  CHECK(fj::max(-3, 2) == 2);
  CHECK(fj::wrap_to_i32(int64_t{1} << 32) == 0);
  CHECK(fj::wrap_to_i32((int64_t{1} << 31)) == kMin);
  CHECK(fj::wrap_to_i32(-(int64_t{1} << 31) - 1) == kMax);
}

TEST_CASE("Interval::wrapped shifts whole ranges and widens split ones", "[semantics]") {
  const auto same = [](fj::Interval a, int64_t lo, int64_t hi) { return a.lo == lo && a.hi == hi; };
  CHECK(same(fj::Interval::wrapped(-5, 7), -5, 7));
  CHECK(same(fj::Interval::wrapped(int64_t{kMax} + 1, int64_t{kMax} + 3), kMin, kMin + 2));
  CHECK(same(fj::Interval::wrapped(int64_t{kMin} - 2, int64_t{kMin} - 1), kMax - 1, kMax));
  CHECK(same(fj::Interval::wrapped(int64_t{kMax}, int64_t{kMax} + 1), kMin, kMax));
  CHECK(same(fj::Interval::wrapped(0, int64_t{1} << 32), kMin, kMax));
}

// ---------------------------------------------------------------------------------------------
// Interval operations by brute force

// The operand types of each operation, as the IR types it.
std::vector<std::vector<ir::Type>> operand_type_lists(ir::ExprKind kind) {
  using ir::Type;
  std::vector<std::vector<Type>> lists;
  const int count = ir::operand_count(kind);
  const std::vector<std::vector<Type>> candidates =
      count == 1 ? std::vector<std::vector<Type>>{{Type::Int}, {Type::Bool}}
      : count == 2
          ? std::vector<std::vector<Type>>{{Type::Int, Type::Int}, {Type::Bool, Type::Bool}}
          : std::vector<std::vector<Type>>{{Type::Bool, Type::Int, Type::Int},
                                           {Type::Bool, Type::Bool, Type::Bool}};
  for (const std::vector<Type>& types : candidates) {
    if (ir::result_type(kind, types)) lists.push_back(types);
  }
  return lists;
}

fj::Interval random_interval(ir::Type type, std::mt19937& rng) {
  if (type == ir::Type::Bool) {
    const int choice = std::uniform_int_distribution<int>(0, 2)(rng);
    return choice == 2 ? fj::Interval::either_bool() : fj::Interval::boolean(choice == 1);
  }
  const int width = std::uniform_int_distribution<int>(0, 6)(rng);
  int64_t lo = 0;
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0:
    case 1:
      lo = std::uniform_int_distribution<int>(-12, 12)(rng) - width / 2;
      break;
    case 2:  // ending at INT_MAX or a little below
      lo = int64_t{kMax} - width - std::uniform_int_distribution<int>(0, 3)(rng);
      break;
    case 3:  // starting at INT_MIN or a little above
      lo = int64_t{kMin} + std::uniform_int_distribution<int>(0, 3)(rng);
      break;
  }
  return fj::Interval::range(lo, lo + width);
}

TEST_CASE("every interval operation is sound and, except Mod, tight", "[semantics][interval]") {
  std::mt19937 rng(11);
  int checked_ops = 0;
  const ir::ExprKind all_kinds[] = {
#define FJ_LIST_KIND(node) ir::ExprKind::node,
      FJ_FOR_EACH_EXPR(FJ_LIST_KIND)
#undef FJ_LIST_KIND
  };
  for (const ir::ExprKind kind : all_kinds) {
    if (ir::operand_count(kind) == 0) continue;
    for (const std::vector<ir::Type>& types : operand_type_lists(kind)) {
      ++checked_ops;
      for (int trial = 0; trial < 3000; ++trial) {
        std::vector<fj::Interval> inputs;
        for (const ir::Type type : types)
          inputs.push_back(random_interval(type, rng));
        const fj::Interval result = ir::apply_operation(kind, inputs);
        INFO(ir::kind_name(kind) << " inputs [" << inputs[0].lo << ", " << inputs[0].hi << "] ...");
        REQUIRE(result.lo <= result.hi);
        REQUIRE(result.lo >= kMin);
        REQUIRE(result.hi <= kMax);

        // Every combination of operand values.
        int64_t seen_lo = std::numeric_limits<int64_t>::max();
        int64_t seen_hi = std::numeric_limits<int64_t>::min();
        std::vector<int32_t> values(types.size());
        std::vector<int64_t> cursor(types.size());
        for (size_t i = 0; i < types.size(); ++i)
          cursor[i] = inputs[i].lo;
        while (true) {
          for (size_t i = 0; i < types.size(); ++i)
            values[i] = static_cast<int32_t>(cursor[i]);
          const int32_t value = ir::apply_operation(kind, std::span<const int32_t>(values));
          INFO("at " << values[0] << (values.size() > 1 ? ", " + std::to_string(values[1]) : "")
                     << " value " << value << " interval [" << result.lo << ", " << result.hi
                     << "]");
          REQUIRE(result.contains(value));
          seen_lo = std::min<int64_t>(seen_lo, value);
          seen_hi = std::max<int64_t>(seen_hi, value);
          // Next combination, like an odometer.
          size_t i = 0;
          while (i < types.size() && cursor[i] == inputs[i].hi) {
            cursor[i] = inputs[i].lo;
            ++i;
          }
          if (i == types.size()) break;
          ++cursor[i];
        }
        // Bounds are attained unless the operation had to widen for wrap-around.
        const bool widened = result.lo == kMin && result.hi == kMax;
        if (kind != ir::ExprKind::Mod && !widened) {
          REQUIRE(seen_lo == result.lo);
          REQUIRE(seen_hi == result.hi);
        }
      }
    }
  }
  CHECK(checked_ops == 22);  // 19 operations; EQ, NE and Select also on Bool
}

TEST_CASE("interval modulo is exact within one period of a constant divisor", "[interval]") {
  const auto mod = [](int64_t lo, int64_t hi, int64_t divisor) {
    return fj::ival::mod(fj::Interval::range(lo, hi), fj::Interval::point(divisor));
  };
  fj::Interval r = mod(17, 19, 8);
  CHECK((r.lo == 1 && r.hi == 3));
  r = mod(-7, -5, 8);
  CHECK((r.lo == 1 && r.hi == 3));
  r = mod(17, 19, -8);
  CHECK((r.lo == -7 && r.hi == -5));
  r = mod(6, 9, 8);  // crosses a multiple of 8
  CHECK((r.lo == 0 && r.hi == 7));
  r = fj::ival::mod(fj::Interval::range(0, 5), fj::Interval::range(10, 20));
  CHECK((r.lo == 0 && r.hi == 5));
}

TEST_CASE("interval division includes the zero-divisor result", "[interval]") {
  const fj::Interval r = fj::ival::div(fj::Interval::range(100, 200), fj::Interval::range(-1, 1));
  CHECK((r.lo == -200 && r.hi == 200));
  const fj::Interval only_zero =
      fj::ival::div(fj::Interval::range(100, 200), fj::Interval::point(0));
  CHECK((only_zero.lo == 0 && only_zero.hi == 0));
  const fj::Interval min_by_minus_one =
      fj::ival::div(fj::Interval::point(kMin), fj::Interval::point(-1));
  CHECK((min_by_minus_one.lo == kMin && min_by_minus_one.hi == kMin));
}

}  // namespace
}  // namespace flexjit
