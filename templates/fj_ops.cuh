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
  const void* data = nullptr;  // null only when rows * cols == 0
  i32 rows = 0;
  i32 cols = 0;
  i32 row_stride = 0;  // elements from one row to the next, >= cols
  i32 slot = 0;        // this array's slot, for bad_index reports
  // Debug (null normally): four int32 {code, ...}, zeroed by the caller, shared by the launch's
  // every slot and its other reports (DebugReport). The first read outside the array sets code
  // to DebugReport::ArrayIndex and records the slot, row and column.
  i32* bad_index = nullptr;
  // Min/max summary along the array's position axis (see "Summaries" below), or null. Lets
  // the interval analysis bound a read over a range of positions (`doc[b, kv]` over a tile)
  // without reading every element.
  const i32* summary = nullptr;
  i32 summary_axis = 0;  // SummaryAxis
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
FJ_HD float negative_infinity() {
  return bits_to_float(static_cast<i32>(0xff800000u));
}
constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x * kLog2e)
FJ_HD i32 float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(value);
#else
  i32 bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

// OCP fp8 e4m3 ("fn": bias 7, no infinities, S.1111.111 is NaN, largest finite 448), the
// element of an fp8 K/V cache (FJ_DTYPE_FP8_E4M3). One definition for the cache-write kernel,
// the CPU backend and the check harness, so that all three round alike.
constexpr float kE4m3Max = 448.0f;
// The value of e4m3 bits `byte` (low 8 bits).
FJ_HD float e4m3_to_float(u32 byte) {
  const u32 sign = (byte & 0x80u) << 24;
  const u32 exponent = (byte >> 3) & 0xfu;
  const u32 mantissa = byte & 7u;
  if (exponent == 15u && mantissa == 7u) return bits_to_float(static_cast<i32>(sign | 0x7fc00000u));
  if (exponent == 0u) {  // subnormal: mantissa * 2^-9, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return sign != 0u ? -magnitude : magnitude;
  }
  return bits_to_float(static_cast<i32>(sign | ((exponent + 120u) << 23) | (mantissa << 20)));
}
// `value` rounded to the nearest e4m3 (ties to even), saturated to +-448 (what cvt.rn.satfinite
// and vLLM's scaled_fp8_conversion do); NaN gives NaN (0x7f with the sign).
FJ_HD u32 e4m3_from_float(float value) {
  const u32 bits = static_cast<u32>(float_to_bits(value));
  const u32 sign = (bits >> 24) & 0x80u;
  const u32 magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7fu;   // NaN
  if (magnitude >= 0x43e00000u) return sign | 0x7eu;  // >= 448 (and infinities): saturate
  if (magnitude < 0x3c800000u) {                      // below 2^-6: subnormal steps of 2^-9
    // magnitude * 2^9 < 8 is exact in float; the float-to-int conversion rounds ties to even.
    const float steps = bits_to_float(static_cast<i32>(magnitude)) * 512.0f;
#if defined(__CUDA_ARCH__)
    return sign | static_cast<u32>(__float2int_rn(steps));  // 8 is 2^-6: the normal 0x08
#else
    return sign | static_cast<u32>(std::nearbyint(steps));
#endif
  }
  // Normal: keep 3 of the 23 mantissa bits, ties to even; a carry moves into the exponent.
  const u32 rounded = (magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) & ~0xfffffu;
  return sign | ((((rounded >> 23) - 120u) << 3) | ((rounded >> 20) & 7u));
}

// What the debug word (ArrayParam::bad_index, flexjit.h) holds in [0] once something was
// reported; [1..3] as listed. The first report of any kind wins: [0] goes from 0 to its code
// once, and [1..3] belong to that report.
enum class DebugReport : i32 {
  ArrayIndex = 1,   // an array read outside the array: slot, row, column
  BlockId = 2,      // a block-table entry outside [0, num_blocks): request, logical block, id
  QueryLength = 3,  // a request longer than max_query_len: request, query rows, max_query_len
};

// Records a report in `word` (null: the launch did not ask) unless one is there already.
// Off the fast path: only what is already wrong comes here.
FJ_HD void report_debug(i32* word, DebugReport code, i32 a, i32 b, i32 c) {
  if (word == nullptr) return;
#if defined(__CUDA_ARCH__)
  if (atomicCAS(word, 0, static_cast<i32>(code)) != 0) return;
#else
  if (word[0] != 0) return;
  word[0] = static_cast<i32>(code);
#endif
  word[1] = a;
  word[2] = b;
  word[3] = c;
}

// Records the first out-of-range read when the launch asked for it (ArrayParam::bad_index).
FJ_HD void report_bad_index(const ArrayParam& a, i32 row, i32 col) {
  report_debug(a.bad_index, DebugReport::ArrayIndex, a.slot, row, col);
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
// Summaries of position-indexed arrays (docs/architecture.md#tile-analysis). An array with a
// dimension named `q` or `kv` is summarised along it: each line (the elements that share the other
// index) gets a 16-ary tree of (min, max) pairs. Level 1 holds one pair per 16 elements,
// level l + 1 one per 16 pairs of level l, up to a level of one pair. A range query then reads at
// most 15 entries at each end of each level, so bounding `doc[b, kv]` over a 64-key tile reads 4
// pairs.
//
// Layout: line after line, each `summary_line_pairs(length)` pairs of two int32 {min, max},
// levels 1, 2, ... in order. Values are ordering keys: an int element is its own key, a float
// element's bits map to an int whose order is the float order (see float_key), so one
// min/max serves both and a NaN lands beyond the infinities.
enum SummaryAxis : i32 {
  kSummaryNone = 0,
  kSummaryRows = 1,  // the position is the row index (a 1-D array, or `[kv, x]`)
  kSummaryCols = 2,  // the position is the column index (`[b, kv]`)
};
constexpr i32 kSummaryFanoutBits = 4;
constexpr i32 kSummaryFanout = 1 << kSummaryFanoutBits;

// Positions along the summarised axis, and lines across it.
FJ_HD i32 summary_length(const ArrayParam& a) {
  return a.summary_axis == kSummaryRows ? a.rows : a.cols;
}
FJ_HD i32 summary_lines(const ArrayParam& a) {
  return a.summary_axis == kSummaryRows ? a.cols : a.rows;
}
// Pairs at level `level` (>= 1) of a line of `length` elements (0 <= length < 2^62): a pair
// summarises kSummaryFanout^level elements, so it is length / kSummaryFanout^level rounded up
// (rounding up at each level gives the same).
FJ_HD i64 summary_level_pairs(i64 length, int level) {
  const int shift = kSummaryFanoutBits * level;
  if (shift >= 62) return length > 0 ? 1 : 0;
  return (length + ((i64)1 << shift) - 1) >> shift;
}
// Levels of a line: up to the first with a single pair (none for an empty line), i.e. the
// base-kSummaryFanout digits of length - 1, at least one.
FJ_HD int summary_levels(i64 length) {
  if (length <= 0) return 0;
  int bits = 0;  // bit width of length - 1
#if defined(__CUDA_ARCH__)
  bits = 64 - __clzll(length - 1);
#else
  for (i64 rest = length - 1; rest != 0; rest >>= 1)
    ++bits;
#endif
  const int levels = (bits + kSummaryFanoutBits - 1) / kSummaryFanoutBits;
  return levels > 0 ? levels : 1;
}
// Pairs before level `level` within a line; summary_level_offset(length, levels + 1) is the
// pairs of the whole line.
FJ_HD i64 summary_level_offset(i64 length, int level) {
  i64 offset = 0;
  for (int l = 1; l < level; ++l)
    offset += summary_level_pairs(length, l);
  return offset;
}
FJ_HD i64 summary_line_pairs(i64 length) {
  return summary_level_offset(length, summary_levels(length) + 1);
}
// int32 words of a whole summary (two per pair).
FJ_HD i64 summary_words(i32 rows, i32 cols, i32 axis) {
  const i64 length = axis == kSummaryRows ? rows : cols;
  const i64 lines = axis == kSummaryRows ? cols : rows;
  return axis == kSummaryNone ? 0 : 2 * lines * summary_line_pairs(length);
}

// Ordering key of a float's bits: negative floats have their magnitude bits flipped, so that
// key order is float order (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN).
FJ_HD i32 float_key(i32 bits) {
  return bits >= 0 ? bits : bits ^ 0x7fffffff;
}
FJ_HD i32 float_key_bits(i32 key) {
  return key >= 0 ? key : key ^ 0x7fffffff;
}

// Element `position` of line `line`, as a key (the array must hold it).
FJ_HD i32 summary_element_key(const ArrayParam& a, bool is_float, i32 line, i64 position) {
  const i64 offset = a.summary_axis == kSummaryRows ? position * a.row_stride + line
                                                    : (i64)line * a.row_stride + position;
#if defined(__CUDA_ARCH__)
  const i32 bits = __ldg(static_cast<const i32*>(a.data) + offset);
#else
  const i32 bits = static_cast<const i32*>(a.data)[offset];
#endif
  return is_float ? float_key(bits) : bits;
}

// The keys of every value that reads at positions [lo, hi] of line `line` return, as
// {min, max}: out-of-range positions (and lines) read 0, whose key is 0 for both types.
// Requires a.summary.
struct KeyRange {
  i32 lo;
  i32 hi;
};
FJ_HD KeyRange summary_range(const ArrayParam& a, bool is_float, i64 line, i64 lo, i64 hi) {
  const i64 length = summary_length(a);
  KeyRange keys = {kInt32Max, kInt32Min};
  const auto take = [&keys](i32 min_key, i32 max_key) {
    keys.lo = min_key < keys.lo ? min_key : keys.lo;
    keys.hi = max_key > keys.hi ? max_key : keys.hi;
  };
  if (line < 0 || line >= summary_lines(a) || lo < 0 || hi >= length) take(0, 0);
  lo = lo < 0 ? 0 : lo;
  hi = hi >= length ? length - 1 : hi;
  if (line < 0 || line >= summary_lines(a) || lo > hi) return keys;

  // From here 0 <= first <= last < length <= INT32_MAX: 32-bit positions, and divisions by the
  // fanout are shifts (this runs once per tile in the kernels' listing, on its critical path).
  constexpr i32 kMask = kSummaryFanout - 1;
  i32 first = static_cast<i32>(lo);
  i32 last = static_cast<i32>(hi);
  // Each step below takes a counted run of positions or entries, so that a GPU thread's loads
  // of a run are in flight together (a loop whose exit depends on the position's remainder
  // issues one load at a time).
  // The head of [first, last] up to the first block boundary, and the tail back to the last
  // one (unless the tail is the line's short last block, which level 1 summarises).
  if ((first & kMask) != 0) {
    const i32 boundary = first | kMask;
    const i32 end = last < boundary ? last : boundary;
#pragma unroll 2
    for (i32 position = first; position <= end; ++position) {
      const i32 key = summary_element_key(a, is_float, (i32)line, position);
      take(key, key);
    }
    first = end + 1;
  }
  if (last >= first && (last & kMask) != kMask && last != length - 1) {
    const i32 boundary = last & ~kMask;
    const i32 begin = first > boundary ? first : boundary;
#pragma unroll 2
    for (i32 position = begin; position <= last; ++position) {
      const i32 key = summary_element_key(a, is_float, (i32)line, position);
      take(key, key);
    }
    last = begin - 1;
  }
  if (first > last) return keys;
  // [first, last] is now whole blocks of level 1 (the last may be the line's short tail).
  // Levels follow each other in the line: level l + 1 starts where level l's `count` pairs end.
  const int levels = summary_levels(length);
  const i32* entries = a.summary + 2 * line * summary_line_pairs(length);
  i32 count = static_cast<i32>(summary_level_pairs(length, 1));
  first >>= kSummaryFanoutBits;
  last >>= kSummaryFanoutBits;
  for (int level = 1; level <= levels && first <= last; ++level) {
    const auto take_entries = [&](i32 from, i32 to) {
#pragma unroll 2
      for (i32 i = from; i <= to; ++i) {
#if defined(__CUDA_ARCH__)
        take(__ldg(entries + 2 * i), __ldg(entries + 2 * i + 1));
#else
        take(entries[2 * i], entries[2 * i + 1]);
#endif
      }
    };
    // The top level takes what is left; below it, the entries up to the first boundary of the
    // level above and back from the last one (unless the last is the level's short tail).
    if (level == levels) {
      take_entries(first, last);
      break;
    }
    if ((first & kMask) != 0) {
      const i32 boundary = first | kMask;
      const i32 end = last < boundary ? last : boundary;
      take_entries(first, end);
      first = end + 1;
    }
    if (last >= first && (last & kMask) != kMask && last != count - 1) {
      const i32 boundary = last & ~kMask;
      const i32 begin = first > boundary ? first : boundary;
      take_entries(begin, last);
      last = begin - 1;
    }
    if (first > last) break;
    first >>= kSummaryFanoutBits;
    last >>= kSummaryFanoutBits;
    entries += 2 * count;
    count = (count + kMask) >> kSummaryFanoutBits;
  }
  return keys;
}

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

// floordiv and floormod by a positive divisor the generated code knows (a mask's `q / 128`,
// `(q - kv) % 2`): by a power of two an arithmetic shift and a mask, which are exactly floor
// division and modulo in two's complement; else the truncating operation the compiler turns
// into a multiply, corrected toward negative infinity. Same results as floordiv/floormod.
template <i32 kDivisor>
FJ_HD i32 floordiv_by(i32 a) {
  static_assert(kDivisor > 0, "a positive divisor");
  if constexpr ((kDivisor & (kDivisor - 1)) == 0) {
    int shift = 0;
    while ((1 << shift) != kDivisor)
      ++shift;  // folded: kDivisor is a constant
    return a >> shift;
  } else {
    const i32 quotient = a / kDivisor;
    return a - quotient * kDivisor < 0 ? quotient - 1 : quotient;
  }
}
template <i32 kDivisor>
FJ_HD i32 floormod_by(i32 a) {
  static_assert(kDivisor > 0, "a positive divisor");
  if constexpr ((kDivisor & (kDivisor - 1)) == 0) {
    return a & (kDivisor - 1);
  } else {
    const i32 remainder = a % kDivisor;
    return remainder < 0 ? remainder + kDivisor : remainder;
  }
}

FJ_HD i32 min(i32 a, i32 b) {
  return a < b ? a : b;
}
FJ_HD i32 max(i32 a, i32 b) {
  return a < b ? b : a;
}

// Shifts of int32 (two's complement). A count in [0, 31] shifts by that many bits: `<<` keeps
// the low 32 bits (wrap-around, never signed overflow), `>>` is arithmetic (floor(a / 2^n), like
// Python's and C++20's). Any other count, negative ones included, shifts every bit out: `<<`
// gives 0 and `>>` the sign (0 or -1), as torch.bitwise_left_shift / right_shift do on int32
// and as Python does for counts of 32 and more. Never undefined in C++, CUDA or LLVM.
FJ_HD i32 shl(i32 a, i32 n) {
  return (u32)n < 32u ? wrap_to_i32((i64)((u32)a << (u32)n)) : 0;
}
FJ_HD i32 shr(i32 a, i32 n) {
  return a >> ((u32)n < 32u ? (u32)n : 31u);
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
// tanh for score_mod (emit_cuda writes it into score hooks only): on the device the special
// function unit's tanh.approx.f32, relative error about 2^-11, one instruction instead of the
// library's dozens; on the host the library tanh. A softcapped score is off by at most about
// |score| * 2^-11, far inside a 16-bit output's rounding once it goes through the softmax.
FJ_HD float ftanh_approx(float a) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(a));
  return y;
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
// intervals. Used to classify tiles (docs/architecture.md#tile-analysis), so every operation must
// be SOUND: the result contains every value the scalar operation can produce from operands in the
// inputs. Integers are int32 and booleans are 0 (false) and 1 (true); bounds are int64 so that the
// exact result of an operation on int32 bounds can be formed before it is wrapped.

namespace detail {
FJ_HD i64 min64(i64 a, i64 b) {
  return a < b ? a : b;
}
FJ_HD i64 max64(i64 a, i64 b) {
  return a < b ? b : a;
}
// Exact floor division of values in int32 range (no wrap: INT_MIN / -1 == 2^31); b != 0.
// In 32-bit arithmetic: a 64-bit division is a call on the GPU, and ptxas serializes every
// wgmma of a kernel that makes a call beside live accumulators (C7520, docs/hopper.md).
FJ_HD i64 floordiv64(i64 a, i64 b) {
  if (b == -1) return -a;
  const i32 a32 = static_cast<i32>(a), b32 = static_cast<i32>(b);
  const i32 quotient = a32 / b32;
  const i32 remainder = a32 - quotient * b32;
  return (remainder != 0 && ((remainder < 0) != (b32 < 0))) ? quotient - 1 : quotient;
}

// floor(x / c) for |x| < 2^63 and 1 <= c <= 2^31, exact, without a 64-bit division (a call on
// the GPU, above): 32-bit where x fits, else one quotient bit per step (the remainder stays
// below c), which only bounds far outside int32 take.
FJ_HD i64 floordiv_wide(i64 x, i64 c) {
  if (x >= kInt32Min && x <= kInt32Max && c <= kInt32Max) return floordiv64(x, c);
  const unsigned long long n =
      x < 0 ? 0ull - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
  const unsigned long long d = static_cast<unsigned long long>(c);
  unsigned long long quotient = 0, remainder = 0;
#pragma unroll 1
  for (int bit = 62; bit >= 0; --bit) {
    remainder = (remainder << 1) | ((n >> bit) & 1ull);
    if (remainder >= d) {
      remainder -= d;
      quotient |= 1ull << bit;
    }
  }
  const i64 magnitude = static_cast<i64>(quotient);
  return x >= 0 ? magnitude : -magnitude - (remainder != 0 ? 1 : 0);
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

// The least k in [0, 31] with a and b in [-2^k, 2^k - 1] (the bitwise operations' bound).
FJ_HD int sign_width(Interval a, Interval b) {
  const i64 lo = min64(a.lo, b.lo), hi = max64(a.hi, b.hi);
  int k = 0;
  while (k < 31 && (lo < -(1ll << k) || hi > (1ll << k) - 1))
    ++k;
  return k;
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

// Bitwise operations. An int32 in [-2^k, 2^k - 1] has every bit from k up equal to its sign
// bit; &, | and ^ keep such bits equal, so their results stay in that range too, and their
// sign is that of (sign a) op (sign b). A non-negative operand m bounds `x & m` to [0, m].

// ~a == -a - 1: exact.
FJ_HD Interval bit_not(Interval a) {
  return {-a.hi - 1, -a.lo - 1};
}

FJ_HD Interval bit_and(Interval a, Interval b) {
  if (a.is_point() && b.is_point()) return Interval::point(a.lo & b.lo);
  if (a.lo >= 0 || b.lo >= 0) {
    // x & m lies in [0, m] for every m >= 0.
    const i64 hi = a.lo >= 0 && b.lo >= 0 ? detail::min64(a.hi, b.hi) : a.lo >= 0 ? a.hi : b.hi;
    return {0, hi};
  }
  // Both may be negative. Two negatives: x & y <= min(x, y). A non-negative x: x & y <= x.
  const i64 lo = -(1ll << detail::sign_width(a, b));
  const i64 hi = a.hi < 0 && b.hi < 0 ? detail::min64(a.hi, b.hi) : detail::max64(a.hi, b.hi);
  return {lo, hi};
}

// a | b == ~(~a & ~b), and ~ is exact on intervals.
FJ_HD Interval bit_or(Interval a, Interval b) {
  return bit_not(bit_and(bit_not(a), bit_not(b)));
}

FJ_HD Interval bit_xor(Interval a, Interval b) {
  if (a.is_point() && b.is_point()) return Interval::point(a.lo ^ b.lo);
  const i64 top = 1ll << detail::sign_width(a, b);
  const bool a_sign_known = a.lo >= 0 || a.hi < 0, b_sign_known = b.lo >= 0 || b.hi < 0;
  if (!a_sign_known || !b_sign_known) return {-top, top - 1};
  if ((a.lo >= 0) == (b.lo >= 0)) return {0, top - 1};  // equal signs: non-negative
  return {-top, -1};
}

// a << n: before wrapping, a * 2^c for the counts c of n in [0, 31], which is monotone in a for
// each c and in c for each a, so its extremes lie at the corners; counts outside give 0.
FJ_HD Interval shl(Interval a, Interval n) {
  const bool outside = n.lo < 0 || n.hi > 31;
  const i64 c_lo = detail::max64(n.lo, 0), c_hi = detail::min64(n.hi, 31);
  if (c_lo > c_hi) return Interval::point(0);
  const i64 p0 = a.lo * (1ll << c_lo), p1 = a.lo * (1ll << c_hi);
  const i64 p2 = a.hi * (1ll << c_lo), p3 = a.hi * (1ll << c_hi);
  const Interval shifted =
      Interval::wrapped(detail::min64(detail::min64(p0, p1), detail::min64(p2, p3)),
                        detail::max64(detail::max64(p0, p1), detail::max64(p2, p3)));
  return outside ? hull(shifted, Interval::point(0)) : shifted;
}

// a >> n: floor(a / 2^c), where a count outside [0, 31] acts as 31. Monotone in a, and in c
// for each a (toward 0 or -1), so its extremes lie at the corners.
FJ_HD Interval shr(Interval a, Interval n) {
  const bool outside = n.lo < 0 || n.hi > 31;
  const i64 c_lo = n.hi < 0 ? 31 : detail::min64(detail::max64(n.lo, 0), 31);
  const i64 c_hi = outside ? 31 : n.hi;
  return {detail::min64(a.lo >> c_lo, a.lo >> c_hi), detail::max64(a.hi >> c_lo, a.hi >> c_hi)};
}

}  // namespace ival

namespace detail {
// A read over index ranges of at most this many elements is bounded by reading each of them
// (small_read): a tile's 128 keys over `kv / 64` (BigBird's block table at 128-key tiles), a few
// rows' blocks. Past it, only a summary bounds the read.
constexpr i64 kSmallReadElements = 8;

// The elements of `a` at rows `row`, columns `col` that lie in the array, clamped; `outside`
// when a part of the ranges lies past the array's bounds (whose reads give 0). False when the
// ranges hold more than kSmallReadElements elements.
struct SmallRead {
  i32 row_lo, row_hi, col_lo, col_hi;
  bool outside;
};
FJ_HD bool small_read(const ArrayParam& a, Interval row, Interval col, SmallRead& read) {
  const i64 rows = row.hi - row.lo + 1, cols = col.hi - col.lo + 1;
  if (rows > kSmallReadElements || cols > kSmallReadElements || rows * cols > kSmallReadElements) {
    return false;
  }
  const i64 row_lo = max64(row.lo, 0), row_hi = min64(row.hi, (i64)a.rows - 1);
  const i64 col_lo = max64(col.lo, 0), col_hi = min64(col.hi, (i64)a.cols - 1);
  read = {(i32)row_lo, (i32)row_hi, (i32)col_lo, (i32)col_hi,
          row_lo != row.lo || row_hi != row.hi || col_lo != col.lo || col_hi != col.hi};
  return true;
}
}  // namespace detail

namespace ival {
// Every value a read of `a` at rows `row`, columns `col` may return, for an array summarised
// along a position axis: the element when both indices are points; the summary's bound when the
// other index is a point and the range runs along the summarised axis; else every int32
// (out-of-range reads give 0, which every int32 includes).
FJ_HD Interval load_int_summarised(const ArrayParam& a, Interval row, Interval col) {
  if (row.is_point() && col.is_point()) {
    return Interval::point(fj::load_int(a, (i32)row.lo, (i32)col.lo));
  }
  if (a.summary != nullptr && a.summary_axis == kSummaryCols && row.is_point()) {
    const KeyRange keys = summary_range(a, false, row.lo, col.lo, col.hi);
    return {keys.lo, keys.hi};
  }
  if (a.summary != nullptr && a.summary_axis == kSummaryRows && col.is_point()) {
    const KeyRange keys = summary_range(a, false, col.lo, row.lo, row.hi);
    return {keys.lo, keys.hi};
  }
  return Interval::everything();
}
// The same for an array without a summary (no position axis: a block table [qb, kb], per-head
// windows): the hull of the elements when the ranges hold a few (detail::small_read), else
// every int32.
FJ_HD Interval load_int_elements(const ArrayParam& a, Interval row, Interval col) {
  if (row.is_point() && col.is_point()) {
    return Interval::point(fj::load_int(a, (i32)row.lo, (i32)col.lo));
  }
  detail::SmallRead read;
  if (!detail::small_read(a, row, col, read)) return Interval::everything();
  // Reads outside the array give 0; in-range indices never report a bad index.
  i64 lo = read.outside ? 0 : kInt32Max, hi = read.outside ? 0 : kInt32Min;
#pragma unroll 1
  for (i32 r = read.row_lo; r <= read.row_hi; ++r) {
#pragma unroll 1
    for (i32 c = read.col_lo; c <= read.col_hi; ++c) {
      const i64 value = fj::load_int(a, r, c);
      lo = detail::min64(lo, value);
      hi = detail::max64(hi, value);
    }
  }
  return {lo, hi};
}
// The host's analyses: by whether the array has a summary.
FJ_HD Interval load_int(const ArrayParam& a, Interval row, Interval col) {
  return a.summary != nullptr ? load_int_summarised(a, row, col) : load_int_elements(a, row, col);
}
// Generated hooks: by the array's summary axis (kArraySummaryAxes of the variant), known when
// the hook is written, so that a kernel holds the code of one kind only (both inlined into a
// longformer kernel's classify made ptxas spill 28 bytes at head dim 64).
template <int kSummaryAxis>
FJ_HD Interval load_int(const ArrayParam& a, Interval row, Interval col) {
  return kSummaryAxis == kSummaryNone ? load_int_elements(a, row, col)
                                      : load_int_summarised(a, row, col);
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

// Every value a read of float array `a` may return, as ival::load_int_summarised.
FJ_HD FloatInterval load_float_summarised(const ArrayParam& a, Interval row, Interval col) {
  if (row.is_point() && col.is_point()) {
    return FloatInterval::point(fj::load_float(a, (i32)row.lo, (i32)col.lo));
  }
  const bool along_cols = a.summary_axis == kSummaryCols && row.is_point();
  const bool along_rows = a.summary_axis == kSummaryRows && col.is_point();
  if (a.summary == nullptr || !(along_cols || along_rows)) return FloatInterval::everything();
  const KeyRange keys = along_cols ? summary_range(a, true, row.lo, col.lo, col.hi)
                                   : summary_range(a, true, col.lo, row.lo, row.hi);
  // A NaN's key lies beyond an infinity's: the range then holds NaN (and, NaNs of both signs
  // aside, possibly anything); keep it simple and sound.
  if (keys.lo < float_key((i32)0xff800000u) || keys.hi > 0x7f800000) {
    return FloatInterval::everything();
  }
  return FloatInterval::range(bits_to_float(float_key_bits(keys.lo)),
                              bits_to_float(float_key_bits(keys.hi)));
}
// As ival::load_int_elements: the hull of a few elements (NaN among them when one is NaN).
FJ_HD FloatInterval load_float_elements(const ArrayParam& a, Interval row, Interval col) {
  if (row.is_point() && col.is_point()) {
    return FloatInterval::point(fj::load_float(a, (i32)row.lo, (i32)col.lo));
  }
  detail::SmallRead read;
  if (!detail::small_read(a, row, col, read)) return FloatInterval::everything();
  detail::FloatHull hull{0.0f, 0.0f, false};
  if (read.outside) hull.add(0.0f);
  bool nan = false;
#pragma unroll 1
  for (i32 r = read.row_lo; r <= read.row_hi; ++r) {
#pragma unroll 1
    for (i32 c = read.col_lo; c <= read.col_hi; ++c) {
      const float value = fj::load_float(a, r, c);
      nan = nan || value != value;
      hull.add(value);
    }
  }
  return hull.result(nan);
}
FJ_HD FloatInterval load_float(const ArrayParam& a, Interval row, Interval col) {
  return a.summary != nullptr ? load_float_summarised(a, row, col)
                              : load_float_elements(a, row, col);
}
template <int kSummaryAxis>
FJ_HD FloatInterval load_float(const ArrayParam& a, Interval row, Interval col) {
  return kSummaryAxis == kSummaryNone ? load_float_elements(a, row, col)
                                      : load_float_summarised(a, row, col);
}

}  // namespace fival

}  // namespace fj

namespace fj {

// ---------------------------------------------------------------------------------------------
// KV ranges (docs/architecture.md#tile-analysis): the keys that may be visible to a range of
// queries, derived from the mask's comparisons on kv. The generated kv_range() hook and the host's
// kv_range() both solve each comparison `f(kv) op E` for kv with these functions, then check the
// answer with the interval analysis (kvr::verified), so a solution that 32-bit wrap-around or a gap
// in the solver would make wrong is replaced by "every key", never trusted.

// Keys [lo, hi); empty when lo >= hi.
struct KvRange {
  i32 lo;
  i32 hi;
};

namespace kvr {

// A set of integers [lo, hi] in exact (unwrapped) arithmetic, either end possibly unbounded
// (+-kUnbounded); empty when lo > hi.
constexpr i64 kUnbounded = (i64)1 << 62;
struct Bound {
  i64 lo;
  i64 hi;
};

FJ_HD Bound all() {
  return {-kUnbounded, kUnbounded};
}
FJ_HD Bound none() {
  return {1, 0};
}
FJ_HD bool is_empty(Bound s) {
  return s.lo > s.hi;
}
FJ_HD i64 saturate(i64 x) {
  return x < -kUnbounded ? -kUnbounded : (x > kUnbounded ? kUnbounded : x);
}
FJ_HD Bound make(i64 lo, i64 hi) {
  return {saturate(lo), saturate(hi)};
}

// Comparison operators of an atom `f op E`, with kv inside f.
enum CompareOp : int { kLess = 0, kLessEqual = 1, kGreater = 2, kGreaterEqual = 3, kEqual = 4 };

// The values of f for which `f op e` holds for some e in `e`.
FJ_HD Bound compared_with(int op, Interval e) {
  switch (op) {
    case kLess:
      return make(-kUnbounded, e.hi - 1);
    case kLessEqual:
      return make(-kUnbounded, e.hi);
    case kGreater:
      return make(e.lo + 1, kUnbounded);
    case kGreaterEqual:
      return make(e.lo, kUnbounded);
    default:
      return make(e.lo, e.hi);
  }
}

// Each inverse step: the values of the kv-side operand a for which the operation's result can
// lie in `s`, given the other operand's interval. Exact arithmetic: wrap-around is the
// verifier's business.
// a + b in s
FJ_HD Bound addend(Bound s, Interval b) {
  return is_empty(s) ? s : make(s.lo - b.hi, s.hi - b.lo);
}
// a - b in s
FJ_HD Bound minuend(Bound s, Interval b) {
  return is_empty(s) ? s : make(s.lo + b.lo, s.hi + b.hi);
}
// a' - a in s, with a' in `minuend_values`
FJ_HD Bound subtrahend(Bound s, Interval minuend_values) {
  return is_empty(s) ? s : make(minuend_values.lo - s.hi, minuend_values.hi - s.lo);
}
// -a in s
FJ_HD Bound negated(Bound s) {
  return is_empty(s) ? s : Bound{-s.hi, -s.lo};
}

namespace detail {
// x / c rounded down or up, c > 0, keeping unbounded ends unbounded.
FJ_HD i64 divide_end(i64 x, i64 c, bool round_up) {
  if (x <= -kUnbounded || x >= kUnbounded) return x;
  const i64 q = fj::detail::floordiv_wide(x, c);
  return round_up && q * c != x ? q + 1 : q;
}
// x * c + add, c > 0, saturating, keeping unbounded ends unbounded.
FJ_HD i64 multiply_end(i64 x, i64 c, i64 add) {
  if (x <= -kUnbounded || x >= kUnbounded) return x;
  // c < 2^31: |x * c| exceeds 2^62 once (|x| >> 31) * c exceeds 2^31, and is below 2^63
  // (exact) otherwise. No division: a 64-bit one is a call on the GPU (detail::floordiv64).
  const i64 magnitude = x < 0 ? -x : x;
  if ((magnitude >> 31) * c > (i64{1} << 31)) return x < 0 ? -kUnbounded : kUnbounded;
  const i64 product = x * c;
  if (product > kUnbounded) return kUnbounded;
  if (product < -kUnbounded) return -kUnbounded;
  return saturate(product + add);
}
}  // namespace detail

// a * c in s, for a constant c (any other multiplier: every a)
FJ_HD Bound factor(Bound s, Interval c) {
  if (is_empty(s)) return s;
  if (!c.is_point() || c.lo == 0) return all();
  const Bound t = c.lo > 0 ? s : negated(s);
  const i64 m = c.lo > 0 ? c.lo : -c.lo;
  return {detail::divide_end(t.lo, m, true), detail::divide_end(t.hi, m, false)};
}
// floor(a / c) in s, for a constant c > 0 (any other divisor: every a)
FJ_HD Bound dividend(Bound s, Interval c) {
  if (is_empty(s)) return s;
  if (!c.is_point() || c.lo <= 0) return all();
  return {detail::multiply_end(s.lo, c.lo, 0), detail::multiply_end(s.hi, c.lo, c.lo - 1)};
}
// |a| in s
FJ_HD Bound abs_argument(Bound s) {
  if (is_empty(s) || s.hi < 0) return none();
  return {-s.hi, s.hi};
}
// min(a, b) in s: both a and b are at least s.lo, and a is at most s.hi unless b can be.
FJ_HD Bound min_argument(Bound s, Interval b) {
  if (is_empty(s) || b.hi < s.lo) return none();
  return {s.lo, b.lo > s.hi ? s.hi : kUnbounded};
}
// max(a, b) in s: both a and b are at most s.hi, and a is at least s.lo unless b can be.
FJ_HD Bound max_argument(Bound s, Interval b) {
  if (is_empty(s) || b.lo > s.hi) return none();
  return {b.hi < s.lo ? s.lo : -kUnbounded, s.hi};
}

FJ_HD Bound intersect(Bound a, Bound b) {
  return {a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
}
FJ_HD Bound hull(Bound a, Bound b) {
  if (is_empty(a)) return b;
  if (is_empty(b)) return a;
  return {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}

// A condition that does not read kv, with the boolean interval `value`: no key when it is
// surely false (or, negated, surely true), every key otherwise.
FJ_HD Bound guard(Interval value, bool polarity) {
  return (polarity ? value.hi == 0 : value.lo == 1) ? none() : all();
}

// The candidate keys `s` (clipped to the keys [0, INT32_MAX]) if the interval analysis
// confirms that the atom is false for every other key, else every key. `atom(kv)` gives the
// comparison's boolean interval for a key interval; the atom holds where the comparison is
// true (polarity) or false (!polarity).
template <class Atom>
FJ_HD Bound verified(Bound s, Atom atom, bool polarity) {
  const Bound keys = {0, kInt32Max};
  const Bound candidate = intersect(s, keys);
  const auto surely_false = [&](i64 lo, i64 hi) {
    const Interval value = atom(Interval::range(lo, hi));
    return polarity ? value.hi == 0 : value.lo == 1;
  };
  // The key ranges outside the candidate (all keys when it is empty), checked through one call
  // site of the atom: inlined once, not three times (kv_range inlines a verified() per
  // comparison on kv, and each repeated atom was compile time).
  const bool empty = is_empty(candidate);
  for (int side = 0; side < 2; ++side) {
    const i64 lo = empty || side == 0 ? 0 : candidate.hi + 1;
    const i64 hi = empty ? kInt32Max : side == 0 ? candidate.lo - 1 : kInt32Max;
    if (lo > hi || (empty && side == 1)) continue;
    if (!surely_false(lo, hi)) return keys;
  }
  return empty ? none() : candidate;
}

// The half-open key range of a bound, within [0, INT32_MAX).
FJ_HD KvRange to_range(Bound s) {
  const Bound keys = intersect(s, Bound{0, kInt32Max - 1});
  if (is_empty(keys)) return {0, 0};
  return {(i32)keys.lo, (i32)(keys.hi + 1)};
}

}  // namespace kvr

namespace ival {
// `a || b` on a tile, with b evaluated only over the keys where a may fail: `where_not_a` is
// the kv bound of !a (its kv range for the tile's queries), `rest(kv)` evaluates b over a key
// interval. Sound because b's value where a holds cannot change the disjunction; more exact
// than logical_or when a cuts the tile (rswa's `kv < prefix || q - kv < window` across the
// prefix end). Kv bounds speak of keys (kv >= 0) only: a tile reaching below 0 is not narrowed.
template <class Rest>
FJ_HD Interval narrowed_or(Interval a, kvr::Bound where_not_a, Interval kv, Rest rest) {
  // One call of rest: it is the whole right operand, inlined where it is called.
  Interval over = kv;
  if (kv.lo >= 0) {
    const kvr::Bound keys = kvr::intersect(where_not_a, kvr::Bound{kv.lo, kv.hi});
    if (kvr::is_empty(keys)) return Interval::boolean(true);
    over = Interval::range(keys.lo, keys.hi);
  }
  return logical_or(a, rest(over));
}
}  // namespace ival
}  // namespace fj
