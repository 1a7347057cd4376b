// The standard library (dsl/lib/standard.mask) against hand-written C++: every mask and score,
// lowered and evaluated by the IR evaluator, over grids with negative differences, int32
// edges and out-of-range array indices. Also: selecting variants, scores and defines.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"
#include "standard_masks.h"

namespace flexjit {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

const dsl::Module& standard() {
  // not even a warning
  return testing::standard_masks(testing::Warnings::Refused);
}

Variant lower(const std::string& name, const std::string& score = "",
              std::vector<std::pair<std::string, std::string>> defines = {}) {
  VariantSelection selection;
  selection.name = name;
  selection.score = score;
  selection.defines = std::move(defines);
  Result<Variant> variant = lower_variant(standard(), selection);
  INFO(name << ": " << (variant.ok() ? "" : variant.error().message));
  REQUIRE(variant.ok());
  return std::move(variant).value();
}

// Hand-written semantics, independent of fj_ops.cuh.
int32_t wrap(int64_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x));
}
int32_t floor_div(int32_t a, int32_t b) {
  if (b == 0) return 0;
  const int64_t quotient = int64_t{a} / b;
  const bool inexact = int64_t{quotient} * b != a;
  return wrap(inexact && ((a < 0) != (b < 0)) ? quotient - 1 : quotient);
}

// The runtime parameters of the standard library, with the host arrays they point to.
struct Params {
  int32_t window = 0;
  std::vector<int32_t> prefix_len;  // [b]
  int32_t ranges_cols = 0;
  std::vector<int32_t> ranges;  // [b, ranges_cols]
  int32_t doc_cols = 0;
  std::vector<int32_t> doc;   // [b, doc_cols]
  std::vector<float> slopes;  // [h]

  fj::MaskParams block() const {
    fj::MaskParams p{};
    p.scalar[0] = window;
    const auto rows = [](size_t size, int32_t cols) {
      return cols == 0 ? 0 : static_cast<int32_t>(size / cols);
    };
    p.array[0] = {prefix_len.data(), static_cast<int32_t>(prefix_len.size()), 1, 1, 0};
    p.array[1] = {ranges.data(), rows(ranges.size(), ranges_cols), ranges_cols, ranges_cols, 0};
    p.array[2] = {doc.data(), rows(doc.size(), doc_cols), doc_cols, doc_cols, 0};
    p.array[3] = {slopes.data(), static_cast<int32_t>(slopes.size()), 1, 1, 0};
    return p;
  }

  // Reads as the language defines them: 0 outside the array.
  int32_t prefix(int32_t b) const {
    return b >= 0 && b < static_cast<int32_t>(prefix_len.size()) ? prefix_len[b] : 0;
  }
  int32_t range(int32_t b, int32_t i) const {
    const int32_t rows = ranges_cols == 0 ? 0 : static_cast<int32_t>(ranges.size()) / ranges_cols;
    return b >= 0 && b < rows && i >= 0 && i < ranges_cols ? ranges[b * ranges_cols + i] : 0;
  }
  int32_t document(int32_t b, int32_t position) const {
    const int32_t rows = doc_cols == 0 ? 0 : static_cast<int32_t>(doc.size()) / doc_cols;
    return b >= 0 && b < rows && position >= 0 && position < doc_cols ? doc[b * doc_cols + position]
                                                                      : 0;
  }
  float slope(int32_t h) const {
    return h >= 0 && h < static_cast<int32_t>(slopes.size()) ? slopes[h] : 0.0f;
  }
};

using MaskOracle = std::function<bool(const Params&, int32_t b, int32_t h, int32_t q, int32_t kv)>;

bool causal(int32_t q, int32_t kv) {
  return q >= kv;
}

const std::vector<std::pair<std::string, MaskOracle>>& mask_oracles() {
  static const std::vector<std::pair<std::string, MaskOracle>> oracles = {
      {"causal", [](const Params&, int32_t, int32_t, int32_t q, int32_t kv) { return q >= kv; }},
      {"bidirectional", [](const Params&, int32_t, int32_t, int32_t, int32_t) { return true; }},
      {"sliding", [](const Params& p, int32_t, int32_t, int32_t q,
                     int32_t kv) { return causal(q, kv) && wrap(int64_t{q} - kv) < p.window; }},
      {"sliding_sym",
       [](const Params& p, int32_t, int32_t, int32_t q, int32_t kv) {
         const int32_t d = wrap(int64_t{q} - kv);
         return (d < 0 ? wrap(-int64_t{d}) : d) < p.window;
       }},
      {"prefix_lm", [](const Params& p, int32_t b, int32_t, int32_t q,
                       int32_t kv) { return causal(q, kv) || kv < p.prefix(b); }},
      {"prefix_ranges",
       [](const Params& p, int32_t b, int32_t, int32_t q, int32_t kv) {
         if (causal(q, kv)) return true;
         for (int32_t i = 0; i < 8; ++i) {
           if (p.range(b, 2 * i) <= std::min(q, kv) && std::max(q, kv) <= p.range(b, 2 * i + 1)) {
             return true;
           }
         }
         return false;
       }},
      {"rswa",
       [](const Params& p, int32_t b, int32_t, int32_t q, int32_t kv) {
         return causal(q, kv) && (kv < p.prefix(b) || wrap(int64_t{q} - kv) < p.window);
       }},
      {"chunked",
       [](const Params&, int32_t, int32_t, int32_t q, int32_t kv) {
         return causal(q, kv) && floor_div(q, 8192) == floor_div(kv, 8192);
       }},
      {"document",
       [](const Params& p, int32_t b, int32_t, int32_t q, int32_t kv) {
         return causal(q, kv) && p.document(b, q) == p.document(b, kv);
       }},
  };
  return oracles;
}

const std::vector<int32_t>& positions() {
  static const std::vector<int32_t> values = {
      kMin, kMin + 1, -8193, -8192, -5, -1,  0,    1,    2,    3,     5,     7,        8,   9,
      10,   15,       16,    17,    31, 100, 8191, 8192, 8193, 16383, 16384, kMax - 1, kMax};
  return values;
}

Params sample_params() {
  Params p;
  p.window = 4;
  p.prefix_len = {3, 0, 9};
  p.ranges_cols = 6;  // three ranges per request, the rest of max_ranges reads as (0, 0)
  p.ranges = {5, 9, 12, 15, -1, -1,  //
              0, 2, -1, -1, -1, -1,  //
              1, 1, 3,  8,  16, 17};
  p.doc_cols = 20;
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < p.doc_cols; ++i)
      p.doc.push_back((i + b) / 6);
  }
  p.slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  return p;
}

TEST_CASE("every standard mask evaluates to its hand-written definition", "[stdlib]") {
  for (const int32_t window : {0, 1, 4, 1000, kMax, kMin, -3}) {
    Params params = sample_params();
    params.window = window;
    const fj::MaskParams block = params.block();
    for (const auto& [name, oracle] : mask_oracles()) {
      const Variant variant = lower(name);
      int64_t checked = 0;
      for (const int32_t b : {-1, 0, 1, 2, 3}) {
        for (const int32_t h : {-1, 0, 3}) {
          for (const int32_t q : positions()) {
            for (const int32_t kv : positions()) {
              const bool want = oracle(params, b, h, q, kv);
              const bool got = evaluate_mask(variant, {b, h, q, kv, &block});
              if (got != want) {
                FAIL_CHECK(name << " window " << window << " b " << b << " h " << h << " q " << q
                                << " kv " << kv << ": got " << got);
              }
              ++checked;
            }
          }
        }
      }
      CHECK(checked == 5 * 3 * 27 * 27);
    }
  }
}

TEST_CASE("document and prefix_ranges on small positions, element by element", "[stdlib]") {
  // The grid above is sparse in small positions; here every pair of a 24 x 24 square.
  const Params params = sample_params();
  const fj::MaskParams block = params.block();
  for (const char* name : {"document", "prefix_ranges", "prefix_lm", "rswa"}) {
    const Variant variant = lower(name);
    const MaskOracle* oracle = nullptr;
    for (const auto& [oracle_name, function] : mask_oracles()) {
      if (oracle_name == name) oracle = &function;
    }
    REQUIRE(oracle != nullptr);
    int visible = 0;
    for (int32_t b = 0; b < 3; ++b) {
      for (int32_t q = -2; q < 22; ++q) {
        for (int32_t kv = -2; kv < 22; ++kv) {
          const bool want = (*oracle)(params, b, 0, q, kv);
          visible += want;
          REQUIRE(evaluate_mask(variant, {b, 0, q, kv, &block}) == want);
        }
      }
    }
    CHECK(visible > 0);
  }
}

TEST_CASE("the standard scores evaluate to their hand-written definitions", "[stdlib]") {
  const Params params = sample_params();
  const fj::MaskParams block = params.block();
  const Variant softcap = lower("causal", "softcap");
  const Variant alibi = lower("causal", "alibi");
  const Variant capped_30 = lower("causal", "softcap", {{"cap", "30"}});
  for (const float score : {-1e30f, -300.0f, -50.0f, -1.5f, -0.0f, 0.0f, 0.25f, 49.0f, 1e6f}) {
    for (const int32_t h : {-1, 0, 1, 3, 4}) {
      for (const int32_t q : {0, 5, 100, kMax}) {
        for (const int32_t kv : {0, 3, 100, kMin}) {
          const EvalPoint point{0, h, q, kv, &block};
          const float want_softcap = 50.0f * std::tanh(score / 50.0f);
          CHECK(evaluate_score(softcap, score, point) == Approx(want_softcap).epsilon(1e-6));
          CHECK(evaluate_score(capped_30, score, point) ==
                Approx(30.0f * std::tanh(score / 30.0f)).epsilon(1e-6));
          const float distance = static_cast<float>(wrap(int64_t{q} - kv));
          const float want_alibi = score - params.slope(h) * distance;
          CHECK(evaluate_score(alibi, score, point) == Approx(want_alibi).epsilon(1e-6));
        }
      }
    }
  }
  // A variant without a score leaves the score alone.
  CHECK(evaluate_score(lower("llama4_local"), 1.25f, {}) == 1.25f);
}

TEST_CASE("variants pair their mask and score", "[stdlib]") {
  const Variant local = lower("gemma2_local");
  CHECK(local.name == "gemma2_local");
  CHECK(local.mask_name == "sliding");
  CHECK(local.score_name == "softcap");
  CHECK(local.has_score());
  const Variant chunked = lower("llama4_local");
  CHECK(chunked.mask_name == "chunked");
  CHECK_FALSE(chunked.has_score());
  const Variant paired = lower("sliding", "alibi");
  CHECK(paired.name == "sliding_alibi");
  // Tile classes depend on the mask only: alibi reads slopes[h], but sliding's tiles are the
  // same for every head.
  CHECK_FALSE(paired.uses_head);
  CHECK(lower("causal").scalars.size() == 1);
  CHECK(lower("causal").arrays.size() == 4);
}

TEST_CASE("defines override constants, checked against the const's type", "[stdlib]") {
  const Variant chunk_4 = lower("chunked", "", {{"chunk", "4"}});
  CHECK(evaluate_mask(chunk_4, {0, 0, 7, 4, nullptr}));
  CHECK_FALSE(evaluate_mask(chunk_4, {0, 0, 8, 7, nullptr}));
  bool found = false;
  for (const ConstantValue& constant : chunk_4.constants) {
    if (constant.name != "chunk") continue;
    found = true;
    CHECK(constant.value == "4");
    CHECK(constant.overridden);
  }
  CHECK(found);

  const auto error_of = [](VariantSelection selection) {
    Result<Variant> variant = lower_variant(standard(), selection);
    return variant.ok() ? std::string("ok") : variant.error().message;
  };
  VariantSelection selection;
  selection.name = "chunked";
  selection.defines = {{"chunk", "4.5"}};
  CHECK(error_of(selection) ==
        "-D chunk=4.5: `chunk` is a int const; expected a decimal int32 such as 4096");
  selection.defines = {{"cap", "inf"}};
  CHECK(error_of(selection).find("expected a finite number") != std::string::npos);
  selection.defines = {{"window", "3"}};
  CHECK(error_of(selection) == "-D window: the file declares no const named `window`");
  selection.defines = {};
  selection.name = "gemma2_local";
  selection.score = "alibi";
  CHECK(error_of(selection).find("is a variant, which names its own score") != std::string::npos);
  selection.name = "softcap";
  selection.score = "";
  CHECK(error_of(selection) == "`softcap` is a score, not a mask or a variant");
  selection.name = "nosuch";
  CHECK(error_of(selection) == "no mask or variant named `nosuch`");
}

TEST_CASE("the standard masks' tile classes are sound on small tiles", "[stdlib][classify]") {
  const Params params = sample_params();
  for (const int32_t window : {1, 4, 7}) {
    Params with_window = params;
    with_window.window = window;
    const fj::MaskParams block = with_window.block();
    for (const auto& [name, oracle] : mask_oracles()) {
      const Variant variant = lower(name, "", {{"chunk", "8"}});
      for (int32_t b = 0; b < 3; ++b) {
        for (int32_t q0 = -4; q0 < 24; q0 += 3) {
          for (int32_t k0 = -4; k0 < 24; k0 += 5) {
            const Tile tile{b, 0, q0, q0 + 4, k0, k0 + 6};
            bool any_true = false, any_false = false;
            for (int32_t q = tile.q0; q < tile.q1; ++q) {
              for (int32_t kv = tile.k0; kv < tile.k1; ++kv) {
                (evaluate_mask(variant, {b, 0, q, kv, &block}) ? any_true : any_false) = true;
              }
            }
            const TileClass tile_class = classify_tile(variant, tile, &block);
            INFO(name << " b " << b << " q0 " << q0 << " k0 " << k0);
            CHECK_FALSE((tile_class == TileClass::Empty && any_true));
            CHECK_FALSE((tile_class == TileClass::Full && any_false));
          }
        }
      }
    }
  }
}

TEST_CASE("a debug report records the first out-of-range array read", "[stdlib]") {
  Params params = sample_params();
  fj::MaskParams block = params.block();
  int32_t report[4] = {0, 0, 0, 0};
  for (fj::ArrayParam& array : block.array)
    array.bad_index = report;
  block.array[2].slot = 2;
  const Variant document = lower("document");
  // In range: no report.
  CHECK(evaluate_mask(document, {1, 0, 9, 7, &block}));
  CHECK(report[0] == 0);
  // doc has 20 columns: position 25 reads 0 (and 0 == 0, so the pair is visible) and is the
  // first bad read; later bad reads leave the report alone.
  CHECK(evaluate_mask(document, {0, 0, 25, 0, &block}) == (params.document(0, 0) == 0));
  CHECK(report[0] == 1);
  CHECK(report[1] == 2);
  CHECK(report[2] == 0);
  CHECK(report[3] == 25);
  CHECK(evaluate_mask(document, {-4, 0, 31, 30, &block}));  // rows past the end read 0 too
  CHECK(report[3] == 25);
}

}  // namespace
}  // namespace flexjit
