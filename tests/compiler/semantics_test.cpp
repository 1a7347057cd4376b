// The language's scalar semantics (fj_ops.cuh) against independent references, and every
// interval operation, int and float, against brute force.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
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

// floordiv_by / floormod_by (a known positive divisor: what the generated CUDA calls) agree
// with floordiv / floormod for every dividend, powers of two and others.
template <int32_t kDivisor>
void check_constant_divisor(std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> any(kMin, kMax);
  const int32_t edges[] = {kMin, kMin + 1, -kDivisor - 1, -kDivisor, -1,
                           0,    1,        kDivisor,      kMax - 1,  kMax};
  for (int i = 0; i < 20000; ++i) {
    const int32_t a = i < 10 ? edges[i] : (i % 2 ? any(rng) : any(rng) % 1000);
    INFO(a << " / " << kDivisor);
    REQUIRE(fj::floordiv_by<kDivisor>(a) == fj::floordiv(a, kDivisor));
    REQUIRE(fj::floormod_by<kDivisor>(a) == fj::floormod(a, kDivisor));
  }
}

TEST_CASE("floor division by a constant divisor matches the general one", "[semantics]") {
  std::mt19937 rng(11);
  check_constant_divisor<1>(rng);
  check_constant_divisor<2>(rng);
  check_constant_divisor<3>(rng);
  check_constant_divisor<7>(rng);
  check_constant_divisor<16>(rng);
  check_constant_divisor<100>(rng);
  check_constant_divisor<128>(rng);
  check_constant_divisor<1 << 30>(rng);
  check_constant_divisor<kMax>(rng);
}

// The interval and kv-range bounds' floor divisions (fj_ops.cuh), written without a 64-bit
// division (a call on the GPU), against __int128's: floordiv64 over int32 operands (INT_MIN / -1
// included), floordiv_wide over |x| <= 2^62 and divisors in [1, 2^31], and kvr's multiply_end.
TEST_CASE("the bounds' divisions and products are exact without a 64-bit division", "[semantics]") {
  const auto floor_quotient = [](__int128 x, __int128 c) {
    const __int128 q = x / c;
    return static_cast<int64_t>((x % c != 0 && ((x < 0) != (c < 0))) ? q - 1 : q);
  };
  std::mt19937_64 rng(29);
  std::uniform_int_distribution<int32_t> any(kMin, kMax);
  std::uniform_int_distribution<int32_t> small(-70, 70);
  const int32_t edges[] = {kMin, kMin + 1, -2, -1, 0, 1, 2, kMax - 1, kMax};
  for (int i = 0; i < 200000; ++i) {
    const int32_t a = i < 81 ? edges[i % 9] : (i % 2 ? any(rng) : small(rng));
    int32_t b = i < 81 ? edges[i / 9] : (i % 3 ? small(rng) : any(rng));
    if (b == 0) b = 1;
    INFO(a << " / " << b);
    REQUIRE(fj::detail::floordiv64(a, b) == floor_quotient(a, b));
  }
  constexpr int64_t kWide = int64_t{1} << 62;
  std::uniform_int_distribution<int64_t> wide(-kWide, kWide);
  std::uniform_int_distribution<int64_t> divisor(1, int64_t{1} << 31);
  const int64_t wide_edges[] = {
      -kWide, -kWide + 1, -(int64_t{1} << 53) - 1, int64_t{kMin} - 1,      kMin,      -1,   0,
      1,      kMax,       int64_t{kMax} + 1,       (int64_t{1} << 53) + 1, kWide - 1, kWide};
  const int64_t divisor_edges[] = {1, 2, 3, 7, 1000003, kMax, int64_t{1} << 31};
  for (const int64_t x : wide_edges) {
    for (const int64_t c : divisor_edges) {
      INFO(x << " / " << c);
      REQUIRE(fj::detail::floordiv_wide(x, c) == floor_quotient(x, c));
    }
  }
  for (int i = 0; i < 200000; ++i) {
    const int64_t c = i % 4 == 0 ? divisor(rng) : 1 + static_cast<int64_t>(rng() % 100);
    // Multiples of c and their neighbours, where rounding would show.
    int64_t x = wide(rng);
    if (i % 3 == 0) x = x / c * c + static_cast<int64_t>(rng() % 3) - 1;
    INFO(x << " / " << c);
    REQUIRE(fj::detail::floordiv_wide(x, c) == floor_quotient(x, c));
  }
  // kvr's x * c + add (c an int32 constant > 0, 0 <= add < c), saturated at +-2^62 and +-2^62
  // once |x * c| exceeds it, as the division-based check defined it.
  std::uniform_int_distribution<int64_t> multiplier(1, kMax);
  for (int i = 0; i < 200000; ++i) {
    const int64_t c = i % 2 ? multiplier(rng) : 1 + static_cast<int64_t>(rng() % 1000);
    int64_t x = wide(rng);
    if (i % 3 == 0) x = kWide / c * (i % 2 ? 1 : -1) + static_cast<int64_t>(rng() % 3) - 1;
    if (i % 5 == 0) x = static_cast<int64_t>(any(rng));
    const int64_t add = i % 2 ? 0 : c - 1;
    __int128 expected = static_cast<__int128>(x) * c;
    if (x <= -kWide || x >= kWide) {
      expected = x;
    } else if (expected > kWide) {
      expected = kWide;
    } else if (expected < -kWide) {
      expected = -kWide;
    } else {
      expected = std::clamp<__int128>(expected + add, -kWide, kWide);
    }
    INFO(x << " * " << c << " + " << add);
    REQUIRE(fj::kvr::detail::multiply_end(x, c, add) == static_cast<int64_t>(expected));
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
// Int interval operations by brute force

std::vector<ir::ExprKind> all_kinds() {
  return {
#define FJ_LIST_KIND(node) ir::ExprKind::node,
      FJ_FOR_EACH_EXPR(FJ_LIST_KIND)
#undef FJ_LIST_KIND
  };
}

// The operand type lists of each operation whose operands and result are Ints or Bools.
std::vector<std::vector<ir::Type>> int_operand_type_lists(ir::ExprKind kind) {
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
    const std::optional<Type> result = ir::result_type(kind, types);
    if (result && *result != Type::Float) lists.push_back(types);
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

ir::IntervalValue of_ints(fj::Interval ints) {
  ir::IntervalValue value;
  value.ints = ints;
  return value;
}

ir::IntervalValue of_floats(fj::FloatInterval floats) {
  ir::IntervalValue value;
  value.floats = floats;
  return value;
}

// The interval operations that may be wider than their operands' values reach: modulo across
// periods, and &, |, ^, bounded by sign and bit width only.
bool may_be_loose(ir::ExprKind kind) {
  return kind == ir::ExprKind::Mod || kind == ir::ExprKind::BitAnd || kind == ir::ExprKind::BitOr ||
         kind == ir::ExprKind::BitXor;
}

TEST_CASE("every int interval operation is sound and, except Mod, &, | and ^, tight",
          "[semantics][interval]") {
  std::mt19937 rng(11);
  int checked_ops = 0;
  for (const ir::ExprKind kind : all_kinds()) {
    if (ir::operand_count(kind) == 0 || kind == ir::ExprKind::Load) continue;
    for (const std::vector<ir::Type>& types : int_operand_type_lists(kind)) {
      ++checked_ops;
      for (int trial = 0; trial < 3000; ++trial) {
        std::vector<ir::IntervalValue> inputs;
        for (const ir::Type type : types)
          inputs.push_back(of_ints(random_interval(type, rng)));
        const fj::Interval result = ir::apply_operation(kind, types, inputs).ints;
        INFO(ir::kind_name(kind) << " inputs [" << inputs[0].ints.lo << ", " << inputs[0].ints.hi
                                 << "] ...");
        REQUIRE(result.lo <= result.hi);
        REQUIRE(result.lo >= kMin);
        REQUIRE(result.hi <= kMax);

        // Every combination of operand values.
        int64_t seen_lo = std::numeric_limits<int64_t>::max();
        int64_t seen_hi = std::numeric_limits<int64_t>::min();
        std::vector<ir::Value> values(types.size());
        std::vector<int64_t> cursor(types.size());
        for (size_t i = 0; i < types.size(); ++i)
          cursor[i] = inputs[i].ints.lo;
        while (true) {
          for (size_t i = 0; i < types.size(); ++i)
            values[i] = ir::Value::of_int(static_cast<int32_t>(cursor[i]));
          const int32_t value = ir::apply_operation(kind, types, values).i;
          INFO("at " << values[0].i << (values.size() > 1 ? ", " + std::to_string(values[1].i) : "")
                     << " value " << value << " interval [" << result.lo << ", " << result.hi
                     << "]");
          REQUIRE(result.contains(value));
          seen_lo = std::min<int64_t>(seen_lo, value);
          seen_hi = std::max<int64_t>(seen_hi, value);
          // Next combination, like an odometer.
          size_t i = 0;
          while (i < types.size() && cursor[i] == inputs[i].ints.hi) {
            cursor[i] = inputs[i].ints.lo;
            ++i;
          }
          if (i == types.size()) break;
          ++cursor[i];
        }
        // Bounds are attained unless the operation had to widen for wrap-around.
        const bool widened = result.lo == kMin && result.hi == kMax;
        if (!may_be_loose(kind) && !widened) {
          REQUIRE(seen_lo == result.lo);
          REQUIRE(seen_hi == result.hi);
        }
      }
    }
  }
  CHECK(checked_ops == 29);  // 25 operations; EQ, NE and Select also on Bool; int(bool)
}

TEST_CASE(
    "bitwise operations and shifts follow two's complement, counts outside [0, 31] shift "
    "every bit out",
    "[semantics]") {
  // Against C++20's modular conversions and arithmetic >> on int64 (not fj_ops.cuh).
  const int32_t values[] = {kMin, kMin + 1, -65536, -33, -8,    -1,       0,   1,
                            5,    31,       32,     33,  65535, kMax - 1, kMax};
  for (const int32_t a : values) {
    for (const int32_t n : values) {
      INFO(a << " and " << n);
      const bool in_range = n >= 0 && n <= 31;
      CHECK(fj::shl(a, n) == (in_range ? wrap(int64_t{a} * (int64_t{1} << n)) : 0));
      CHECK(fj::shr(a, n) == (in_range ? static_cast<int32_t>(int64_t{a} >> n) : (a < 0 ? -1 : 0)));
      const ir::Type ints[] = {ir::Type::Int, ir::Type::Int};
      const ir::Value operands[] = {ir::Value::of_int(a), ir::Value::of_int(n)};
      CHECK(ir::apply_operation(ir::ExprKind::BitAnd, ints, operands).i == wrap(int64_t{a} & n));
      CHECK(ir::apply_operation(ir::ExprKind::BitOr, ints, operands).i == wrap(int64_t{a} | n));
      CHECK(ir::apply_operation(ir::ExprKind::BitXor, ints, operands).i == wrap(int64_t{a} ^ n));
    }
    const ir::Type int_type[] = {ir::Type::Int};
    const ir::Value operand[] = {ir::Value::of_int(a)};
    CHECK(ir::apply_operation(ir::ExprKind::BitNot, int_type, operand).i == wrap(-int64_t{a} - 1));
  }
  // The documented examples (docs/language.md §5.1).
  CHECK(fj::shr(-7, 1) == -4);
  CHECK(fj::shl(1, 31) == kMin);
  CHECK(fj::shl(1, 32) == 0);
  CHECK(fj::shl(1, -1) == 0);
  CHECK(fj::shr(-5, 32) == -1);
  CHECK(fj::shr(-5, -1) == -1);
  CHECK(fj::shr(5, 100) == 0);
  CHECK(fj::shr(kMin, 31) == -1);
}

TEST_CASE("bitwise interval operations are sound over wide operands and every shift count",
          "[semantics][interval]") {
  std::mt19937 rng(29);
  // An interval of up to 40 values anywhere in int32, most often near 0, a power of two or an
  // end of the range; counts for shifts mostly around [0, 31]'s edges.
  const auto wide = [&](bool count) {
    static constexpr int64_t kCenters[] = {0, 31, 32, 255, 256, -256, 65536, -65536, kMin, kMax};
    const int64_t width = std::uniform_int_distribution<int>(0, 39)(rng);
    const int64_t center = count ? std::uniform_int_distribution<int>(-3, 34)(rng)
                                 : kCenters[std::uniform_int_distribution<int>(0, 9)(rng)] +
                                       std::uniform_int_distribution<int>(-20, 20)(rng);
    const int64_t lo = std::clamp<int64_t>(center - width / 2, kMin, int64_t{kMax} - width);
    return fj::Interval::range(lo, lo + width);
  };
  const ir::ExprKind kinds[] = {ir::ExprKind::BitAnd, ir::ExprKind::BitOr, ir::ExprKind::BitXor,
                                ir::ExprKind::Shl,    ir::ExprKind::Shr,   ir::ExprKind::BitNot};
  const ir::Type ints[] = {ir::Type::Int, ir::Type::Int};
  for (const ir::ExprKind kind : kinds) {
    const bool shift = kind == ir::ExprKind::Shl || kind == ir::ExprKind::Shr;
    const int count = ir::operand_count(kind);
    for (int trial = 0; trial < 2000; ++trial) {
      const ir::IntervalValue inputs[] = {of_ints(wide(false)), of_ints(wide(shift))};
      const fj::Interval result =
          ir::apply_operation(kind, std::span(ints, count), std::span(inputs, count)).ints;
      REQUIRE(result.lo >= kMin);
      REQUIRE(result.hi <= kMax);
      for (int64_t a = inputs[0].ints.lo; a <= inputs[0].ints.hi; ++a) {
        for (int64_t b = inputs[1].ints.lo; b <= inputs[1].ints.hi; ++b) {
          const ir::Value values[] = {ir::Value::of_int(static_cast<int32_t>(a)),
                                      ir::Value::of_int(static_cast<int32_t>(b))};
          const int32_t value =
              ir::apply_operation(kind, std::span(ints, count), std::span(values, count)).i;
          INFO(ir::kind_name(kind) << " at " << a << ", " << b << " value " << value
                                   << " interval [" << result.lo << ", " << result.hi << "]");
          REQUIRE(result.contains(value));
        }
      }
    }
  }
  // A non-negative mask bounds an and: x & m in [0, m]; a constant shift of a range is exact.
  const auto ival = [](int64_t lo, int64_t hi) { return fj::Interval::range(lo, hi); };
  const fj::Interval anything = fj::Interval::everything();
  CHECK(fj::ival::bit_and(anything, fj::Interval::point(1)).lo == 0);
  CHECK(fj::ival::bit_and(anything, fj::Interval::point(1)).hi == 1);
  CHECK(fj::ival::bit_and(anything, ival(0, 31)).hi == 31);
  CHECK(fj::ival::shr(ival(0, 1023), fj::Interval::point(5)).hi == 31);
  CHECK(fj::ival::shr(ival(-64, 63), fj::Interval::point(5)).lo == -2);
  CHECK(fj::ival::shl(ival(1, 3), fj::Interval::point(4)).lo == 16);
  CHECK(fj::ival::shl(ival(1, 3), fj::Interval::point(4)).hi == 48);
  // Wrapping past INT_MAX widens; counts that may leave [0, 31] add 0 (or the sign).
  CHECK(fj::ival::shl(ival(1, 3), fj::Interval::point(31)).lo == kMin);
  CHECK(fj::ival::shl(ival(1, 3), ival(30, 32)).lo <= 0);
  CHECK(fj::ival::shr(ival(-5, 5), ival(-1, 0)).lo == -5);
  CHECK(fj::ival::bit_not(ival(-3, 7)).lo == -8);
  CHECK(fj::ival::bit_not(ival(-3, 7)).hi == 2);
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

// ---------------------------------------------------------------------------------------------
// Float scalar semantics

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kMaxFloat = std::numeric_limits<float>::max();
constexpr float kTiny = std::numeric_limits<float>::denorm_min();

uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

TEST_CASE("float division and modulo by zero give +0.0", "[semantics][float]") {
  for (const float a : {1.0f, -1.0f, 0.0f, -0.0f, kInf, -kInf, kNaN, kMaxFloat}) {
    for (const float zero : {0.0f, -0.0f}) {
      INFO(a << " / " << zero);
      CHECK(bits(fj::fdiv(a, zero)) == bits(0.0f));
      CHECK(bits(fj::fmod_floor(a, zero)) == bits(0.0f));
    }
  }
  CHECK(fj::fdiv(1.0f, 3.0f) == 1.0f / 3.0f);
  CHECK(fj::fdiv(1.0f, kTiny) == kInf);
  CHECK(std::isnan(fj::fdiv(kInf, kInf)));
  CHECK(std::isnan(fj::fdiv(1.0f, kNaN)));
}

TEST_CASE("float modulo follows Python's float %", "[semantics][float]") {
  // Expected values from CPython (all exact in float32).
  struct Case {
    float a, b, want;
  };
  const Case cases[] = {
      {5.5f, 2.0f, 1.5f},   {-5.5f, 2.0f, 0.5f},   {5.5f, -2.0f, -0.5f},  {-5.5f, -2.0f, -1.5f},
      {-0.0f, 2.0f, 0.0f},  {0.0f, -2.0f, -0.0f},  {6.0f, 3.0f, 0.0f},    {-6.0f, 3.0f, 0.0f},
      {6.0f, -3.0f, -0.0f}, {-1e-30f, 1.0f, 1.0f}, {5.0f, kInf, 5.0f},    {-5.0f, kInf, kInf},
      {5.0f, -kInf, -kInf}, {0.5f, 1.0f, 0.5f},    {-0.75f, 0.5f, 0.25f},
  };
  for (const Case& c : cases) {
    INFO(c.a << " % " << c.b);
    CHECK(bits(fj::fmod_floor(c.a, c.b)) == bits(c.want));
  }
  CHECK(std::isnan(fj::fmod_floor(kInf, 2.0f)));
  CHECK(std::isnan(fj::fmod_floor(kNaN, 2.0f)));
  CHECK(std::isnan(fj::fmod_floor(2.0f, kNaN)));
}

TEST_CASE("float min and max ignore NaN and order the zeros", "[semantics][float]") {
  CHECK(fj::fmin(kNaN, 3.0f) == 3.0f);
  CHECK(fj::fmin(3.0f, kNaN) == 3.0f);
  CHECK(std::isnan(fj::fmin(kNaN, kNaN)));
  CHECK(fj::fmax(kNaN, -3.0f) == -3.0f);
  CHECK(bits(fj::fmin(0.0f, -0.0f)) == bits(-0.0f));
  CHECK(bits(fj::fmin(-0.0f, 0.0f)) == bits(-0.0f));
  CHECK(bits(fj::fmax(0.0f, -0.0f)) == bits(0.0f));
  CHECK(bits(fj::fmax(-0.0f, 0.0f)) == bits(0.0f));
  CHECK(fj::fmin(-kInf, 1.0f) == -kInf);
  CHECK(fj::fmax(-kInf, 1.0f) == 1.0f);
}

TEST_CASE("int() truncates toward zero, saturates and maps NaN to 0", "[semantics][float]") {
  CHECK(fj::float_to_int(2.9f) == 2);
  CHECK(fj::float_to_int(-2.9f) == -2);
  CHECK(fj::float_to_int(-0.5f) == 0);
  CHECK(fj::float_to_int(kNaN) == 0);
  CHECK(fj::float_to_int(3e9f) == kMax);
  CHECK(fj::float_to_int(-3e9f) == kMin);
  CHECK(fj::float_to_int(kInf) == kMax);
  CHECK(fj::float_to_int(-kInf) == kMin);
  CHECK(fj::float_to_int(2147483648.0f) == kMax);
  CHECK(fj::float_to_int(2147483520.0f) == 2147483520);  // the largest float below 2^31
  CHECK(fj::float_to_int(-2147483648.0f) == kMin);
  // float(int) rounds to nearest, ties to even.
  CHECK(fj::int_to_float(16777217) == 16777216.0f);
  CHECK(fj::int_to_float(16777219) == 16777220.0f);
  CHECK(fj::int_to_float(kMax) == 2147483648.0f);
  CHECK(fj::int_to_float(kMin) == -2147483648.0f);
}

TEST_CASE("float functions at their edges", "[semantics][float]") {
  CHECK(fj::fsigmoid(0.0f) == 0.5f);
  CHECK(fj::fsigmoid(-kInf) == 0.0f);
  CHECK(fj::fsigmoid(kInf) == 1.0f);
  CHECK(fj::fsigmoid(-200.0f) == 0.0f);
  CHECK(std::isnan(fj::fsigmoid(kNaN)));
  CHECK(fj::flog(0.0f) == -kInf);
  CHECK(fj::flog(-0.0f) == -kInf);
  CHECK(std::isnan(fj::flog(-1.0f)));
  CHECK(std::isnan(fj::fsqrt(-1.0f)));
  CHECK(bits(fj::fsqrt(-0.0f)) == bits(-0.0f));
  CHECK(fj::fexp(-kInf) == 0.0f);
  CHECK(fj::fexp2(10.0f) == 1024.0f);
  CHECK(fj::flog2(1024.0f) == 10.0f);
  CHECK(fj::ftanh(kInf) == 1.0f);
  CHECK(fj::ffloor(-0.5f) == -1.0f);
  CHECK(bits(fj::fceil(-0.5f)) == bits(-0.0f));
  CHECK(fj::fabs(-0.0f) == 0.0f);
  CHECK(!std::signbit(fj::fabs(-0.0f)));
}

TEST_CASE("typed apply_operation picks the operation of the operand type", "[semantics]") {
  using ir::Type;
  using ir::Value;
  const auto apply = [](ir::ExprKind kind, std::vector<Type> types, std::vector<Value> values) {
    return ir::apply_operation(kind, types, values);
  };
  CHECK(apply(ir::ExprKind::Div, {Type::Int, Type::Int}, {Value::of_int(-7), Value::of_int(2)}).i ==
        -4);
  CHECK(apply(ir::ExprKind::Div, {Type::Float, Type::Float},
              {Value::of_float(-7.0f), Value::of_float(2.0f)})
            .f == -3.5f);
  CHECK(apply(ir::ExprKind::EQ, {Type::Float, Type::Float},
              {Value::of_float(kNaN), Value::of_float(kNaN)})
            .i == 0);
  CHECK(apply(ir::ExprKind::NE, {Type::Float, Type::Float},
              {Value::of_float(kNaN), Value::of_float(kNaN)})
            .i == 1);
  CHECK(apply(ir::ExprKind::ToFloat, {Type::Bool}, {Value::of_bool(true)}).f == 1.0f);
  CHECK(apply(ir::ExprKind::ToFloat, {Type::Int}, {Value::of_int(-3)}).f == -3.0f);
  CHECK(apply(ir::ExprKind::ToInt, {Type::Bool}, {Value::of_bool(true)}).i == 1);
  CHECK(apply(ir::ExprKind::ToInt, {Type::Float}, {Value::of_float(-7.9f)}).i == -7);
  CHECK(apply(ir::ExprKind::Select, {Type::Bool, Type::Float, Type::Float},
              {Value::of_bool(false), Value::of_float(1.0f), Value::of_float(2.0f)})
            .f == 2.0f);
  CHECK(apply(ir::ExprKind::Sigmoid, {Type::Float}, {Value::of_float(0.0f)}).f == 0.5f);
}

// ---------------------------------------------------------------------------------------------
// Float interval operations against sampling

// Values every float test draws from: the ends of each binade that matter, both zeros, the
// extremes and infinities.
const std::vector<float>& special_floats() {
  static const std::vector<float> values = {-kInf, -kMaxFloat, -1e30f,  -100.0f,   -3.0f, -2.5f,
                                            -1.0f, -0.5f,      -1e-30f, -kTiny,    -0.0f, 0.0f,
                                            kTiny, 1e-30f,     0.5f,    1.0f,      2.0f,  3.0f,
                                            7.5f,  100.0f,     1e30f,   kMaxFloat, kInf};
  return values;
}

float random_float(std::mt19937& rng) {
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: {
      const std::vector<float>& specials = special_floats();
      return specials[std::uniform_int_distribution<size_t>(0, specials.size() - 1)(rng)];
    }
    case 1:
      return static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(rng)) / 2.0f;
    case 2:
      return std::uniform_real_distribution<float>(-10.0f, 10.0f)(rng);
    default: {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      return std::isnan(x) ? 1.0f : x;
    }
  }
}

fj::FloatInterval random_float_interval(std::mt19937& rng) {
  float a = random_float(rng);
  float b = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? a : random_float(rng);
  if (b < a) std::swap(a, b);
  return {a, b, std::uniform_int_distribution<int>(0, 3)(rng) == 0};
}

// Values inside `a` to try: both ends, their neighbours, every special value inside, a few
// random ones, and NaN when it may be NaN.
std::vector<float> samples(const fj::FloatInterval& a, std::mt19937& rng) {
  std::vector<float> values = {a.lo, a.hi, std::nextafter(a.lo, kInf), std::nextafter(a.hi, -kInf)};
  for (const float x : special_floats())
    values.push_back(x);
  for (int i = 0; i < 4; ++i) {
    const double lo = std::max<double>(a.lo, -1e38), hi = std::min<double>(a.hi, 1e38);
    if (lo <= hi) {
      values.push_back(static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(rng)));
    }
  }
  std::vector<float> inside;
  for (const float x : values) {
    if (x >= a.lo && x <= a.hi) inside.push_back(x);
  }
  if (a.nan) inside.push_back(kNaN);
  return inside;
}

bool float_contains(const fj::FloatInterval& a, float x) {
  return std::isnan(x) ? a.nan : a.lo <= x && x <= a.hi;
}

std::string describe(const fj::FloatInterval& a) {
  std::ostringstream out;
  out << "[" << a.lo << ", " << a.hi << "]" << (a.nan ? "+NaN" : "");
  return out.str();
}

// The operand type lists of each operation that takes or gives a Float.
std::vector<std::vector<ir::Type>> float_operand_type_lists(ir::ExprKind kind) {
  using ir::Type;
  std::vector<std::vector<Type>> lists;
  const int count = ir::operand_count(kind);
  std::vector<std::vector<Type>> candidates;
  if (count == 1) candidates = {{Type::Float}, {Type::Int}, {Type::Bool}};
  if (count == 2) candidates = {{Type::Float, Type::Float}};
  if (count == 3) candidates = {{Type::Bool, Type::Float, Type::Float}};
  for (const std::vector<Type>& types : candidates) {
    const std::optional<Type> result = ir::result_type(kind, types);
    const bool touches_float = (result && *result == Type::Float) || types.back() == Type::Float;
    if (result && touches_float) lists.push_back(types);
  }
  return lists;
}

TEST_CASE("every float interval operation is sound", "[semantics][interval][float]") {
  std::mt19937 rng(5);
  int checked_ops = 0;
  int decided = 0;
  for (const ir::ExprKind kind : all_kinds()) {
    if (ir::operand_count(kind) == 0 || kind == ir::ExprKind::Load) continue;
    for (const std::vector<ir::Type>& types : float_operand_type_lists(kind)) {
      ++checked_ops;
      const ir::Type result_type = *ir::result_type(kind, types);
      for (int trial = 0; trial < 6000; ++trial) {
        std::vector<ir::IntervalValue> inputs;
        std::vector<std::vector<ir::Value>> operand_samples;
        for (const ir::Type type : types) {
          std::vector<ir::Value> values;
          if (type == ir::Type::Float) {
            const fj::FloatInterval a = random_float_interval(rng);
            inputs.push_back(of_floats(a));
            for (const float x : samples(a, rng))
              values.push_back(ir::Value::of_float(x));
          } else {
            const fj::Interval a = random_interval(type, rng);
            inputs.push_back(of_ints(a));
            for (int64_t x = a.lo; x <= a.hi; ++x)
              values.push_back(ir::Value::of_int(static_cast<int32_t>(x)));
          }
          operand_samples.push_back(values);
        }
        const ir::IntervalValue result = ir::apply_operation(kind, types, inputs);
        if (result_type == ir::Type::Float) {
          REQUIRE(result.floats.lo <= result.floats.hi);
        } else {
          decided += result.ints.is_point();
        }

        std::vector<size_t> cursor(types.size(), 0);
        std::vector<ir::Value> values(types.size());
        while (true) {
          for (size_t i = 0; i < types.size(); ++i)
            values[i] = operand_samples[i][cursor[i]];
          const ir::Value value = ir::apply_operation(kind, types, values);
          const bool contained = result_type == ir::Type::Float
                                     ? float_contains(result.floats, value.f)
                                     : result.ints.contains(value.i);
          if (!contained) {  // the message is built only for a failure: this loop is hot
            std::ostringstream where;
            where << ir::kind_name(kind) << " at";
            for (size_t i = 0; i < types.size(); ++i) {
              if (types[i] == ir::Type::Float) {
                where << " " << values[i].f << " in " << describe(inputs[i].floats);
              } else {
                where << " " << values[i].i;
              }
            }
            if (result_type == ir::Type::Float) {
              where << ": " << value.f << " not in " << describe(result.floats);
            } else {
              where << ": " << value.i << " not in [" << result.ints.lo << ", " << result.ints.hi
                    << "]";
            }
            FAIL(where.str());
          }
          size_t i = 0;
          while (i < types.size() && cursor[i] + 1 == operand_samples[i].size()) {
            cursor[i] = 0;
            ++i;
          }
          if (i == types.size()) break;
          ++cursor[i];
        }
      }
    }
  }
  // 9 arithmetic and min/max/abs/neg, 6 comparisons, select, int(float), float(int),
  // float(bool), 9 functions.
  CHECK(checked_ops == 28);
  CHECK(decided > 1000);  // comparisons are decided often, not always "either"
}

TEST_CASE("float intervals are tight where they can be", "[interval][float]") {
  const auto same = [](fj::FloatInterval a, float lo, float hi, bool nan) {
    return bits(a.lo) == bits(lo) && bits(a.hi) == bits(hi) && a.nan == nan;
  };
  const fj::FloatInterval one_two = fj::FloatInterval::range(1.0f, 2.0f);
  CHECK(same(fj::fival::add(one_two, one_two), 2.0f, 4.0f, false));
  CHECK(same(fj::fival::sub(one_two, one_two), -1.0f, 1.0f, false));
  CHECK(same(fj::fival::mul(one_two, fj::FloatInterval::range(-3.0f, 0.5f)), -6.0f, 1.0f, false));
  // 0 * inf is NaN, the rest of [0, 5] * [1, inf] covers [0, inf].
  CHECK(same(
      fj::fival::mul(fj::FloatInterval::range(0.0f, 5.0f), fj::FloatInterval::range(1.0f, kInf)),
      0.0f, kInf, true));
  CHECK(same(fj::fival::mul(fj::FloatInterval::point(0.0f), fj::FloatInterval::everything()), 0.0f,
             0.0f, true));
  // x / 0 == 0 joins the quotients of both signs.
  const fj::FloatInterval q = fj::fival::div(one_two, fj::FloatInterval::range(-1.0f, 1.0f));
  CHECK((q.lo == -std::numeric_limits<float>::infinity() && q.hi == kInf && !q.nan));
  CHECK(same(fj::fival::div(one_two, fj::FloatInterval::point(0.0f)), 0.0f, 0.0f, false));
  CHECK(same(fj::fival::mod(fj::FloatInterval::range(0.5f, 2.5f), fj::FloatInterval::point(4.0f)),
             0.5f, 2.5f, false));
  CHECK(same(fj::fival::from_int(fj::Interval::range(16777217, 16777219)), 16777216.0f, 16777220.0f,
             false));
  const fj::Interval ints = fj::fival::to_int(fj::FloatInterval{-2.5f, 7.9f, true});
  CHECK((ints.lo == -2 && ints.hi == 7));
  CHECK(fj::fival::lt(one_two, fj::FloatInterval::range(3.0f, 4.0f)).lo == 1);
  CHECK(fj::fival::lt(one_two, fj::FloatInterval{3.0f, 4.0f, true}).lo == 0);  // NaN < x
  CHECK(fj::fival::ne(one_two, fj::FloatInterval::range(3.0f, 4.0f)).lo == 1);
  CHECK(fj::fival::eq(fj::FloatInterval::point(0.0f), fj::FloatInterval::point(-0.0f)).lo == 1);
  // min ignores a NaN operand, so the other operand's values join.
  CHECK(same(fj::fival::min(fj::FloatInterval{5.0f, 6.0f, true}, one_two), 1.0f, 2.0f, false));
  CHECK(same(
      fj::fival::min(fj::FloatInterval{0.0f, 6.0f, false}, fj::FloatInterval{5.0f, 9.0f, true}),
      0.0f, 6.0f, false));
  // Library functions are widened by a few floats; exact ones are not.
  const fj::FloatInterval e = fj::fival::exp(fj::FloatInterval::range(0.0f, 1.0f));
  CHECK((e.lo < 1.0f && e.lo > 0.999f && e.hi > std::exp(1.0f) && e.hi < 2.7183f));
  CHECK(same(fj::fival::sqrt(fj::FloatInterval::range(4.0f, 9.0f)), 2.0f, 3.0f, false));
  CHECK(same(fj::fival::sqrt(fj::FloatInterval::range(-4.0f, 9.0f)), 0.0f, 3.0f, true));
  CHECK(fj::fival::sqrt(fj::FloatInterval::range(-4.0f, -1.0f)).nan);  // only NaN: everything
  CHECK(same(fj::fival::floor(fj::FloatInterval::range(-1.5f, 2.5f)), -2.0f, 2.0f, false));
  const fj::FloatInterval s = fj::fival::sigmoid(fj::FloatInterval::everything());
  CHECK((s.lo == 0.0f && s.hi == 1.0f && s.nan));
}

TEST_CASE("array reads: out of range is 0, intervals read a few elements or are unbounded",
          "[semantics]") {
  const int32_t ints[] = {1, 2, 3, 4, 5, 6};  // 2 rows of 3, row stride 3
  const float floats[] = {0.5f, -1.5f, 2.5f};
  const fj::ArrayParam int_array{ints, 2, 3, 3, 0};
  const fj::ArrayParam float_array{floats, 3, 1, 1, 0};
  CHECK(ir::load(int_array, ir::Type::Int, 1, 2).i == 6);
  CHECK(ir::load(int_array, ir::Type::Int, 0, 0).i == 1);
  CHECK(ir::load(int_array, ir::Type::Int, 2, 0).i == 0);
  CHECK(ir::load(int_array, ir::Type::Int, 0, 3).i == 0);
  CHECK(ir::load(int_array, ir::Type::Int, -1, 0).i == 0);
  CHECK(ir::load(int_array, ir::Type::Int, kMin, kMax).i == 0);
  CHECK(ir::load(float_array, ir::Type::Float, 1, 0).f == -1.5f);
  CHECK(ir::load(float_array, ir::Type::Float, 3, 0).f == 0.0f);
  const fj::ArrayParam empty{nullptr, 0, 0, 0, 0};
  CHECK(ir::load(empty, ir::Type::Int, 0, 0).i == 0);

  const ir::IntervalValue point =
      ir::load(int_array, ir::Type::Int, fj::Interval::point(1), fj::Interval::point(1));
  CHECK((point.ints.lo == 5 && point.ints.hi == 5));
  const ir::IntervalValue outside =
      ir::load(int_array, ir::Type::Int, fj::Interval::point(7), fj::Interval::point(1));
  CHECK((outside.ints.lo == 0 && outside.ints.hi == 0));
  // Up to fj::detail::kSmallReadElements (8) elements: the hull of those read, with 0 where the
  // ranges reach past the array.
  const ir::IntervalValue range =
      ir::load(int_array, ir::Type::Int, fj::Interval::range(0, 1), fj::Interval::point(1));
  CHECK((range.ints.lo == 2 && range.ints.hi == 5));
  const ir::IntervalValue block =
      ir::load(int_array, ir::Type::Int, fj::Interval::range(0, 1), fj::Interval::range(1, 2));
  CHECK((block.ints.lo == 2 && block.ints.hi == 6));
  const ir::IntervalValue past =
      ir::load(int_array, ir::Type::Int, fj::Interval::range(1, 3), fj::Interval::range(1, 2));
  CHECK((past.ints.lo == 0 && past.ints.hi == 6));
  const ir::IntervalValue before =
      ir::load(int_array, ir::Type::Int, fj::Interval::point(1), fj::Interval::range(-2, 0));
  CHECK((before.ints.lo == 0 && before.ints.hi == 4));
  // More elements than that: every int32, without reading (a row range of 3 by 3 columns).
  const ir::IntervalValue wide =
      ir::load(int_array, ir::Type::Int, fj::Interval::range(0, 2), fj::Interval::range(0, 2));
  CHECK((wide.ints.lo == kMin && wide.ints.hi == kMax));
  const ir::IntervalValue huge =
      ir::load(int_array, ir::Type::Int, fj::Interval::point(0), fj::Interval::range(kMin, kMax));
  CHECK((huge.ints.lo == kMin && huge.ints.hi == kMax));
  const ir::IntervalValue float_point =
      ir::load(float_array, ir::Type::Float, fj::Interval::point(2), fj::Interval::point(0));
  CHECK(
      (float_point.floats.lo == 2.5f && float_point.floats.hi == 2.5f && !float_point.floats.nan));
  const ir::IntervalValue float_range =
      ir::load(float_array, ir::Type::Float, fj::Interval::range(0, 2), fj::Interval::point(0));
  CHECK(
      (float_range.floats.lo == -1.5f && float_range.floats.hi == 2.5f && !float_range.floats.nan));
  const ir::IntervalValue float_past =
      ir::load(float_array, ir::Type::Float, fj::Interval::range(1, 4), fj::Interval::point(0));
  CHECK((float_past.floats.lo == -1.5f && float_past.floats.hi == 2.5f && !float_past.floats.nan));
  const float nans[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  const fj::ArrayParam nan_array{nans, 2, 1, 1, 0};
  const ir::IntervalValue with_nan =
      ir::load(nan_array, ir::Type::Float, fj::Interval::range(0, 1), fj::Interval::point(0));
  CHECK((with_nan.floats.lo == 1.0f && with_nan.floats.hi == 1.0f && with_nan.floats.nan));
  CHECK(ir::load(float_array, ir::Type::Float, fj::Interval::range(0, 9), fj::Interval::point(0))
            .floats.nan);

  // Sound on random ranges in and around a 4 x 5 array: every element read lies in the interval.
  std::mt19937 rng(29);
  std::uniform_int_distribution<int32_t> value(-50, 50), index(-3, 7);
  std::vector<int32_t> cells(20);
  for (int32_t& cell : cells)
    cell = value(rng);
  const fj::ArrayParam grid{cells.data(), 4, 5, 5, 0};
  for (int trial = 0; trial < 2000; ++trial) {
    const int32_t r0 = index(rng), r1 = r0 + index(rng) % 4, c0 = index(rng),
                  c1 = c0 + index(rng) % 4;
    if (r1 < r0 || c1 < c0) continue;
    const fj::Interval hull =
        fj::ival::load_int(grid, fj::Interval::range(r0, r1), fj::Interval::range(c0, c1));
    for (int32_t r = r0; r <= r1; ++r) {
      for (int32_t c = c0; c <= c1; ++c) {
        const int32_t read = ir::load(grid, ir::Type::Int, r, c).i;
        INFO(r0 << ".." << r1 << " x " << c0 << ".." << c1 << " at " << r << ", " << c);
        REQUIRE((hull.lo <= read && read <= hull.hi));
      }
    }
  }
}

}  // namespace
}  // namespace flexjit
