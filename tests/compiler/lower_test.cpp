// Lowering a checked AST to IR (inlining, slots, conversions, unrolling, score calls) and the
// IR evaluator on lowered masks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"

namespace flexjit {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

Result<Variant> try_lower(std::string text, std::string_view name, std::string score = "") {
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check({"test.mask", std::move(text)}, diagnostics);
  VariantSelection selection;
  selection.name = std::string(name);
  selection.score = std::move(score);
  return lower_variant(module, selection);
}

Variant lower(std::string text, std::string_view name, std::string score = "") {
  Result<Variant> variant = try_lower(std::move(text), name, std::move(score));
  INFO((variant.ok() ? std::string() : variant.error().message));
  REQUIRE(variant.ok());
  return std::move(variant).value();
}

// A parameter block with `scalars` in the first slots.
fj::MaskParams block(std::initializer_list<int32_t> scalars) {
  fj::MaskParams p{};
  int slot = 0;
  for (const int32_t value : scalars)
    p.scalar[slot++] = value;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Lowering

TEST_CASE("lowering inlines masks and constants and numbers params", "[lower]") {
  const std::string source = R"(
param first: int
param flag: bool
param window: int
const chunk: int = 8
const offset: int = -3
mask causal = q >= kv
mask sliding = causal && q - kv < window
mask chunked = causal && q / chunk == (kv + offset) / chunk
mask headed = flag || h == 2
)";
  const Variant sliding = lower(source, "sliding");
  CHECK(sliding.name == "sliding");
  CHECK(ir::to_string(sliding.mask) == "(q >= kv) && ((q - kv) < window)");
  REQUIRE(sliding.scalars.size() == 3);
  CHECK(sliding.scalars[0].name == "first");
  CHECK(sliding.scalars[1].name == "flag");
  CHECK(sliding.scalars[1].type == dsl::Type::Bool);
  CHECK(sliding.scalars[2].name == "window");
  for (int slot = 0; slot < 3; ++slot)
    CHECK(sliding.scalars[slot].slot == slot);
  const auto* lt = sliding.mask.as<ir::And>()->b.as<ir::LT>();
  REQUIRE(lt != nullptr);
  REQUIRE(lt->b.as<ir::Param>() != nullptr);
  CHECK(lt->b.as<ir::Param>()->slot == 2);
  CHECK_FALSE(sliding.uses_head);
  CHECK(ir::uses_param(sliding.mask, 2));
  CHECK_FALSE(ir::uses_param(sliding.mask, 0));
  CHECK_FALSE(ir::uses_param(sliding.mask, 1));

  const Variant chunked = lower(source, "chunked");
  CHECK(ir::to_string(chunked.mask) == "(q >= kv) && ((q / 8) == ((kv - 3) / 8))");

  const Variant headed = lower(source, "headed");
  CHECK(ir::to_string(headed.mask) == "flag || (h == 2)");
  CHECK(headed.uses_head);
  CHECK(ir::uses_param(headed.mask, 1));
  CHECK_FALSE(ir::uses_param(headed.mask, 2));
  CHECK(headed.mask.as<ir::Or>()->a.as<ir::Param>()->type == ir::Type::Bool);
}

TEST_CASE("lowering folds constant parts", "[lower]") {
  const Variant mask =
      lower("const big: int = 2147483647\nmask m = q - kv < big + 1 || (3 > 4 && q == kv)\n", "m");
  CHECK(ir::to_string(mask.mask) == "(q - kv) < (-2147483648)");
}

TEST_CASE("lowering reports what it cannot lower", "[lower]") {
  const std::string source = "param window: int\nmask causal = q >= kv\n";
  const Result<Variant> unknown = try_lower(source, "nope");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("no mask or variant named `nope`"));

  const Result<Variant> not_a_mask = try_lower(source, "window");
  REQUIRE_FALSE(not_a_mask.ok());
  CHECK_THAT(not_a_mask.error().message, Catch::Contains("not a mask"));

  const Result<Variant> broken = try_lower("mask m = q >= nowhere\n", "m");
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(broken.error().message, Catch::Contains("errors"));
}

TEST_CASE("lowering refuses more runtime parameters than slots", "[lower]") {
  std::string source;
  std::string uses = "q >= kv";
  for (int i = 0; i <= kMaxScalarParams; ++i) {
    source += "param p" + std::to_string(i) + ": int\n";
    uses += " && q != p" + std::to_string(i);
  }
  const Result<Variant> mask = try_lower(source + "mask m = " + uses + "\n", "m");
  REQUIRE_FALSE(mask.ok());
  CHECK_THAT(mask.error().message, Catch::Contains("too many runtime scalar parameters"));
  CHECK_THAT(mask.error().message, Catch::StartsWith("test.mask:17:7:"));
}

TEST_CASE("lowering bounds the size of inlined masks", "[lower]") {
  SECTION("doubling masks") {
    // m20 would be a tree of 2^21 nodes.
    std::string source = "mask m0 = q >= kv\n";
    for (int i = 1; i <= 20; ++i) {
      source += "mask m" + std::to_string(i) + " = m" + std::to_string(i - 1) + " && m" +
                std::to_string(i - 1) + "\n";
    }
    const Result<Variant> mask = try_lower(source, "m20");
    REQUIRE_FALSE(mask.ok());
    CHECK_THAT(mask.error().message, Catch::Contains("too large"));
    CHECK(try_lower(source, "m10").ok());
  }
  SECTION("a long chain of masks") {
    std::string source = "mask m0 = q >= kv\n";
    for (int i = 1; i <= 400; ++i) {
      source += "mask m" + std::to_string(i) + " = !m" + std::to_string(i - 1) + "\n";
    }
    const Result<Variant> mask = try_lower(source, "m400");
    REQUIRE_FALSE(mask.ok());
    CHECK_THAT(mask.error().message, Catch::Contains("too large"));
    const Result<Variant> shallow = try_lower(source, "m100");
    REQUIRE(shallow.ok());
    CHECK(ir::to_string(shallow->mask) == "q >= kv");  // !! cancels
  }
}

// ---------------------------------------------------------------------------------------------
// Evaluator

int32_t wrap(int64_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x));
}

TEST_CASE("evaluating causal and sliding matches hand-written C++", "[evaluate]") {
  const std::string source =
      "param window: int\nmask causal = q >= kv\nmask sliding = causal && q - kv < window\n";
  const Variant causal = lower(source, "causal");
  const Variant sliding = lower(source, "sliding");

  std::vector<int32_t> positions;
  for (int32_t x = -70; x <= 70; ++x)
    positions.push_back(x);
  for (int32_t x : {kMin, kMin + 1, kMax - 1, kMax, 1 << 20, -(1 << 20)})
    positions.push_back(x);

  int checked = 0;
  for (const int32_t window : {1, 3, 64, 0, -1}) {
    const fj::MaskParams params = block({window});
    for (const int32_t qv : positions) {
      for (const int32_t kvv : positions) {
        const EvalPoint point{0, 0, qv, kvv, &params};
        const bool want_causal = qv >= kvv;
        const bool want_sliding = qv >= kvv && wrap(int64_t{qv} - kvv) < window;
        REQUIRE(evaluate_mask(causal, point) == want_causal);
        REQUIRE(evaluate_mask(sliding, point) == want_sliding);
        ++checked;
      }
    }
  }
  CHECK(checked == 5 * 147 * 147);
  // Wrap-around: q - kv overflows to -1, which is below any positive window.
  const fj::MaskParams params = block({4});
  CHECK(evaluate_mask(sliding, {0, 0, kMax, kMin, &params}));
}

TEST_CASE("evaluating every operation", "[evaluate]") {
  const std::string source = R"(
param p: int
param flag: bool
mask arith = (q + kv) * 3 - q / 4 + kv % 5 == p
mask calls = min(q, kv) + max(q, kv) - abs(q - kv) == -(-(2 * min(q, kv)))
mask logic = !(flag && h == 1) || b != 0
)";
  const Variant arith = lower(source, "arith");
  const Variant calls = lower(source, "calls");
  const Variant logic = lower(source, "logic");
  for (int32_t qv = -9; qv <= 9; ++qv) {
    for (int32_t kvv = -9; kvv <= 9; ++kvv) {
      // Floor division and modulo written out for these small operands.
      const int32_t floor_q_by_4 = qv >= 0 ? qv / 4 : -((-qv + 3) / 4);
      const int32_t kv_mod_5 = ((kvv % 5) + 5) % 5;
      const int32_t want = (qv + kvv) * 3 - floor_q_by_4 + kv_mod_5;
      const fj::MaskParams params = block({want, 0});
      CHECK(evaluate_mask(arith, {0, 0, qv, kvv, &params}));
      const fj::MaskParams other = block({want + 1, 0});
      CHECK_FALSE(evaluate_mask(arith, {0, 0, qv, kvv, &other}));
      CHECK(evaluate_mask(calls, {0, 0, qv, kvv, &params}));
    }
  }
  const fj::MaskParams flag_set = block({0, 7});  // any nonzero slot value is true
  const fj::MaskParams flag_clear = block({0, 0});
  CHECK_FALSE(evaluate_mask(logic, {0, 1, 0, 0, &flag_set}));
  CHECK(evaluate_mask(logic, {1, 1, 0, 0, &flag_set}));
  CHECK(evaluate_mask(logic, {0, 2, 0, 0, &flag_set}));
  CHECK(evaluate_mask(logic, {0, 1, 0, 0, &flag_clear}));
  // No parameter block: every slot reads 0.
  CHECK(evaluate_mask(logic, {0, 1, 0, 0, nullptr}));
}

// ---------------------------------------------------------------------------------------------
// The full language

TEST_CASE("lowering converts mixed int and float operands", "[lower]") {
  const std::string source = R"(
param t: float
const half: float = 1 / 2
mask m = float(q) * t > kv + half
mask n = int(t * 2.0) == q
mask c = clamp(q, 0, t) < where(q > kv, 1, 2.5)
)";
  CHECK(ir::to_string(lower(source, "m").mask) == "(float(q) * t) > (float(kv) + 0.0)");
  CHECK(ir::to_string(lower(source, "n").mask) == "int(t * 2.0) == q");
  const Variant c = lower(source, "c");
  CHECK(ir::to_string(c.mask) == "min(max(float(q), 0.0), t) < ((q > kv) ? 1.0 : 2.5)");
  // 1 / 2 is int floor division (0), then promoted: the const is 0.0, not 0.5.
  REQUIRE(c.constants.size() == 1);
  CHECK(c.constants[0].value == "0.0");
  const fj::MaskParams t = [] {
    fj::MaskParams p{};
    p.scalar[0] = fj::float_to_bits(1.5f);
    return p;
  }();
  CHECK(evaluate_mask(lower(source, "m"), {0, 0, 4, 5, &t}));        // 6.0 > 5.0
  CHECK_FALSE(evaluate_mask(lower(source, "m"), {0, 0, 4, 6, &t}));  // 6.0 > 6.0
  CHECK(evaluate_mask(lower(source, "n"), {0, 0, 3, 0, &t}));        // int(3.0) == 3
}

TEST_CASE("any and all unroll over a constant count", "[lower]") {
  const std::string source = R"(
const n: int = 3
param starts: int[b, r]
mask hit = any(i < n: starts[b, i] == kv)
mask every = all(i < n + 1: q != kv + i)
mask none = any(i < 0: true)
mask vacuous = all(i < 0: false)
)";
  CHECK(ir::to_string(lower(source, "hit").mask) ==
        "((starts[b, 0] == kv) || (starts[b, 1] == kv)) || (starts[b, 2] == kv)");
  CHECK(ir::to_string(lower(source, "none").mask) == "false");
  CHECK(ir::to_string(lower(source, "vacuous").mask) == "true");
  const Variant every = lower(source, "every");
  for (int32_t q = 0; q < 10; ++q) {
    CHECK(evaluate_mask(every, {0, 0, q, 3, nullptr}) == (q < 3 || q > 6));
  }
}

TEST_CASE("score calls substitute their argument for `score`", "[lower]") {
  const std::string source = R"(
param slopes: float[h]
const cap: float = 20.0
mask causal = q >= kv
score softcap = cap * tanh(score / cap)
score alibi = score - slopes[h] * (q - kv)
score both = softcap(alibi(score))
score doubled = softcap(2 * score)
variant v = causal with both
)";
  const Variant v = lower(source, "v");
  CHECK(v.name == "v");
  CHECK(v.score_name == "both");
  CHECK(ir::to_string(v.score) == "tanh((score - (slopes[h] * float(q - kv))) / 20.0) * 20.0");
  const Variant doubled = lower(source, "causal", "doubled");
  CHECK(doubled.name == "causal_doubled");
  CHECK(ir::to_string(doubled.score) == "tanh((score * 2.0) / 20.0) * 20.0");
  const std::vector<float> slopes = {0.5f, 0.25f};
  fj::MaskParams p{};
  p.array[0] = {slopes.data(), 2, 1, 1, 0};
  const float want = 20.0f * std::tanh((3.0f - 0.25f * 4.0f) / 20.0f);
  CHECK(evaluate_score(v, 3.0f, {0, 1, 9, 5, &p}) == Approx(want).epsilon(1e-6));
  // Head 7 lies outside slopes: its slope reads 0.
  CHECK(evaluate_score(v, 3.0f, {0, 7, 9, 5, &p}) ==
        Approx(20.0f * std::tanh(3.0f / 20.0f)).epsilon(1e-6));
}

TEST_CASE("lowering numbers array parameters apart from scalars", "[lower]") {
  std::string source = "param w: int\n";
  for (int i = 0; i <= kMaxArrayParams; ++i)
    source += "param a" + std::to_string(i) + ": int[b]\n";
  source += "mask m = q >= kv\n";
  const Result<Variant> too_many = try_lower(source, "m");
  REQUIRE_FALSE(too_many.ok());
  CHECK_THAT(too_many.error().message, Catch::Contains("too many runtime array parameters"));

  const Variant ok = lower(
      "param w: int\nparam d: int[b, kv]\nparam s: float[N]\n"
      "param x: float\nmask m = d[b, q] == w && s[q] > x\n",
      "m");
  REQUIRE(ok.scalars.size() == 2);
  REQUIRE(ok.arrays.size() == 2);
  CHECK(ok.scalars[1].name == "x");
  CHECK(ok.scalars[1].slot == 1);
  CHECK(ok.arrays[1].name == "s");
  CHECK(ok.arrays[1].slot == 1);
  CHECK(ok.arrays[1].dims == std::vector<std::string>{"N"});
  CHECK(ok.arrays[0].dims == std::vector<std::string>{"b", "kv"});
  CHECK(ir::uses_array(ok.mask, 0));
  CHECK(ir::uses_array(ok.mask, 1));
}

}  // namespace
}  // namespace flexjit
