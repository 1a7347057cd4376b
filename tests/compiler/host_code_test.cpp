// Host code (host_code.h): every mask, score and variant of dsl/lib/standard.mask against the IR
// evaluator bit for bit, with random parameters and arrays (short ones, so that reads fall
// outside) over positions at the int32 edges; the standard scores against a double-precision
// recomputation; the language's edge cases (floor division, modulo and division by zero,
// wrap-around, float modulo, NaN and signed zeros, saturating int()) against values written
// from docs/language.md; rows (empty, wrapping past INT_MAX, no parameters); bad-index reports;
// compiling and calling from several threads. Runs whatever the build: without LLVM the host
// code is the evaluator and the comparisons hold trivially, the hand-written values do not.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/dsl/frontend.h"
#include "standard_masks.h"

namespace flexjit {
namespace {

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const dsl::Module& standard() {
  return testing::standard_masks(testing::Warnings::Refused);
}

Variant lower(const std::string& name, const std::string& score = "") {
  VariantSelection selection;
  selection.name = name;
  selection.score = score;
  Result<Variant> variant = lower_variant(standard(), selection);
  INFO(name << ": " << (variant.ok() ? "" : variant.error().message));
  REQUIRE(variant.ok());
  return std::move(variant).value();
}

std::shared_ptr<const HostCode> compile(const Variant& variant, bool native = true) {
  auto code = make_host_code(variant, native);
  INFO(variant.name << ": " << (code.ok() ? "" : code.error().message + "\n" + code.error().log));
  REQUIRE(code.ok());
  CHECK((*code)->native() == (native && FLEXJIT_WITH_LLVM));
  return *code;
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || fj::float_to_bits(a) == fj::float_to_bits(b);
}

std::string float_text(float value) {
  std::ostringstream out;
  out << ir::float_text(value) << " (0x" << std::hex
      << static_cast<uint32_t>(fj::float_to_bits(value)) << ")";
  return out.str();
}

// The standard library's runtime parameters, random: the window anywhere in int32, arrays of
// a few requests and heads (b and h beyond them read 0), documents of random lengths over fewer
// positions than the queries reach, multimodal ranges with -1 padding, slopes of any float.
HostParams random_standard_params(std::mt19937& rng, const Variant& variant) {
  const auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  static constexpr int32_t kWindows[] = {0, 1, 4, 100, kMax, kMin, -3};
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  for (const RuntimeParam& param : variant.scalars)
    scalars[param.slot] = pick(2) ? kWindows[pick(7)] : pick(64);
  for (const RuntimeParam& param : variant.arrays) {
    HostArray& array = arrays[param.slot];
    array.rows = 1 + pick(4);
    array.cols = param.dims.size() == 2 ? (param.name == "ranges" ? 16 : 1 + pick(90)) : 1;
    array.bits.resize(static_cast<size_t>(array.rows) * array.cols);
    int32_t id = 0;
    for (size_t i = 0; i < array.bits.size(); ++i) {
      int32_t& bits = array.bits[i];
      if (param.name == "doc") {
        if (pick(9) == 0) ++id;
        bits = id;
      } else if (param.name == "ranges") {
        bits = pick(3) == 0 ? -1 : pick(80);
      } else if (param.name == "slopes") {
        static constexpr float kSlopes[] = {0.5f, 0.0625f, -0.0f, kInf, kNaN, 1e-40f, 3e38f};
        bits = fj::float_to_bits(pick(2) ? kSlopes[pick(7)]
                                         : std::uniform_real_distribution<float>(-2, 2)(rng));
      } else {
        bits = pick(4) == 0 ? kMax - pick(3) : pick(80);
      }
    }
  }
  return HostParams(variant, std::move(scalars), std::move(arrays));
}

// Rows starting at these keys, and queries at these positions: small ones, negative ones, and
// the ends of int32 (a row from kMax - 8 wraps to kMin).
const std::vector<int32_t>& row_starts() {
  static const std::vector<int32_t> values = {-40, -3, 0, 5, 60, 8190, kMax - 8, kMin, kMin + 100};
  return values;
}
const std::vector<int32_t>& queries() {
  static const std::vector<int32_t> values = {kMin, kMin + 1, -100, -1,   0,    1,        7,
                                              15,   40,       77,   8191, 8192, kMax - 1, kMax};
  return values;
}

// Compares `variant`'s native host code with the evaluator over rows of 48 keys from every row
// start, for every query, a few requests and heads, and random scores; returns the elements.
int64_t compare_with_evaluator(const Variant& variant, const fj::MaskParams* params,
                               std::mt19937& rng) {
  const std::shared_ptr<const HostCode> code = compile(variant);
  constexpr int32_t kRow = 48;
  static constexpr float kScores[] = {0.0f,  -0.0f, 1.5f,  -300.0f, 49.99f,
                                      1e30f, kInf,  -kInf, kNaN,    1e-45f};
  int64_t elements = 0;
  std::vector<uint8_t> visible(kRow);
  std::vector<float> scores(kRow), inputs(kRow);
  for (const int32_t b : {0, 1, 5, -1}) {
    for (const int32_t h : {0, 2, 9, -2}) {
      for (const int32_t q : queries()) {
        for (const int32_t kv0 : row_starts()) {
          code->mask_row(params, b, h, q, kv0, kRow, visible.data());
          for (int32_t i = 0; i < kRow; ++i) {
            inputs[i] = std::uniform_int_distribution<int>(0, 1)(rng)
                            ? kScores[std::uniform_int_distribution<int>(0, 9)(rng)]
                            : std::uniform_real_distribution<float>(-200, 200)(rng);
          }
          scores = inputs;
          code->score_row(params, b, h, q, kv0, kRow, scores.data());
          for (int32_t i = 0; i < kRow; ++i) {
            const EvalPoint point{b, h, q, fj::wrap_add(kv0, i), params};
            const bool want = evaluate_mask(variant, point);
            const float want_score = evaluate_score(variant, inputs[i], point);
            if (visible[i] != (want ? 1 : 0) || !same_float(scores[i], want_score)) {
              FAIL(variant.name << " b " << b << " h " << h << " q " << q << " kv " << point.kv
                                << ": mask " << int{visible[i]} << " want " << want << ", score("
                                << float_text(inputs[i]) << ") " << float_text(scores[i])
                                << " want " << float_text(want_score));
            }
            ++elements;
          }
        }
      }
    }
  }
  return elements;
}

TEST_CASE("host code of every standard mask, score and variant equals the evaluator",
          "[host_code]") {
  std::mt19937 rng(20250611);
  std::vector<Variant> variants;
  std::vector<std::string> score_names;
  for (const dsl::Decl& decl : standard().decls) {
    if (decl.kind == dsl::DeclKind::Score) score_names.push_back(decl.name);
  }
  for (const dsl::Decl& decl : standard().decls) {
    if (decl.kind == dsl::DeclKind::Variant) variants.push_back(lower(decl.name));
    if (decl.kind != dsl::DeclKind::Mask) continue;
    variants.push_back(lower(decl.name));
    for (const std::string& score : score_names)
      variants.push_back(lower(decl.name, score));
  }
  REQUIRE(variants.size() >= 30);  // 9 masks, each alone and with 2 scores, 6 variants
  for (const Variant& variant : variants) {
    const HostParams params = random_standard_params(rng, variant);
    CHECK(compare_with_evaluator(variant, &params.params(), rng) == 4 * 4 * 14 * 9 * 48);
  }
  // Without parameters: every scalar 0 and every read 0.
  for (const char* name : {"sliding", "document", "prefix_ranges", "causal_alibi"}) {
    CHECK(compare_with_evaluator(lower(name), nullptr, rng) > 0);
  }
}

// The standard scores in double precision. float32 rounds each step to within half an ulp
// (2^-24 relative) and tanh is within a few ulp, so:
//  - softcap, cap * tanh(s / cap): relative error at most 8 * 2^-24 (the division's error
//    passes through tanh scaled by at most 1, then tanh's ulps and the product's), plus 1e-37
//    absolute for results in the subnormal range;
//  - alibi, s - slope * (q - kv): the distance converts to float (2^-24 relative), the product
//    and the difference round once each: at most 4 * 2^-24 * (|s| + |slope * (q - kv)|).
TEST_CASE("the standard scores agree with a double-precision recomputation", "[host_code]") {
  std::mt19937 rng(77);
  const auto softcap = compile(lower("causal", "softcap"));
  const auto alibi = compile(lower("causal", "alibi"));
  const Variant alibi_variant = lower("causal", "alibi");
  const double ulp = std::ldexp(1.0, -24);
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  HostArray& slopes = arrays[3];
  slopes.rows = 8;
  for (int i = 0; i < 8; ++i)
    slopes.bits.push_back(fj::float_to_bits(std::exp2(-1.0f - static_cast<float>(i))));
  const HostParams params(alibi_variant, scalars, std::move(arrays));
  int64_t checked = 0;
  for (int i = 0; i < 20000; ++i) {
    const float s = std::uniform_int_distribution<int>(0, 1)(rng)
                        ? std::uniform_real_distribution<float>(-200, 200)(rng)
                        : std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                                     std::uniform_int_distribution<int>(-140, 120)(rng));
    const int32_t h = std::uniform_int_distribution<int32_t>(0, 7)(rng);
    const int32_t q = std::uniform_int_distribution<int32_t>(0, 1 << 20)(rng);
    const int32_t kv = std::uniform_int_distribution<int32_t>(-(1 << 20), q)(rng);

    const double cap = 50.0;
    const double want_softcap = cap * std::tanh(double{s} / cap);
    const double got_softcap = softcap->score(&params.params(), s, 0, h, q, kv);
    INFO("softcap(" << float_text(s) << ") = " << got_softcap << ", double " << want_softcap);
    REQUIRE(std::abs(got_softcap - want_softcap) <= 8 * ulp * std::abs(want_softcap) + 1e-37);

    const double slope = fj::bits_to_float(params.arrays()[3].bits[h]);
    const double distance = static_cast<double>(q) - kv;
    const double want_alibi = double{s} - slope * distance;
    const double got_alibi = alibi->score(&params.params(), s, 0, h, q, kv);
    INFO("alibi(" << float_text(s) << ") h " << h << " q " << q << " kv " << kv << " = "
                  << got_alibi << ", double " << want_alibi);
    REQUIRE(std::abs(got_alibi - want_alibi) <=
            4 * ulp * (std::abs(double{s}) + std::abs(slope * distance)));
    checked += 2;
  }
  CHECK(checked == 40000);
}

// ---------------------------------------------------------------------------------------------
// Edge cases, against values written from docs/language.md §5 (not computed by fj_ops.cuh).

ir::Expr q_var() {
  return ir::Var::make(ir::Variable::Q);
}
ir::Expr kv_var() {
  return ir::Var::make(ir::Variable::KV);
}
ir::Expr score_var() {
  return ir::Var::make(ir::Variable::Score);
}

Variant mask_variant(ir::Expr mask) {
  Variant variant;
  variant.name = variant.mask_name = "edge";
  variant.mask = std::move(mask);
  return variant;
}

// Exact integer results, in int64 then wrapped: Python's floor division and modulo, 0 for a
// zero divisor.
int32_t wrap(int64_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x));
}
int64_t python_div(int64_t a, int64_t b) {
  const int64_t quotient = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? quotient - 1 : quotient;
}

// An int operation of q and kv and its exact result (in int64, then wrapped).
struct IntOp {
  const char* name;
  ir::Expr e;
  int64_t (*exact)(int64_t, int64_t);
};

// Param `want` (slot 0), which the masks compare each operation with.
ir::Expr want_param() {
  return ir::Param::make(ir::Type::Int, 0, "want");
}

// Each operation at every pair of `values`: the mask `op == want` must be true with the exact
// value and false with any other, in host code (native or the evaluator).
void check_int_ops(std::span<const IntOp> ops, std::span<const int32_t> values, bool native) {
  for (const IntOp& op : ops) {
    const auto code = compile(mask_variant(ir::EQ::make(op.e, want_param())), native);
    for (const int32_t a : values) {
      for (const int32_t b : values) {
        fj::MaskParams params{};
        params.scalar[0] = wrap(op.exact(a, b));
        INFO(op.name << (native ? "" : " (evaluator)") << " with q " << a << ", kv " << b
                     << ": want " << params.scalar[0]);
        REQUIRE(code->mask(&params, 0, 0, a, b));
        params.scalar[0] = wrap(int64_t{params.scalar[0]} + 1);
        REQUIRE_FALSE(code->mask(&params, 0, 0, a, b));
      }
    }
  }
}

// Whether operation `op` of q == a and kv == b gives `result` in host code.
bool gives(ir::Expr op, int32_t a, int32_t b, int32_t result) {
  const auto code = compile(mask_variant(ir::EQ::make(std::move(op), want_param())));
  fj::MaskParams params{};
  params.scalar[0] = result;
  return code->mask(&params, 0, 0, a, b);
}

TEST_CASE("host code computes the integer operations exactly at the int32 edges", "[host_code]") {
  const IntOp ops[] = {
      {"q + kv", ir::Add::make(q_var(), kv_var()), [](int64_t a, int64_t b) { return a + b; }},
      {"q - kv", ir::Sub::make(q_var(), kv_var()), [](int64_t a, int64_t b) { return a - b; }},
      {"q * kv", ir::Mul::make(q_var(), kv_var()), [](int64_t a, int64_t b) { return a * b; }},
      {"q / kv", ir::Div::make(q_var(), kv_var()),
       [](int64_t a, int64_t b) { return b == 0 ? 0 : python_div(a, b); }},
      {"q % kv", ir::Mod::make(q_var(), kv_var()),
       [](int64_t a, int64_t b) { return b == 0 ? 0 : a - python_div(a, b) * b; }},
      {"min", ir::Min::make(q_var(), kv_var()),
       [](int64_t a, int64_t b) { return std::min(a, b); }},
      {"max", ir::Max::make(q_var(), kv_var()),
       [](int64_t a, int64_t b) { return std::max(a, b); }},
      {"abs(q - kv)", ir::Abs::make(ir::Sub::make(q_var(), kv_var())),
       [](int64_t a, int64_t b) { return int64_t{std::abs(int64_t{wrap(a - b)})}; }},
      {"-(q)", ir::Neg::make(q_var()), [](int64_t a, int64_t) { return -a; }},
      {"q / 8192", ir::Div::make(q_var(), ir::IntImm::make(8192)),
       [](int64_t a, int64_t) { return python_div(a, 8192); }},
      {"q % -3", ir::Mod::make(q_var(), ir::IntImm::make(-3)),
       [](int64_t a, int64_t) { return a - python_div(a, -3) * -3; }},
  };
  const int32_t values[] = {kMin, kMin + 1, -8193, -7, -2, -1, 0, 1, 2, 7, 8192, kMax - 1, kMax};
  check_int_ops(ops, values, true);
  // The documented examples (§5.1).
  const ir::Expr div = ir::Div::make(q_var(), kv_var());
  const ir::Expr mod = ir::Mod::make(q_var(), kv_var());
  CHECK(gives(div, -7, 2, -4));
  CHECK(gives(div, 7, -2, -4));
  CHECK(gives(div, 5, 0, 0));
  CHECK(gives(div, kMin, -1, kMin));
  CHECK(gives(mod, -7, 2, 1));
  CHECK(gives(mod, 7, -2, -1));
  CHECK(gives(mod, 5, 0, 0));
  CHECK(gives(mod, kMin, -1, 0));
}

TEST_CASE("host code and the evaluator compute the bitwise operations at the int32 edges",
          "[host_code]") {
  // References from docs/language.md §5.1, in int64: &, |, ^ of sign-extended values are the
  // sign-extended results; a shift by a count in [0, 31] is a product or a floor quotient by
  // 2^count; any other count shifts every bit out (0, or the sign for >>).
  const IntOp ops[] = {
      {"q & kv", ir::BitAnd::make(q_var(), kv_var()), [](int64_t a, int64_t b) { return a & b; }},
      {"q | kv", ir::BitOr::make(q_var(), kv_var()), [](int64_t a, int64_t b) { return a | b; }},
      {"q ^ kv", ir::BitXor::make(q_var(), kv_var()), [](int64_t a, int64_t b) { return a ^ b; }},
      {"~q", ir::BitNot::make(q_var()), [](int64_t a, int64_t) { return -a - 1; }},
      {"q << kv", ir::Shl::make(q_var(), kv_var()),
       [](int64_t a, int64_t b) { return b >= 0 && b <= 31 ? a * (int64_t{1} << b) : 0; }},
      {"q >> kv", ir::Shr::make(q_var(), kv_var()),
       [](int64_t a, int64_t b) {
         return b >= 0 && b <= 31 ? python_div(a, int64_t{1} << b) : (a < 0 ? -1 : 0);
       }},
      {"q >> 31", ir::Shr::make(q_var(), ir::IntImm::make(31)),
       [](int64_t a, int64_t) { return python_div(a, int64_t{1} << 31); }},
      {"q << 32", ir::Shl::make(q_var(), ir::IntImm::make(32)),
       [](int64_t, int64_t) { return int64_t{0}; }},
  };
  const int32_t values[] = {kMin, kMin + 1, -8193, -33, -32, -7, -2, -1,   0,        1,
                            2,    7,        30,    31,  32,  33, 64, 8192, kMax - 1, kMax};
  check_int_ops(ops, values, true);
  check_int_ops(ops, values, false);
  // The documented examples (§5.1).
  const ir::Expr shl = ir::Shl::make(q_var(), kv_var());
  const ir::Expr shr = ir::Shr::make(q_var(), kv_var());
  CHECK(gives(shl, 1, 31, kMin));
  CHECK(gives(shl, 3, 31, kMin));
  CHECK(gives(shl, 1, 32, 0));
  CHECK(gives(shl, 1, -1, 0));
  CHECK(gives(shl, -1, kMin, 0));
  CHECK(gives(shr, -7, 1, -4));
  CHECK(gives(shr, kMin, 31, -1));
  CHECK(gives(shr, kMin, 32, -1));
  CHECK(gives(shr, kMax, 32, 0));
  CHECK(gives(shr, -5, -1, -1));
  CHECK(gives(shr, 5, -1, 0));
  CHECK(gives(shr, 5, kMin, 0));
}

TEST_CASE("host code computes the float operations as the language defines them", "[host_code]") {
  // score(op) of the score and param t (slot 0), against the values of docs/language.md §5.2.
  const ir::Expr t = ir::Param::make(ir::Type::Float, 0, "t");
  struct Case {
    ir::ExprKind kind;
    float a, b, want;
  };
  const Case cases[] = {
      {ir::ExprKind::Div, 3.0f, 0.0f, 0.0f},       {ir::ExprKind::Div, kNaN, -0.0f, 0.0f},
      {ir::ExprKind::Div, kInf, 0.0f, 0.0f},       {ir::ExprKind::Div, 1.0f, -2.0f, -0.5f},
      {ir::ExprKind::Mod, 5.5f, 2.0f, 1.5f},       {ir::ExprKind::Mod, -5.5f, 2.0f, 0.5f},
      {ir::ExprKind::Mod, 5.5f, -2.0f, -0.5f},     {ir::ExprKind::Mod, -5.0f, kInf, kInf},
      {ir::ExprKind::Mod, kInf, 2.0f, kNaN},       {ir::ExprKind::Mod, 7.0f, 0.0f, 0.0f},
      {ir::ExprKind::Mod, 4.0f, -2.0f, -0.0f},     {ir::ExprKind::Max, kNaN, 2.0f, 2.0f},
      {ir::ExprKind::Min, 2.0f, kNaN, 2.0f},       {ir::ExprKind::Min, kNaN, kNaN, kNaN},
      {ir::ExprKind::Min, 0.0f, -0.0f, -0.0f},     {ir::ExprKind::Min, -0.0f, 0.0f, -0.0f},
      {ir::ExprKind::Max, -0.0f, 0.0f, 0.0f},      {ir::ExprKind::Max, 0.0f, -0.0f, 0.0f},
      {ir::ExprKind::Sub, 0.0f, 0.0f, 0.0f},       {ir::ExprKind::Mul, 1e38f, 10.0f, kInf},
      {ir::ExprKind::Add, 1e-45f, 1e-45f, 3e-45f},  // subnormals are kept
  };
  for (const Case& c : cases) {
    const ir::Expr operands[] = {score_var(), t};
    Variant variant = mask_variant(ir::BoolImm::make(true));
    variant.score = ir::make_operation(c.kind, operands);
    const auto code = compile(variant);
    fj::MaskParams params{};
    params.scalar[0] = fj::float_to_bits(c.b);
    const float got = code->score(&params, c.a, 0, 0, 0, 0);
    INFO(ir::kind_name(c.kind) << "(" << float_text(c.a) << ", " << float_text(c.b)
                               << ") = " << float_text(got) << ", want " << float_text(c.want));
    CHECK(same_float(got, c.want));
  }

  struct Unary {
    ir::Expr (*make)(ir::Expr);
    float a, want;
  };
  const Unary unary[] = {
      {ir::Sqrt::make, -0.0f, -0.0f},  {ir::Sqrt::make, -1.0f, kNaN},
      {ir::Log::make, 0.0f, -kInf},    {ir::Log::make, -1.0f, kNaN},
      {ir::Floor::make, -2.5f, -3.0f}, {ir::Ceil::make, 2.1f, 3.0f},
      {ir::Abs::make, -0.0f, 0.0f},    {ir::Neg::make, 0.0f, -0.0f},
      {ir::Tanh::make, kInf, 1.0f},    {ir::Sigmoid::make, -kInf, 0.0f},
      {ir::Exp::make, 100.0f, kInf},   {ir::Exp2::make, 3.0f, 8.0f},
  };
  for (const Unary& u : unary) {
    Variant variant = mask_variant(ir::BoolImm::make(true));
    variant.score = u.make(score_var());
    const auto code = compile(variant);
    const float got = code->score(nullptr, u.a, 0, 0, 0, 0);
    INFO(ir::to_string(variant.score) << " at " << float_text(u.a) << " = " << float_text(got)
                                      << ", want " << float_text(u.want));
    CHECK(same_float(got, u.want));
  }

  // int(x): truncation, NaN to 0, saturation; float(n): nearest, ties to even.
  const ir::Expr want = ir::Param::make(ir::Type::Int, 1, "want");
  const auto to_int = compile(mask_variant(ir::EQ::make(ir::ToInt::make(t), want)));
  const std::pair<float, int32_t> conversions[] = {
      {-2.7f, -2},  {3.9f, 3},     {1e10f, kMax},         {-1e10f, kMin},         {kNaN, 0},
      {kInf, kMax}, {-kInf, kMin}, {2147483648.0f, kMax}, {-2147483648.0f, kMin}, {-0.5f, 0}};
  for (const auto& [x, result] : conversions) {
    fj::MaskParams params{};
    params.scalar[0] = fj::float_to_bits(x);
    params.scalar[1] = result;
    INFO("int(" << float_text(x) << ") == " << result);
    CHECK(to_int->mask(&params, 0, 0, 0, 0));
  }
  Variant to_float = mask_variant(ir::BoolImm::make(true));
  to_float.score = ir::ToFloat::make(q_var());
  const auto code = compile(to_float);
  CHECK(code->score(nullptr, 0.0f, 0, 0, 16777217, 0) == 16777216.0f);
  CHECK(code->score(nullptr, 0.0f, 0, 0, kMin, 0) == -2147483648.0f);
}

TEST_CASE("host code rows: empty, wrapping past INT_MAX, without parameters", "[host_code]") {
  const auto causal = compile(lower("causal"));
  std::vector<uint8_t> out(8, 7);
  causal->mask_row(nullptr, 0, 0, 0, 0, 0, out.data());
  causal->mask_row(nullptr, 0, 0, 0, 0, -5, out.data());
  CHECK(out == std::vector<uint8_t>(8, 7));
  // Keys kMax - 1, kMax, kMin, kMin + 1 for the query kMin: visible where q >= kv.
  causal->mask_row(nullptr, 0, 0, kMin, kMax - 1, 4, out.data());
  CHECK(std::vector<uint8_t>(out.begin(), out.begin() + 5) == std::vector<uint8_t>{0, 0, 1, 0, 7});

  // No parameters: window 0 shows nothing of the sliding window; prefix_len reads 0.
  const auto sliding = compile(lower("sliding"));
  sliding->mask_row(nullptr, 0, 0, 10, 0, 8, out.data());
  CHECK(out == std::vector<uint8_t>(8, 0));
  const auto prefix_lm = compile(lower("prefix_lm"));
  prefix_lm->mask_row(nullptr, 3, 0, 4, 0, 8, out.data());
  CHECK(out == std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 0, 0});

  // A variant without a mask shows nothing, and one without a score keeps the scores.
  const auto empty = compile(Variant{});
  out.assign(8, 7);
  empty->mask_row(nullptr, 0, 0, 0, 0, 8, out.data());
  CHECK(out == std::vector<uint8_t>(8, 0));
  std::vector<float> scores = {1.0f, kNaN, -0.0f};
  causal->score_row(nullptr, 0, 0, 0, 0, 3, scores.data());
  CHECK(scores[0] == 1.0f);
  CHECK(std::isnan(scores[1]));
  CHECK(std::signbit(scores[2]));

  // A row of 16k keys: the vectorised loop's tail and body agree with the evaluator.
  const Variant chunked = lower("chunked");
  const auto native = compile(chunked);
  const auto evaluator = compile(chunked, false);
  std::vector<uint8_t> got(16411), want(16411);
  for (const int32_t q : {0, 8191, 8192, 16000, 16410}) {
    native->mask_row(nullptr, 0, 0, q, -3, 16411, got.data());
    evaluator->mask_row(nullptr, 0, 0, q, -3, 16411, want.data());
    CHECK(got == want);
  }
}

TEST_CASE("host code reports the first out-of-range read as the evaluator does", "[host_code]") {
  const Variant document = lower("document");
  const Variant prefix_ranges = lower("prefix_ranges");
  for (const Variant* variant : {&document, &prefix_ranges}) {
    std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
    std::vector<HostArray> arrays(fj::kMaxArrayParams);
    for (const RuntimeParam& param : variant->arrays) {
      arrays[param.slot].rows = 2;
      arrays[param.slot].cols = param.dims.size() == 2 ? 6 : 1;
      arrays[param.slot].bits.assign(static_cast<size_t>(arrays[param.slot].cols) * 2, 1);
    }
    const HostParams host(*variant, scalars, std::move(arrays));
    const auto native = compile(*variant);
    const auto evaluator = compile(*variant, false);
    for (const int32_t b : {0, 1, 2, -1}) {
      for (const int32_t q : {0, 3, 9, -4}) {
        fj::MaskParams got = host.params(), want = host.params();
        int32_t got_report[4] = {}, want_report[4] = {};
        for (fj::ArrayParam& array : got.array)
          array.bad_index = got_report;
        for (fj::ArrayParam& array : want.array)
          array.bad_index = want_report;
        std::vector<uint8_t> got_mask(12), want_mask(12);
        native->mask_row(&got, b, 0, q, -2, 12, got_mask.data());
        evaluator->mask_row(&want, b, 0, q, -2, 12, want_mask.data());
        INFO(variant->name << " b " << b << " q " << q);
        CHECK(got_mask == want_mask);
        CHECK(std::vector<int32_t>(got_report, got_report + 4) ==
              std::vector<int32_t>(want_report, want_report + 4));
        CHECK(got_report[0] == 1);  // every row starts at key -2
      }
    }
  }
  // The document mask's first read out of range: doc[b, q] with q = 9 past 6 columns.
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  const int doc = 2;  // doc's array slot in standard.mask
  REQUIRE(document.arrays[doc].name == "doc");
  arrays[doc] = {1, 6, std::vector<int32_t>(6, 0)};
  const HostParams host(document, {}, std::move(arrays));
  fj::MaskParams params = host.params();
  int32_t report[4] = {};
  params.array[doc].bad_index = report;
  compile(document)->mask_row(&params, 0, 0, 9, 0, 10, std::vector<uint8_t>(10).data());
  CHECK(std::vector<int32_t>(report, report + 4) == std::vector<int32_t>{1, doc, 0, 9});
}

TEST_CASE("host code compiles and runs on several threads at once", "[host_code]") {
  // Catch's assertions are not thread-safe: the threads only compile, call and count.
  std::vector<Variant> variants;
  for (const char* name : {"sliding", "document", "gemma2_local", "causal_alibi"})
    variants.push_back(lower(name));
  std::vector<std::shared_ptr<const HostCode>> codes(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&codes, &variants, i] {
      auto code = make_host_code(variants[i]);
      if (code.ok()) codes[i] = *code;
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  threads.clear();
  std::mt19937 rng(5);
  std::vector<HostParams> params;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(codes[i] != nullptr);
    params.push_back(random_standard_params(rng, variants[i]));
  }
  std::vector<int> mismatches(16, 0);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      const int i = t % 4;
      const Variant& variant = variants[i];
      std::vector<uint8_t> visible(300);
      std::vector<float> scores(300);
      for (int32_t q = t; q < 300; q += 7) {
        codes[i]->mask_row(&params[i].params(), 1, 2, q, 0, 300, visible.data());
        for (int32_t kv = 0; kv < 300; ++kv)
          scores[kv] = static_cast<float>(kv - q) * 0.75f;
        codes[i]->score_row(&params[i].params(), 1, 2, q, 0, 300, scores.data());
        for (int32_t kv = 0; kv < 300; ++kv) {
          const EvalPoint point{1, 2, q, kv, &params[i].params()};
          const float want = evaluate_score(variant, static_cast<float>(kv - q) * 0.75f, point);
          mismatches[t] +=
              visible[kv] != evaluate_mask(variant, point) || !same_float(scores[kv], want);
        }
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  CHECK(mismatches == std::vector<int>(16, 0));
}

}  // namespace
}  // namespace flexjit
