// The mask language's scalar semantics and the types shared by generated variants and the
// kernel templates. Compiled twice: by NVRTC inside every kernel, and by the host compiler
// for the IR evaluator and the interval analysis, so both sides agree bit for bit.
// No standard headers: NVRTC compiles this without a system include path.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FJ_HD __host__ __device__ __forceinline__
#else
#define FJ_HD inline
#endif

namespace fj {

using i32 = int;
using i64 = long long;
using u32 = unsigned int;

// Class of one tile of the attention matrix (values match flexjit::TileClass).
enum class TileClass : int { Empty = 0, Full = 1, Partial = 2 };

// Runtime scalar parameters, slot i holding the module's i-th `param` (passed by value
// in the kernel's arguments, so a launch carries them without a host-device copy).
constexpr int kMaxScalarParams = 16;
struct MaskParams {
  i32 scalar[kMaxScalarParams];
};

constexpr i32 kInt32Min = -2147483647 - 1;
constexpr i32 kInt32Max = 2147483647;

// ---------------------------------------------------------------------------------------------
// Scalar operations of the language on int32. Every one is total: wrap-around instead of
// signed overflow, division and modulo by zero yield 0, so neither the host nor the emitted
// CUDA ever executes undefined behaviour.

// The int32 congruent to x modulo 2^32 (two's complement wrap-around). Written without the
// implementation-defined unsigned-to-signed conversion so it means the same under C++17.
FJ_HD i32 wrap_to_i32(i64 x) {
  const u32 bits = (u32)(unsigned long long)x;
  return bits <= 0x7fffffffu ? (i32)bits : (i32)(bits - 0x80000000u) + kInt32Min;
}

FJ_HD i32 wrap_add(i32 a, i32 b) {
  return wrap_to_i32((i64)a + (i64)b);
}
FJ_HD i32 wrap_sub(i32 a, i32 b) {
  return wrap_to_i32((i64)a - (i64)b);
}
FJ_HD i32 wrap_mul(i32 a, i32 b) {
  return wrap_to_i32((i64)a * (i64)b);
}
// -INT_MIN == INT_MIN.
FJ_HD i32 wrap_neg(i32 a) {
  return wrap_to_i32(-(i64)a);
}
// abs(INT_MIN) == INT_MIN.
FJ_HD i32 wrap_abs(i32 a) {
  return a < 0 ? wrap_neg(a) : a;
}

// Floor division, like Python's `//`: the quotient rounds toward negative infinity.
// x / 0 == 0; INT_MIN / -1 == INT_MIN (wraps). Stays in 32-bit arithmetic: 64-bit division
// is many times slower on the GPU, and masks such as `q / chunk` run per element.
FJ_HD i32 floordiv(i32 a, i32 b) {
  if (b == 0) return 0;
  if (b == -1) return wrap_neg(a);
  const i32 quotient = a / b;
  const i32 remainder = a % b;
  return (remainder != 0 && ((remainder < 0) != (b < 0))) ? quotient - 1 : quotient;
}

// Floor modulo, like Python's `%`: the result has the divisor's sign and
// a == floordiv(a, b) * b + floormod(a, b) (with wrap-around). x % 0 == 0.
FJ_HD i32 floormod(i32 a, i32 b) {
  if (b == 0 || b == -1) return 0;
  const i32 remainder = a % b;
  return (remainder != 0 && ((remainder < 0) != (b < 0))) ? remainder + b : remainder;
}

FJ_HD i32 min(i32 a, i32 b) {
  return a < b ? a : b;
}
FJ_HD i32 max(i32 a, i32 b) {
  return a < b ? b : a;
}

// ---------------------------------------------------------------------------------------------
// Interval arithmetic: the set of values an expression can take when its inputs range over
// intervals. Used to classify tiles (DESIGN.md §4), so every operation must be SOUND: the
// result contains every value the scalar operation can produce from operands in the inputs.
// Integers are int32 and booleans are 0 (false) and 1 (true); bounds are int64 so that the
// exact result of an operation on int32 bounds can be formed before it is wrapped.

namespace detail {
FJ_HD i64 min64(i64 a, i64 b) {
  return a < b ? a : b;
}
FJ_HD i64 max64(i64 a, i64 b) {
  return a < b ? b : a;
}
// Exact floor division of values in int32 range (no wrap: INT_MIN / -1 == 2^31); b != 0.
FJ_HD i64 floordiv64(i64 a, i64 b) {
  const i64 quotient = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? quotient - 1 : quotient;
}
}  // namespace detail

// The inclusive range [lo, hi]; never empty (an empty tile is decided before evaluation).
struct Interval {
  i64 lo;
  i64 hi;

  // Every int32.
  static FJ_HD Interval everything() { return {kInt32Min, kInt32Max}; }
  static FJ_HD Interval point(i64 x) { return {x, x}; }
  // [lo, hi], lo <= hi, both in int32 range.
  static FJ_HD Interval range(i64 lo, i64 hi) { return {lo, hi}; }
  static FJ_HD Interval boolean(bool value) { return {value ? 1 : 0, value ? 1 : 0}; }
  // A boolean that may be either.
  static FJ_HD Interval either_bool() { return {0, 1}; }

  // The int32 values that the exact (unwrapped) results in [lo, hi] wrap to. Exact when
  // [lo, hi] shifted by a multiple of 2^32 lies in int32; everything when the wrapped values
  // are not one range (they then reach both INT_MIN and INT_MAX, so the hull is everything).
  static FJ_HD Interval wrapped(i64 lo, i64 hi) {
    if (lo >= kInt32Min && hi <= kInt32Max) return {lo, hi};
    if (hi - lo >= 0xffffffffll) return everything();
    const i64 wrapped_lo = wrap_to_i32(lo);
    const i64 wrapped_hi = wrap_to_i32(hi);
    return wrapped_lo <= wrapped_hi ? Interval{wrapped_lo, wrapped_hi} : everything();
  }

  FJ_HD bool is_point() const { return lo == hi; }
  FJ_HD bool contains(i64 x) const { return lo <= x && x <= hi; }
};

namespace detail {
// Hull of floordiv(a, d) for d in [d_lo, d_hi], a divisor range of one sign. For a divisor of
// constant sign the real quotient a / d is monotonic in each argument, so its extremes over
// the box lie at the corners, and floor keeps them there.
FJ_HD Interval div_same_sign(Interval a, i64 d_lo, i64 d_hi) {
  const i64 c0 = floordiv64(a.lo, d_lo), c1 = floordiv64(a.lo, d_hi);
  const i64 c2 = floordiv64(a.hi, d_lo), c3 = floordiv64(a.hi, d_hi);
  return {min64(min64(c0, c1), min64(c2, c3)), max64(max64(c0, c1), max64(c2, c3))};
}

// floormod(a, d) for d in [d_lo, d_hi], 1 <= d_lo <= d_hi.
FJ_HD Interval mod_positive(Interval a, i64 d_lo, i64 d_hi) {
  if (d_lo == d_hi) {
    const i64 quotient = floordiv64(a.lo, d_lo);
    // One period: the remainder is a minus a fixed multiple, so it keeps a's order.
    if (quotient == floordiv64(a.hi, d_lo)) return {a.lo - quotient * d_lo, a.hi - quotient * d_lo};
  }
  if (a.lo >= 0 && a.hi < d_lo) return a;  // every divisor exceeds a: a % d == a
  if (a.lo >= 0) return {0, min64(a.hi, d_hi - 1)};
  return {0, d_hi - 1};
}

// floormod(a, d) for d in [d_lo, d_hi], d_lo <= d_hi <= -1 (results lie in [d + 1, 0]).
FJ_HD Interval mod_negative(Interval a, i64 d_lo, i64 d_hi) {
  if (d_lo == d_hi) {
    const i64 quotient = floordiv64(a.lo, d_lo);
    if (quotient == floordiv64(a.hi, d_lo)) return {a.lo - quotient * d_lo, a.hi - quotient * d_lo};
  }
  if (a.hi <= 0 && a.lo > d_hi) return a;  // |a| < |d| for every divisor: a % d == a
  if (a.hi <= 0) return {max64(a.lo, d_lo + 1), 0};
  return {d_lo + 1, 0};
}
}  // namespace detail

// Class of a tile whose mask takes the boolean values in `mask`.
FJ_HD TileClass tile_class(Interval mask) {
  if (mask.hi == 0) return TileClass::Empty;
  if (mask.lo == 1) return TileClass::Full;
  return TileClass::Partial;
}

namespace ival {

// The smallest interval holding both.
FJ_HD Interval hull(Interval a, Interval b) {
  return {detail::min64(a.lo, b.lo), detail::max64(a.hi, b.hi)};
}

FJ_HD Interval add(Interval a, Interval b) {
  return Interval::wrapped(a.lo + b.lo, a.hi + b.hi);
}
FJ_HD Interval sub(Interval a, Interval b) {
  return Interval::wrapped(a.lo - b.hi, a.hi - b.lo);
}
FJ_HD Interval neg(Interval a) {
  return Interval::wrapped(-a.hi, -a.lo);
}

FJ_HD Interval mul(Interval a, Interval b) {
  const i64 c0 = a.lo * b.lo, c1 = a.lo * b.hi, c2 = a.hi * b.lo, c3 = a.hi * b.hi;
  return Interval::wrapped(detail::min64(detail::min64(c0, c1), detail::min64(c2, c3)),
                           detail::max64(detail::max64(c0, c1), detail::max64(c2, c3)));
}

FJ_HD Interval abs(Interval a) {
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return neg(a);
  return Interval::wrapped(0, detail::max64(-a.lo, a.hi));
}

FJ_HD Interval min(Interval a, Interval b) {
  return {detail::min64(a.lo, b.lo), detail::min64(a.hi, b.hi)};
}
FJ_HD Interval max(Interval a, Interval b) {
  return {detail::max64(a.lo, b.lo), detail::max64(a.hi, b.hi)};
}

// Hull of an operation whose result depends on the divisor's sign, over the divisor range `b`
// split by sign: `positive(a, lo, hi)` and `negative(a, lo, hi)` each see a range of one sign,
// and a divisor range holding 0 adds the result 0 (division and modulo by zero yield 0).
template <class Positive, class Negative>
FJ_HD Interval split_by_divisor_sign(Interval a, Interval b, Positive positive, Negative negative) {
  Interval result = Interval::point(0);
  bool have_result = b.contains(0);
  if (b.hi >= 1) {
    const Interval part = positive(a, detail::max64(b.lo, 1), b.hi);
    result = have_result ? hull(result, part) : part;
    have_result = true;
  }
  if (b.lo <= -1) {
    const Interval part = negative(a, b.lo, detail::min64(b.hi, -1));
    result = have_result ? hull(result, part) : part;
  }
  return result;
}

// Floor division; the exact hull is then wrapped (INT_MIN / -1).
FJ_HD Interval div(Interval a, Interval b) {
  const auto same_sign = [](Interval x, i64 lo, i64 hi) {
    return detail::div_same_sign(x, lo, hi);
  };
  const Interval result = split_by_divisor_sign(a, b, same_sign, same_sign);
  return Interval::wrapped(result.lo, result.hi);
}

// Floor modulo. Results never leave int32 (|a % d| < |d|).
FJ_HD Interval mod(Interval a, Interval b) {
  return split_by_divisor_sign(
      a, b, [](Interval x, i64 lo, i64 hi) { return detail::mod_positive(x, lo, hi); },
      [](Interval x, i64 lo, i64 hi) { return detail::mod_negative(x, lo, hi); });
}

// Comparisons give a boolean interval: decided when the operand ranges are ordered.
FJ_HD Interval lt(Interval a, Interval b) {
  if (a.hi < b.lo) return Interval::boolean(true);
  if (a.lo >= b.hi) return Interval::boolean(false);
  return Interval::either_bool();
}
FJ_HD Interval le(Interval a, Interval b) {
  if (a.hi <= b.lo) return Interval::boolean(true);
  if (a.lo > b.hi) return Interval::boolean(false);
  return Interval::either_bool();
}
FJ_HD Interval gt(Interval a, Interval b) {
  return lt(b, a);
}
FJ_HD Interval ge(Interval a, Interval b) {
  return le(b, a);
}
FJ_HD Interval eq(Interval a, Interval b) {
  if (a.is_point() && b.is_point() && a.lo == b.lo) return Interval::boolean(true);
  if (a.hi < b.lo || b.hi < a.lo) return Interval::boolean(false);
  return Interval::either_bool();
}

FJ_HD Interval logical_not(Interval a) {
  return {1 - a.hi, 1 - a.lo};
}
FJ_HD Interval ne(Interval a, Interval b) {
  return logical_not(eq(a, b));
}
FJ_HD Interval logical_and(Interval a, Interval b) {
  return {detail::min64(a.lo, b.lo), detail::min64(a.hi, b.hi)};
}
FJ_HD Interval logical_or(Interval a, Interval b) {
  return {detail::max64(a.lo, b.lo), detail::max64(a.hi, b.hi)};
}

// cond ? a : b
FJ_HD Interval select(Interval cond, Interval a, Interval b) {
  if (cond.lo == 1) return a;
  if (cond.hi == 0) return b;
  return hull(a, b);
}

}  // namespace ival

}  // namespace fj
