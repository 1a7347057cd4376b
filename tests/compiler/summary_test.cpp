// Summaries of position-indexed arrays (templates/fj_ops.cuh, "Summaries"; host_params.h): the
// bound that fj::ival::load_int and fj::fival::load_float give for a read over a range of
// positions equals the brute-force minimum and maximum of what the reads return, for every
// range of many line lengths (0 included), along columns (`doc: int[b, kv]`) and rows
// (`pos: int[kv]`, `marks: int[kv, x]`), partly or wholly outside the array (which adds the 0
// such reads yield), on lines outside it, for int and float elements (signed zeros,
// infinities, subnormals, NaN). Also the layout build_summary writes, and HostParams.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/host_params.h"

namespace flexjit {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();

int32_t bits_of(float value) {
  return fj::float_to_bits(value);
}

// A summarised array that owns its elements and summary. Elements are laid out with a row
// stride larger than the row (where it has more than one column) whose padding holds values
// a summary must never see.
class Summarised {
 public:
  // `element(line, position)` gives the bits of the element at that position of that line.
  template <class Element>
  Summarised(int32_t lines, int32_t length, fj::SummaryAxis axis, bool is_float, int32_t padding,
             Element element)
      : is_float_(is_float) {
    const bool along_rows = axis == fj::kSummaryRows;
    param_.rows = along_rows ? length : lines;
    param_.cols = along_rows ? lines : length;
    param_.row_stride = param_.cols + padding;
    param_.summary_axis = axis;
    const int32_t poison = is_float ? bits_of(std::numeric_limits<float>::quiet_NaN()) : kMin;
    data_.assign(static_cast<size_t>(param_.rows) * param_.row_stride, poison);
    for (int32_t line = 0; line < lines; ++line) {
      for (int32_t position = 0; position < length; ++position) {
        const int32_t row = along_rows ? position : line, col = along_rows ? line : position;
        data_[static_cast<size_t>(row) * param_.row_stride + col] = element(line, position);
      }
    }
    param_.data = data_.empty() ? nullptr : data_.data();
    // One word more than the summary needs, so that an empty line's (empty) summary still
    // has an address: a null summary means "none".
    summary_.assign(fj::summary_words(param_.rows, param_.cols, axis) + 1, 0);
    build_summary(param_, is_float_, summary_.data());
    param_.summary = summary_.data();
  }

  const fj::ArrayParam& param() const { return param_; }
  const std::vector<int32_t>& summary() const { return summary_; }
  bool is_float() const { return is_float_; }
  bool along_rows() const { return param_.summary_axis == fj::kSummaryRows; }
  int32_t length() const { return along_rows() ? param_.rows : param_.cols; }
  int32_t lines() const { return along_rows() ? param_.cols : param_.rows; }

  // The bits a read at `position` of `line` returns: the element, or 0 outside the array.
  int32_t read(int64_t line, int64_t position) const {
    if (line < 0 || line >= lines() || position < 0 || position >= length()) return 0;
    const int64_t row = along_rows() ? position : line, col = along_rows() ? line : position;
    return data_[static_cast<size_t>(row * param_.row_stride + col)];
  }

  // The read's row and column intervals for a range of positions on one line.
  fj::Interval row(int64_t line, int64_t lo, int64_t hi) const {
    return along_rows() ? fj::Interval::range(lo, hi) : fj::Interval::point(line);
  }
  fj::Interval col(int64_t line, int64_t lo, int64_t hi) const {
    return along_rows() ? fj::Interval::point(line) : fj::Interval::range(lo, hi);
  }

 private:
  bool is_float_;
  std::vector<int32_t> data_, summary_;
  fj::ArrayParam param_{};
};

// Float order with -0.0 below +0.0 (NaN excluded): the order the summary's bounds keep.
bool float_below(float a, float b) {
  if (a != b) return a < b;
  return std::signbit(a) && !std::signbit(b);
}

// The minimum and maximum of the values read at positions [lo, hi] of a line, built up one
// position at a time so that a sweep over hi costs O(1) per range.
struct Extremes {
  bool any = false, nan = false;
  int32_t lo = 0, hi = 0;  // ints, or float bits

  void add(int32_t bits, bool is_float) {
    if (is_float) {
      const float value = fj::bits_to_float(bits);
      if (std::isnan(value)) {
        nan = true;
        return;
      }
      if (!any || float_below(value, fj::bits_to_float(lo))) lo = bits;
      if (!any || float_below(fj::bits_to_float(hi), value)) hi = bits;
    } else {
      if (!any || bits < lo) lo = bits;
      if (!any || bits > hi) hi = bits;
    }
    any = true;
  }
};

std::string float_text(int32_t bits) {
  std::ostringstream out;
  out << fj::bits_to_float(bits) << " (0x" << std::hex << static_cast<uint32_t>(bits) << ")";
  return out.str();
}

// Checks the summarised bound of a read over [lo, hi] of `line` against `want`; counts it.
void check_range(const Summarised& array, int64_t line, int64_t lo, int64_t hi,
                 const Extremes& want, int64_t& checked) {
  ++checked;
  const fj::Interval row = array.row(line, lo, hi), col = array.col(line, lo, hi);
  if (!array.is_float()) {
    const fj::Interval got = fj::ival::load_int(array.param(), row, col);
    if (got.lo != want.lo || got.hi != want.hi) {
      FAIL("int array of " << array.lines() << " lines of " << array.length() << " ("
                           << (array.along_rows() ? "rows" : "columns") << "), line " << line
                           << " positions [" << lo << ", " << hi << "]: got [" << got.lo << ", "
                           << got.hi << "], want [" << want.lo << ", " << want.hi << "]");
    }
    return;
  }
  const fj::FloatInterval got = fj::fival::load_float(array.param(), row, col);
  const bool everything = got.nan && got.lo == -kInf && got.hi == kInf;
  const bool same =
      want.nan ? everything : !got.nan && bits_of(got.lo) == want.lo && bits_of(got.hi) == want.hi;
  if (!same) {
    FAIL("float array of " << array.lines() << " lines of " << array.length() << " ("
                           << (array.along_rows() ? "rows" : "columns") << "), line " << line
                           << " positions [" << lo << ", " << hi << "]: got ["
                           << float_text(bits_of(got.lo)) << ", " << float_text(bits_of(got.hi))
                           << "]" << (got.nan ? " + NaN" : "") << ", want "
                           << (want.nan
                                   ? std::string("everything")
                                   : "[" + float_text(want.lo) + ", " + float_text(want.hi) + "]"));
  }
}

// Every range [lo, hi] with lo in `starts` and hi from lo to a little past the line's end.
void sweep(const Summarised& array, int64_t line, const std::vector<int64_t>& starts,
           int64_t& checked) {
  const int64_t end = int64_t{array.length()} + 3;
  for (const int64_t lo : starts) {
    Extremes want;
    for (int64_t hi = lo; hi <= end; ++hi) {
      want.add(array.read(line, hi), array.is_float());
      check_range(array, line, lo, hi, want, checked);
    }
  }
}

// Ranges that reach far outside the line, down to INT32_MIN and up to INT32_MAX.
void check_far_ranges(const Summarised& array, int64_t line, int64_t& checked) {
  const int64_t length = array.length();
  const std::pair<int64_t, int64_t> ranges[] = {{kMin, kMax},       {kMin, 0},
                                                {kMin, length / 2}, {length / 3, kMax},
                                                {length, kMax},     {int64_t{kMax} - 5, kMax},
                                                {kMin, -1},         {-1, length}};
  for (const auto& [lo, hi] : ranges) {
    Extremes want;
    if (lo < 0 || hi >= length || line < 0 || line >= array.lines()) want.add(0, array.is_float());
    for (int64_t position = std::max<int64_t>(lo, 0); position <= std::min(hi, length - 1);
         ++position) {
      want.add(array.read(line, position), array.is_float());
    }
    check_range(array, line, lo, hi, want, checked);
  }
}

// Starting positions for a line of `length`: all of them up to a few hundred, else the block
// edges of every level and random ones.
std::vector<int64_t> starts_for(int32_t length, std::mt19937& rng) {
  std::vector<int64_t> starts;
  if (length <= 300) {
    for (int64_t lo = -3; lo <= length + 2; ++lo)
      starts.push_back(lo);
    return starts;
  }
  for (const int64_t edge : {-2, -1, 0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097}) {
    for (const int64_t at : {edge, int64_t{length} - edge}) {
      if (at >= -2 && at <= length + 2) starts.push_back(at);
    }
  }
  for (int i = 0; i < 24; ++i)
    starts.push_back(std::uniform_int_distribution<int64_t>(0, length - 1)(rng));
  return starts;
}

enum class Contents { Random, Documents, Negative, Constant };

// Int element bits for a pattern: random over all of int32 (ends included), monotone document
// ids, only negative values (so that the 0 of out-of-range reads shows), one value.
int32_t int_element(Contents contents, int32_t line, int32_t position, std::mt19937& rng) {
  switch (contents) {
    case Contents::Random: {
      const int pick = std::uniform_int_distribution<int>(0, 9)(rng);
      if (pick == 0) return kMin;
      if (pick == 1) return kMax;
      return static_cast<int32_t>(rng());
    }
    case Contents::Documents:
      return line * 1000 + position / 37;
    case Contents::Negative:
      return -1 - static_cast<int32_t>(rng() % 1000);
    case Contents::Constant:
      return 5;
  }
  return 0;
}

// Float element bits: ordinary values, signed zeros, infinities, subnormals, and (when
// `with_nan`, at a few positions only) NaNs of both signs.
int32_t float_element(bool with_nan, int32_t position, std::mt19937& rng) {
  static const float kSpecial[] = {0.0f,
                                   -0.0f,
                                   kInf,
                                   -kInf,
                                   1e-45f,
                                   -1e-45f,
                                   1e-40f,
                                   -3e-39f,
                                   std::numeric_limits<float>::max(),
                                   std::numeric_limits<float>::lowest()};
  if (with_nan && position % 97 == 13) {
    return position % 2 ? bits_of(std::numeric_limits<float>::quiet_NaN())
                        : bits_of(-std::numeric_limits<float>::quiet_NaN());
  }
  if (rng() % 4 == 0) return bits_of(kSpecial[rng() % 10]);
  return bits_of(std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng));
}

// Lengths along the summarised axis: the edges of the 16-ary levels and random ones.
std::vector<int32_t> lengths(std::mt19937& rng) {
  std::vector<int32_t> list = {0, 1, 2, 15, 16, 17, 31, 255, 256, 257, 4097};
  for (int i = 0; i < 3; ++i)
    list.push_back(std::uniform_int_distribution<int32_t>(2, 5000)(rng));
  return list;
}

// Checks every line (and lines outside the array) of `array`; returns the ranges checked.
int64_t check_array(const Summarised& array, std::mt19937& rng) {
  int64_t checked = 0;
  const std::vector<int64_t> starts = starts_for(array.length(), rng);
  for (int64_t line = 0; line < array.lines(); ++line) {
    sweep(array, line, starts, checked);
    check_far_ranges(array, line, checked);
  }
  for (const int64_t line : {int64_t{-1}, int64_t{array.lines()}, int64_t{kMin}, int64_t{kMax}}) {
    check_far_ranges(array, line, checked);
    Extremes zero;
    zero.add(0, array.is_float());
    check_range(array, line, 0, std::max(array.length() - 1, 0), zero, checked);
  }
  return checked;
}

TEST_CASE("summarised int reads are bounded by the exact min and max", "[summary]") {
  std::mt19937 rng(11);
  int64_t checked = 0;
  for (const int32_t length : lengths(rng)) {
    for (const Contents contents :
         {Contents::Random, Contents::Documents, Contents::Negative, Contents::Constant}) {
      INFO("length " << length << " contents " << static_cast<int>(contents));
      const auto element = [&](int32_t line, int32_t position) {
        return int_element(contents, line, position, rng);
      };
      // `doc: int[b, kv]`: three lines along columns, rows padded.
      checked += check_array(Summarised(3, length, fj::kSummaryCols, false, 3, element), rng);
      // `pos: int[kv]`: one line along rows.
      checked += check_array(Summarised(1, length, fj::kSummaryRows, false, 0, element), rng);
      // `marks: int[kv, x]`: two lines along rows, rows padded.
      checked += check_array(Summarised(2, length, fj::kSummaryRows, false, 2, element), rng);
    }
  }
  CHECK(checked > 1000000);
}

TEST_CASE("summarised float reads are bounded by the exact min and max", "[summary]") {
  std::mt19937 rng(12);
  int64_t checked = 0;
  for (const int32_t length : lengths(rng)) {
    for (const bool with_nan : {false, true}) {
      INFO("length " << length << (with_nan ? " with NaN" : ""));
      const auto element = [&](int32_t, int32_t position) {
        return float_element(with_nan, position, rng);
      };
      checked += check_array(Summarised(3, length, fj::kSummaryCols, true, 1, element), rng);
      checked += check_array(Summarised(1, length, fj::kSummaryRows, true, 0, element), rng);
    }
  }
  CHECK(checked > 500000);
}

TEST_CASE("a read over positions without a usable summary is unbounded", "[summary]") {
  const Summarised doc(2, 40, fj::kSummaryCols, false, 0,
                       [&](int32_t, int32_t position) { return position; });
  // Along rows of a column-summarised array: no summary for that direction.
  CHECK(fj::ival::load_int(doc.param(), fj::Interval::range(0, 1), fj::Interval::point(3)).lo ==
        kMin);
  // Both indices ranges.
  CHECK(fj::ival::load_int(doc.param(), fj::Interval::range(0, 1), fj::Interval::range(2, 3)).hi ==
        kMax);
  // No summary at all: a few elements are read (the form of arrays without a position axis),
  // more are unbounded.
  fj::ArrayParam bare = doc.param();
  bare.summary = nullptr;
  const fj::Interval both =
      fj::ival::load_int(bare, fj::Interval::range(0, 1), fj::Interval::range(2, 3));
  CHECK((both.lo == 2 && both.hi == 3));
  const fj::Interval unbounded =
      fj::ival::load_int(bare, fj::Interval::point(0), fj::Interval::range(2, 30));
  CHECK((unbounded.lo == kMin && unbounded.hi == kMax));
  // The generated hooks' forms, by the axis the code generator knows.
  CHECK(fj::ival::load_int<fj::kSummaryCols>(doc.param(), fj::Interval::range(0, 1),
                                             fj::Interval::range(2, 3))
            .hi == kMax);
  const fj::Interval read = fj::ival::load_int<fj::kSummaryNone>(
      doc.param(), fj::Interval::range(0, 1), fj::Interval::range(2, 3));
  CHECK((read.lo == 2 && read.hi == 3));
  const Summarised floats(1, 40, fj::kSummaryRows, true, 0,
                          [&](int32_t, int32_t position) { return bits_of(position * 0.5f); });
  fj::ArrayParam bare_floats = floats.param();
  bare_floats.summary = nullptr;
  const fj::FloatInterval all =
      fj::fival::load_float(bare_floats, fj::Interval::range(0, 30), fj::Interval::point(0));
  CHECK((all.nan && all.lo == -kInf && all.hi == kInf));
  const fj::FloatInterval few =
      fj::fival::load_float(bare_floats, fj::Interval::range(0, 3), fj::Interval::point(0));
  CHECK((!few.nan && few.lo == 0.0f && few.hi == 1.5f));
  // The summarised direction: [0.0, 1.5].
  const fj::FloatInterval bounded =
      fj::fival::load_float(floats.param(), fj::Interval::range(0, 3), fj::Interval::point(0));
  CHECK((!bounded.nan && bounded.lo == 0.0f && bounded.hi == 1.5f));
}

// ---------------------------------------------------------------------------------------------
// Layout

TEST_CASE("summary levels, pairs and words", "[summary]") {
  const std::pair<int64_t, int> levels[] = {{0, 0},    {1, 1},    {15, 1},    {16, 1},
                                            {17, 2},   {255, 2},  {256, 2},   {257, 3},
                                            {4096, 3}, {4097, 4}, {65536, 4}, {65537, 5}};
  for (const auto& [length, want] : levels) {
    INFO("length " << length);
    CHECK(fj::summary_levels(length) == want);
  }
  const std::pair<int64_t, int64_t> pairs[] = {{0, 0},
                                               {1, 1},
                                               {16, 1},
                                               {17, 2 + 1},
                                               {256, 16 + 1},
                                               {257, 17 + 2 + 1},
                                               {4097, 257 + 17 + 2 + 1}};
  for (const auto& [length, want] : pairs) {
    INFO("length " << length);
    CHECK(fj::summary_line_pairs(length) == want);
  }
  CHECK(fj::summary_words(3, 257, fj::kSummaryCols) == 2 * 3 * 20);
  CHECK(fj::summary_words(257, 3, fj::kSummaryRows) == 2 * 3 * 20);
  CHECK(fj::summary_words(257, 1, fj::kSummaryRows) == 2 * 20);
  CHECK(fj::summary_words(257, 3, fj::kSummaryNone) == 0);
  CHECK(fj::summary_words(0, 3, fj::kSummaryRows) == 0);
  CHECK(fj::summary_words(4, 0, fj::kSummaryCols) == 0);
}

TEST_CASE("build_summary writes each level's min and max per block", "[summary]") {
  std::mt19937 rng(14);
  for (const int32_t length : {1, 16, 17, 300, 4097}) {
    for (const bool is_float : {false, true}) {
      INFO("length " << length << (is_float ? " float" : " int"));
      const Summarised array(2, length, fj::kSummaryCols, is_float, 1,
                             [&](int32_t, int32_t position) {
                               return is_float ? float_element(false, position, rng)
                                               : int_element(Contents::Random, 0, position, rng);
                             });
      const int64_t line_pairs = fj::summary_line_pairs(length);
      for (int64_t line = 0; line < 2; ++line) {
        const int32_t* pairs = array.summary().data() + 2 * line * line_pairs;
        int64_t span = 1, offset = 0, count = 0;
        for (int level = 1; level <= fj::summary_levels(length); ++level) {
          span *= fj::kSummaryFanout;
          count = (length + span - 1) / span;
          CHECK(count == fj::summary_level_pairs(length, level));
          for (int64_t i = 0; i < count; ++i) {
            // Keys: ints are their own; floats order as floats, -0.0 below +0.0.
            int32_t lo = kMax, hi = kMin;
            for (int64_t position = i * span; position < std::min<int64_t>((i + 1) * span, length);
                 ++position) {
              const int32_t key =
                  is_float ? fj::float_key(array.read(line, position)) : array.read(line, position);
              lo = std::min(lo, key);
              hi = std::max(hi, key);
            }
            REQUIRE(pairs[2 * (offset + i)] == lo);
            REQUIRE(pairs[2 * (offset + i) + 1] == hi);
          }
          offset += count;
        }
        CHECK(offset == line_pairs);
        CHECK(count == 1);  // the top level is one pair: the whole line
      }
    }
  }
}

TEST_CASE("float keys order like floats", "[summary]") {
  const float ordered[] = {-kInf, -1e30f, -1.0f,  -1e-40f, -1e-45f, -0.0f,
                           0.0f,  1e-45f, 1e-40f, 1.0f,    1e30f,   kInf};
  for (size_t i = 0; i + 1 < std::size(ordered); ++i) {
    INFO(ordered[i] << " < " << ordered[i + 1]);
    CHECK(fj::float_key(bits_of(ordered[i])) < fj::float_key(bits_of(ordered[i + 1])));
  }
  for (const float value : ordered)
    CHECK(fj::float_key_bits(fj::float_key(bits_of(value))) == bits_of(value));
  CHECK(fj::float_key(0) == 0);  // an out-of-range read's 0 has key 0 for both types
  // NaNs lie beyond the infinities.
  CHECK(fj::float_key(0x7fc00000) > fj::float_key(bits_of(kInf)));
  CHECK(fj::float_key(static_cast<int32_t>(0xffc00000u)) < fj::float_key(bits_of(-kInf)));
}

// ---------------------------------------------------------------------------------------------
// HostParams

RuntimeParam array_param(std::string name, dsl::Type type, int slot,
                         std::vector<std::string> dims) {
  return {std::move(name), type, slot, std::move(dims)};
}

TEST_CASE("arrays are summarised along their position dimension", "[summary]") {
  const auto axis = [](std::vector<std::string> dims) {
    return summary_axis(array_param("a", dsl::Type::Int, 0, std::move(dims)));
  };
  CHECK(axis({"b", "kv"}) == fj::kSummaryCols);
  CHECK(axis({"b", "q"}) == fj::kSummaryCols);
  CHECK(axis({"q", "kv"}) == fj::kSummaryCols);
  CHECK(axis({"kv"}) == fj::kSummaryRows);
  CHECK(axis({"q"}) == fj::kSummaryRows);
  CHECK(axis({"kv", "x"}) == fj::kSummaryRows);
  CHECK(axis({"b"}) == fj::kSummaryNone);
  CHECK(axis({"h"}) == fj::kSummaryNone);
  CHECK(axis({"b", "r"}) == fj::kSummaryNone);
}

TEST_CASE("HostParams summarises the arrays a variant declares with positions", "[summary]") {
  Variant variant;
  variant.scalars = {{"window", dsl::Type::Int, 0, {}}};
  variant.arrays = {array_param("doc", dsl::Type::Int, 0, {"b", "kv"}),
                    array_param("pos", dsl::Type::Float, 1, {"kv"}),
                    array_param("prefix_len", dsl::Type::Int, 2, {"b"}),
                    array_param("bad", dsl::Type::Int, 3, {"b", "kv"})};
  std::vector<HostArray> arrays(4);
  arrays[0] = {2, 20, {}};
  for (int32_t i = 0; i < 40; ++i)
    arrays[0].bits.push_back(i < 20 ? i / 7 : -i);
  arrays[1] = {5, 1, {bits_of(-2.0f), bits_of(-0.0f), bits_of(3.0f), bits_of(-7.5f), 0}};
  arrays[2] = {2, 1, {10, 20}};
  arrays[3] = {2, 20, {1, 2, 3}};  // mis-sized: reads as empty
  HostParams built(variant, {42}, std::move(arrays));
  const HostParams host(std::move(built));  // params() stays valid across the move
  const fj::MaskParams& params = host.params();
  CHECK(params.scalar[0] == 42);
  // doc, row 0 columns [5, 14]: ids 0..2; row 1 columns [18, 25]: -19, -18 and the 0 past the end.
  const fj::Interval ids =
      fj::ival::load_int(params.array[0], fj::Interval::point(0), fj::Interval::range(5, 14));
  CHECK((ids.lo == 0 && ids.hi == 2));
  const fj::Interval tail =
      fj::ival::load_int(params.array[0], fj::Interval::point(1), fj::Interval::range(18, 25));
  CHECK((tail.lo == -39 && tail.hi == 0));
  // pos is summarised as floats: [-7.5, 3.0] over positions 0..3 (an int order would differ).
  const fj::FloatInterval pos =
      fj::fival::load_float(params.array[1], fj::Interval::range(0, 3), fj::Interval::point(0));
  CHECK((!pos.nan && pos.lo == -7.5f && pos.hi == 3.0f));
  CHECK(params.array[2].summary == nullptr);
  CHECK(params.array[2].summary_axis == fj::kSummaryNone);
  CHECK(params.array[3].data == nullptr);
  CHECK(params.array[3].rows == 0);
  CHECK(params.array[3].summary == nullptr);
  const fj::Interval empty =
      fj::ival::load_int(params.array[3], fj::Interval::point(0), fj::Interval::range(0, 5));
  CHECK((empty.lo <= 0 && empty.hi >= 0));
}

}  // namespace
}  // namespace flexjit
