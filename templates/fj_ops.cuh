// The mask language's scalar semantics and the types shared by generated variants and the
// kernel templates. Compiled twice: by NVRTC inside every kernel, and by the host compiler
// for the IR evaluator and the interval analysis, so both sides agree bit for bit (the
// transcendental float functions excepted: see "Scalar operations ... on float32").
// No standard headers under NVRTC, which compiles this without a system include path; the
// host takes its math functions from <cmath>.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif

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

// A runtime array parameter (`param doc: int[b, kv]`): dense, row-major int32 or float32
// elements in memory the reader can address (device memory in a kernel, host memory in the
// host evaluator). A 1-D array has cols == 1. Reads outside [0, rows) x [0, cols) yield 0.
struct ArrayParam {
  const void* data;  // null only when rows * cols == 0
  i32 rows;
  i32 cols;
  i32 row_stride;  // elements from one row to the next, >= cols
  i32 slot;        // this array's slot, for bad_index reports
  // Debug (null normally): four int32 {reported, slot, row, col}, zeroed by the caller. The
  // first read outside the array sets reported to 1 and records where it was.
  i32* bad_index;
};

// The runtime parameters of a variant, passed by value in the kernel's arguments (so a
// launch carries them without a host-device copy). Scalar slot i holds the module's i-th
// scalar `param`: an Int, a Bool (nonzero is true) or the bits of a Float. Array slot i
// holds the module's i-th array `param`.
constexpr int kMaxScalarParams = 16;
constexpr int kMaxArrayParams = 8;
struct MaskParams {
  i32 scalar[kMaxScalarParams];
  ArrayParam array[kMaxArrayParams];
};

// The float32 whose bits are `bits`, and back (a union would be undefined behaviour in C++).
FJ_HD float bits_to_float(i32 bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
#endif
}
FJ_HD i32 float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(value);
#else
  i32 bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

// Records the first out-of-range read when the launch asked for it (ArrayParam::bad_index).
// Off the fast path: only reads that already yield 0 come here.
FJ_HD void report_bad_index(const ArrayParam& a, i32 row, i32 col) {
  if (a.bad_index == nullptr) return;
#if defined(__CUDA_ARCH__)
  if (atomicCAS(a.bad_index, 0, 1) != 0) return;
#else
  if (a.bad_index[0] != 0) return;
  a.bad_index[0] = 1;
#endif
  a.bad_index[1] = a.slot;
  a.bad_index[2] = row;
  a.bad_index[3] = col;
}

// Offset of element [row, col], or -1 (reported) when it lies outside the array.
FJ_HD i64 array_offset(const ArrayParam& a, i32 row, i32 col) {
  if (row < 0 || row >= a.rows || col < 0 || col >= a.cols) {
    report_bad_index(a, row, col);
    return -1;
  }
  return (i64)row * a.row_stride + col;
}
FJ_HD i32 load_int(const ArrayParam& a, i32 row, i32 col) {
  const i64 offset = array_offset(a, row, col);
  if (offset < 0) return 0;
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const i32*>(a.data) + offset);
#else
  return static_cast<const i32*>(a.data)[offset];
#endif
}
FJ_HD float load_float(const ArrayParam& a, i32 row, i32 col) {
  const i64 offset = array_offset(a, row, col);
  if (offset < 0) return 0.0f;
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const float*>(a.data) + offset);
#else
  return static_cast<const float*>(a.data)[offset];
#endif
}

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
// Scalar operations of the language on float32 (IEEE binary32, round to nearest even, no
// flush to zero). Arithmetic, conversions, sqrt, floor and ceil are correctly rounded, so the
// host and the device compute the same bits (a NaN's payload aside). On the device the
// explicitly rounded intrinsics keep NVCC from contracting `a * b + c` into one fma, which
// would round once instead of twice. tanh, exp, exp2, log, log2 and sigmoid come from the
// CUDA math library on the device and from the C library on the host: each within a few ulp
// of the exact value, not bit-identical (the interval versions below widen for that).

FJ_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
// a - b is a + (-b) exactly (IEEE defines subtraction so).
FJ_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FJ_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
// a / b, and 0.0 when b is zero (of either sign), whatever a is (NaN included).
FJ_HD float fdiv(float a, float b) {
  if (b == 0.0f) return 0.0f;
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FJ_HD float fneg(float a) {
  return -a;
}
FJ_HD float fabs(float a) {
#if defined(__CUDA_ARCH__)
  return ::fabsf(a);
#else
  return std::fabs(a);
#endif
}

// Floor modulo like Python's float `%`: fmod (exact), then moved into the divisor's sign by
// adding the divisor once; a zero result takes the divisor's sign. a % 0 == 0.0. As in
// Python, -5.0 % inf == inf, and inf % b is NaN.
FJ_HD float fmod_floor(float a, float b) {
  if (b == 0.0f) return 0.0f;
#if defined(__CUDA_ARCH__)
  float mod = ::fmodf(a, b);
#else
  float mod = std::fmod(a, b);
#endif
  if (mod != 0.0f) {
    if ((b < 0.0f) != (mod < 0.0f)) mod = fadd(mod, b);
  } else {
    mod = b < 0.0f ? -0.0f : 0.0f;
  }
  return mod;
}

// The smaller operand; a NaN operand is ignored (like fminf), and -0.0 counts as smaller than
// +0.0 (fminf leaves that pair unspecified, so the host and the device could differ).
FJ_HD float fmin(float a, float b) {
  if (b != b) return a;
  if (a != a) return b;
  if (a < b) return a;
  if (b < a) return b;
  return float_to_bits(a) < 0 ? a : b;
}
// The larger operand; a NaN operand is ignored, +0.0 counts as larger than -0.0.
FJ_HD float fmax(float a, float b) {
  if (b != b) return a;
  if (a != a) return b;
  if (a < b) return b;
  if (b < a) return a;
  return float_to_bits(a) < 0 ? b : a;
}

// int(a) like Python's int(): truncation toward zero; NaN gives 0 and values beyond the int32
// range saturate (the explicit tests keep the host free of undefined behaviour).
FJ_HD i32 float_to_int(float a) {
  if (a != a) return 0;
  if (a >= 2147483648.0f) return kInt32Max;
  if (a <= -2147483648.0f) return kInt32Min;
  return (i32)a;
}
// float(a): the nearest float32, ties to even.
FJ_HD float int_to_float(i32 a) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(a);
#else
  return (float)a;
#endif
}

FJ_HD float fsqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
FJ_HD float ffloor(float a) {
#if defined(__CUDA_ARCH__)
  return ::floorf(a);
#else
  return std::floor(a);
#endif
}
FJ_HD float fceil(float a) {
#if defined(__CUDA_ARCH__)
  return ::ceilf(a);
#else
  return std::ceil(a);
#endif
}
FJ_HD float ftanh(float a) {
#if defined(__CUDA_ARCH__)
  return ::tanhf(a);
#else
  return std::tanh(a);
#endif
}
FJ_HD float fexp(float a) {
#if defined(__CUDA_ARCH__)
  return ::expf(a);
#else
  return std::exp(a);
#endif
}
FJ_HD float fexp2(float a) {
#if defined(__CUDA_ARCH__)
  return ::exp2f(a);
#else
  return std::exp2(a);
#endif
}
FJ_HD float flog(float a) {
#if defined(__CUDA_ARCH__)
  return ::logf(a);
#else
  return std::log(a);
#endif
}
FJ_HD float flog2(float a) {
#if defined(__CUDA_ARCH__)
  return ::log2f(a);
#else
  return std::log2(a);
#endif
}
// 1 / (1 + e^-a): 0 at -inf, 1 at +inf, always within [0, 1] (the denominator is >= 1).
FJ_HD float fsigmoid(float a) {
  return fdiv(1.0f, fadd(1.0f, fexp(-a)));
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

// A set of float32 values: every value in [lo, hi] (either end may be infinite; lo <= hi),
// plus NaN when `nan`. Never empty: an interval with no number is not built (an analysis that
// only knows "NaN" uses everything()).
struct FloatInterval {
  float lo;
  float hi;
  bool nan;

  // (NVRTC has no __builtin_huge_valf; infinity is spelled by its bits.)
  static FJ_HD FloatInterval everything() {
    return {-bits_to_float(0x7f800000), bits_to_float(0x7f800000), true};
  }
  // {x}; NaN gives everything().
  static FJ_HD FloatInterval point(float x) {
    return x == x ? FloatInterval{x, x, false} : everything();
  }
  static FJ_HD FloatInterval range(float lo, float hi) { return {lo, hi, false}; }
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

namespace ival {
// Every value a read of `a` at rows `row`, columns `col` may return: the element when both
// indices are points, else every int32 (a kernel cannot scan the array; out-of-range reads
// give 0, which every int32 includes).
FJ_HD Interval load_int(const ArrayParam& a, Interval row, Interval col) {
  if (row.is_point() && col.is_point()) {
    return Interval::point(fj::load_int(a, (i32)row.lo, (i32)col.lo));
  }
  return Interval::everything();
}
}  // namespace ival

// ---------------------------------------------------------------------------------------------
// Float interval arithmetic: sound like the int version. Signed zeros count as one value (no
// operation of the language tells them apart except by producing another zero: division by
// either zero yields 0), and an operation that can only produce NaN gives everything() (a
// FloatInterval always holds a number). Arithmetic ends are computed with the scalar
// operation itself: rounding to nearest is monotonic, so the rounded value at an end is the
// extreme of the rounded values inside.

namespace detail {
FJ_HD float infinity() {
  return bits_to_float(0x7f800000);
}
FJ_HD bool has_infinity(FloatInterval a) {
  return a.lo == -infinity() || a.hi == infinity();
}
FJ_HD bool has_zero(FloatInterval a) {
  return a.lo <= 0.0f && a.hi >= 0.0f;
}
// The next float above x (not NaN); +inf stays.
FJ_HD float next_up(float x) {
  if (x == infinity()) return x;
  if (x == 0.0f) return bits_to_float(1);  // the smallest subnormal
  const i32 bits = float_to_bits(x);
  return bits_to_float(x > 0.0f ? bits + 1 : bits - 1);
}
FJ_HD float next_down(float x) {
  return -next_up(-x);
}
// Library functions (tanh, exp, ...) are within a few ulp of the exact value on the host and on
// the device; an interval computed from the host's values at the ends is widened by this many
// floats on each side, which covers both libraries' errors (and any non-monotonicity they
// have, since the exact functions are monotonic).
constexpr int kLibraryUlps = 8;
FJ_HD float widen_down(float x, int steps) {
  for (int i = 0; i < steps; ++i)
    x = next_down(x);
  return x;
}
FJ_HD float widen_up(float x, int steps) {
  for (int i = 0; i < steps; ++i)
    x = next_up(x);
  return x;
}

// Hull of candidate values, NaN candidates skipped.
struct FloatHull {
  float lo, hi;
  bool any;

  FJ_HD void add(float x) {
    if (x != x) return;
    if (!any) {
      lo = hi = x;
      any = true;
    } else {
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
  }
  // The hull (with NaN when `nan`); no number at all leaves only NaN: everything().
  FJ_HD FloatInterval result(bool nan) const {
    return any ? FloatInterval{lo, hi, nan} : FloatInterval::everything();
  }
};

// a / [d_lo, d_hi], a divisor range of one sign without zero. The exact quotient is monotonic
// in each argument there, so its extremes lie at the corners; a NaN corner (inf / inf) is
// skipped: next to it lie only quotients that another corner bounds (an infinite one, or 0 when
// a has a finite end), and when every corner is NaN the caller's hull is empty (everything).
FJ_HD void div_corners(FloatHull& hull, FloatInterval a, float d_lo, float d_hi) {
  hull.add(fdiv(a.lo, d_lo));
  hull.add(fdiv(a.lo, d_hi));
  hull.add(fdiv(a.hi, d_lo));
  hull.add(fdiv(a.hi, d_hi));
}

// A product at a corner, with 0 * inf read as 0: the rest of that edge (0 times finite
// values) gives 0, and the NaN itself is accounted for by the caller.
FJ_HD float mul_corner(float x, float y) {
  const float product = fmul(x, y);
  return product != product ? 0.0f : product;
}

// f applied to an interval, f non-decreasing and exact (correctly rounded).
template <class F>
FJ_HD FloatInterval increasing_exact(FloatInterval a, F f) {
  return {f(a.lo), f(a.hi), a.nan};
}
// f non-decreasing but computed by a library within a few ulp: widened.
template <class F>
FJ_HD FloatInterval increasing_library(FloatInterval a, F f, int steps) {
  return {widen_down(f(a.lo), steps), widen_up(f(a.hi), steps), a.nan};
}
}  // namespace detail

namespace fival {

FJ_HD FloatInterval hull(FloatInterval a, FloatInterval b) {
  return {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, a.nan || b.nan};
}

FJ_HD FloatInterval neg(FloatInterval a) {
  return {-a.hi, -a.lo, a.nan};
}

FJ_HD FloatInterval abs(FloatInterval a) {
  if (a.lo >= 0.0f) return a;
  if (a.hi <= 0.0f) return {-a.hi, -a.lo, a.nan};
  return {0.0f, -a.lo > a.hi ? -a.lo : a.hi, a.nan};
}

// NaN from a NaN operand or inf + (-inf). A NaN end sum needs an infinite end on either side,
// and then the other end's sum bounds every non-NaN result.
FJ_HD FloatInterval add(FloatInterval a, FloatInterval b) {
  const float inf = detail::infinity();
  detail::FloatHull hull{0.0f, 0.0f, false};
  hull.add(fadd(a.lo, b.lo));
  hull.add(fadd(a.hi, b.hi));
  const bool nan = a.nan || b.nan || (a.lo == -inf && b.hi == inf) || (a.hi == inf && b.lo == -inf);
  return hull.result(nan);
}

// a - b == a + (-b) bit for bit.
FJ_HD FloatInterval sub(FloatInterval a, FloatInterval b) {
  return add(a, neg(b));
}

// The product is bilinear, so its extremes lie at the corners; NaN from 0 * inf.
FJ_HD FloatInterval mul(FloatInterval a, FloatInterval b) {
  detail::FloatHull hull{0.0f, 0.0f, false};
  hull.add(detail::mul_corner(a.lo, b.lo));
  hull.add(detail::mul_corner(a.lo, b.hi));
  hull.add(detail::mul_corner(a.hi, b.lo));
  hull.add(detail::mul_corner(a.hi, b.hi));
  const bool nan = a.nan || b.nan || (detail::has_zero(a) && detail::has_infinity(b)) ||
                   (detail::has_zero(b) && detail::has_infinity(a));
  return hull.result(nan);
}

// fdiv: the divisor range split by sign (the smallest subnormal being the divisor nearest
// zero), plus 0 when it holds zero. NaN from a NaN divisor, a NaN dividend over a nonzero
// divisor, or inf / inf.
FJ_HD FloatInterval div(FloatInterval a, FloatInterval b) {
  const float tiny = bits_to_float(1);
  detail::FloatHull hull{0.0f, 0.0f, false};
  if (detail::has_zero(b)) hull.add(0.0f);
  if (b.hi > 0.0f) detail::div_corners(hull, a, b.lo > tiny ? b.lo : tiny, b.hi);
  if (b.lo < 0.0f) detail::div_corners(hull, a, b.lo, b.hi < -tiny ? b.hi : -tiny);
  const bool nonzero_divisor = b.lo < 0.0f || b.hi > 0.0f;
  const bool nan =
      b.nan || (nonzero_divisor && (a.nan || (detail::has_infinity(a) && detail::has_infinity(b))));
  return hull.result(nan);
}

// fmod_floor: with a divisor d > 0 the result lies in [0, d] (the addition of d can round up
// to d itself), and is a itself when 0 <= a < d; at most a when a >= 0. Mirrored for d < 0,
// and 0 for a zero divisor. NaN from NaN operands (over a nonzero divisor) or an infinite a.
FJ_HD FloatInterval mod(FloatInterval a, FloatInterval b) {
  const float tiny = bits_to_float(1);
  detail::FloatHull hull{0.0f, 0.0f, false};
  if (detail::has_zero(b)) hull.add(0.0f);
  if (b.hi > 0.0f) {
    const float d_lo = b.lo > tiny ? b.lo : tiny;
    if (a.lo >= 0.0f && a.hi < d_lo) {
      hull.add(a.lo);
      hull.add(a.hi);
    } else {
      hull.add(0.0f);
      hull.add(a.lo >= 0.0f && a.hi < b.hi ? a.hi : b.hi);
    }
  }
  if (b.lo < 0.0f) {
    const float d_hi = b.hi < -tiny ? b.hi : -tiny;
    if (a.hi <= 0.0f && a.lo > d_hi) {
      hull.add(a.lo);
      hull.add(a.hi);
    } else {
      hull.add(0.0f);
      hull.add(a.hi <= 0.0f && a.lo > b.lo ? a.lo : b.lo);
    }
  }
  const bool nonzero_divisor = b.lo < 0.0f || b.hi > 0.0f;
  const bool nan = b.nan || (nonzero_divisor && (a.nan || detail::has_infinity(a)));
  return hull.result(nan);
}

// fmin / fmax: a NaN operand yields the other operand, so a possible NaN on one side adds the
// other side's values; NaN only when both may be NaN.
FJ_HD FloatInterval min(FloatInterval a, FloatInterval b) {
  FloatInterval result = {a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi, a.nan && b.nan};
  if (a.nan) result = hull(result, {b.lo, b.hi, result.nan});
  if (b.nan) result = hull(result, {a.lo, a.hi, result.nan});
  return result;
}
FJ_HD FloatInterval max(FloatInterval a, FloatInterval b) {
  FloatInterval result = {a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, a.nan && b.nan};
  if (a.nan) result = hull(result, {b.lo, b.hi, result.nan});
  if (b.nan) result = hull(result, {a.lo, a.hi, result.nan});
  return result;
}

// Comparisons give a boolean fj::Interval. True is possible when some pair of numbers
// satisfies the comparison; false when some pair does not, or a NaN may take part (every
// comparison with NaN is false except !=).
FJ_HD Interval from_possible(bool can_be_false, bool can_be_true) {
  return {can_be_false ? 0 : 1, can_be_true ? 1 : 0};
}
FJ_HD Interval lt(FloatInterval a, FloatInterval b) {
  return from_possible(a.hi >= b.lo || a.nan || b.nan, a.lo < b.hi);
}
FJ_HD Interval le(FloatInterval a, FloatInterval b) {
  return from_possible(a.hi > b.lo || a.nan || b.nan, a.lo <= b.hi);
}
FJ_HD Interval gt(FloatInterval a, FloatInterval b) {
  return lt(b, a);
}
FJ_HD Interval ge(FloatInterval a, FloatInterval b) {
  return le(b, a);
}
FJ_HD Interval eq(FloatInterval a, FloatInterval b) {
  const bool one_value = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
  return from_possible(!one_value || a.nan || b.nan, a.lo <= b.hi && b.lo <= a.hi);
}
FJ_HD Interval ne(FloatInterval a, FloatInterval b) {
  return ival::logical_not(eq(a, b));
}

// cond ? a : b
FJ_HD FloatInterval select(Interval cond, FloatInterval a, FloatInterval b) {
  if (cond.lo == 1) return a;
  if (cond.hi == 0) return b;
  return hull(a, b);
}

// Conversions. int_to_float and float_to_int are non-decreasing, so their values at the ends bound
// the rest; float_to_int maps NaN to 0.
FJ_HD FloatInterval from_int(Interval a) {
  return {int_to_float((i32)a.lo), int_to_float((i32)a.hi), false};
}
FJ_HD Interval to_int(FloatInterval a) {
  Interval result = {float_to_int(a.lo), float_to_int(a.hi)};
  if (a.nan) result = ival::hull(result, Interval::point(0));
  return result;
}

// Functions of one float. Every one is non-decreasing (sigmoid too: e^-a falls as a rises).
FJ_HD FloatInterval floor(FloatInterval a) {
  return detail::increasing_exact(a, [](float x) { return ffloor(x); });
}
FJ_HD FloatInterval ceil(FloatInterval a) {
  return detail::increasing_exact(a, [](float x) { return fceil(x); });
}
FJ_HD FloatInterval tanh(FloatInterval a) {
  return detail::increasing_library(
      a, [](float x) { return ftanh(x); }, detail::kLibraryUlps);
}
// e^a and 2^a are never negative, on any library.
FJ_HD FloatInterval exp(FloatInterval a) {
  FloatInterval r = detail::increasing_library(
      a, [](float x) { return fexp(x); }, detail::kLibraryUlps);
  r.lo = r.lo < 0.0f ? 0.0f : r.lo;
  return r;
}
FJ_HD FloatInterval exp2(FloatInterval a) {
  FloatInterval r = detail::increasing_library(
      a, [](float x) { return fexp2(x); }, detail::kLibraryUlps);
  r.lo = r.lo < 0.0f ? 0.0f : r.lo;
  return r;
}
// Two library calls and two roundings: twice the margin. Always within [0, 1].
FJ_HD FloatInterval sigmoid(FloatInterval a) {
  FloatInterval r = detail::increasing_library(
      a, [](float x) { return fsigmoid(x); }, 2 * detail::kLibraryUlps);
  r.lo = r.lo < 0.0f ? 0.0f : r.lo;
  r.hi = r.hi > 1.0f ? 1.0f : r.hi;
  return r;
}
// Functions defined from zero up: a negative operand gives NaN (and only NaN when the whole
// number range is negative), -0.0 counts as zero (log(-0.0) == -inf, sqrt(-0.0) == -0.0).
FJ_HD FloatInterval sqrt(FloatInterval a) {
  if (a.hi < 0.0f) return FloatInterval::everything();
  const FloatInterval domain = {a.lo < 0.0f ? 0.0f : a.lo, a.hi, a.nan || a.lo < 0.0f};
  return detail::increasing_exact(domain, [](float x) { return fsqrt(x); });
}
FJ_HD FloatInterval log(FloatInterval a) {
  if (a.hi < 0.0f) return FloatInterval::everything();
  const FloatInterval domain = {a.lo < 0.0f ? 0.0f : a.lo, a.hi, a.nan || a.lo < 0.0f};
  return detail::increasing_library(
      domain, [](float x) { return flog(x); }, detail::kLibraryUlps);
}
FJ_HD FloatInterval log2(FloatInterval a) {
  if (a.hi < 0.0f) return FloatInterval::everything();
  const FloatInterval domain = {a.lo < 0.0f ? 0.0f : a.lo, a.hi, a.nan || a.lo < 0.0f};
  return detail::increasing_library(
      domain, [](float x) { return flog2(x); }, detail::kLibraryUlps);
}

// Every value a read of float array `a` may return, as ival::load_int.
FJ_HD FloatInterval load_float(const ArrayParam& a, Interval row, Interval col) {
  if (row.is_point() && col.is_point()) {
    return FloatInterval::point(fj::load_float(a, (i32)row.lo, (i32)col.lo));
  }
  return FloatInterval::everything();
}

}  // namespace fival

}  // namespace fj
