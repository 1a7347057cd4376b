// Host code (host_code.h) against the IR evaluator on random expressions of the whole language
// (random_ir.h): every node kind over ints, floats and bools, params at int32 extremes, reads
// of arrays of random extents (empty ones among them) at any index, scores that are NaN,
// infinite, signed zeros or subnormal, rows of keys that wrap past INT_MAX. The masks must
// agree bit for bit, the scores too (any NaN matching any NaN: payloads are not part of the
// semantics). The expressions are compiled as lowered (no passes) most of the time, so that
// LLVM meets constant operands, x - x and the like that the passes would have removed.
//
// A longer campaign: FLEXJIT_HOST_CODE_VARIANTS=5000 FLEXJIT_HOST_CODE_SEED=7
//   flexjit_tests_compiler "[host_code][fuzz]"
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/host_params.h"
#include "random_ir.h"

namespace flexjit {
namespace {

using ir::Type;
using namespace testing;

// The campaign's size and seed, from the environment (all read here).
struct Campaign {
  int variants = 150;
  uint32_t seed = 20250611;
};

Campaign campaign() {
  Campaign result;
  if (const char* variants = std::getenv("FLEXJIT_HOST_CODE_VARIANTS")) {
    result.variants = std::max(1, std::atoi(variants));
  }
  if (const char* seed = std::getenv("FLEXJIT_HOST_CODE_SEED")) {
    result.seed = static_cast<uint32_t>(std::strtoul(seed, nullptr, 10));
  }
  return result;
}

RandomExprOptions options(bool score) {
  RandomExprOptions result;
  result.scalars = {{Type::Int, 0, "window"}, {Type::Int, 1, "p"},  {Type::Float, 2, "t"},
                    {Type::Bool, 3, "c"},     {Type::Bool, 4, "d"}, {Type::Int, 5, "chunk"}};
  result.arrays = {{Type::Int, 0, "doc", {"b", "kv"}},    {Type::Int, 1, "pos", {"kv"}},
                   {Type::Float, 2, "fdoc", {"b", "kv"}}, {Type::Float, 3, "fpos", {"q"}},
                   {Type::Int, 4, "prefix", {"b"}},       {Type::Int, 5, "ranges", {"b", "r"}},
                   {Type::Float, 6, "slopes", {"h"}},     {Type::Int, 7, "marks", {"kv", "x"}}};
  result.score = score;
  result.mask_shapes = score ? 1 : 4;
  return result;
}

int32_t random_int(RandomExpr& random) {
  static constexpr int32_t kValues[] = {0, 1, -1, 3, 64, 8192, kMin, kMin + 1, kMax, kMax - 1};
  switch (random.pick(4)) {
    case 0:
      return kValues[random.pick(10)];
    case 1:
      return static_cast<int32_t>(random.rng()());
    default:
      return random.pick(60) - 10;
  }
}

float random_float(RandomExpr& random) {
  const std::vector<float>& constants = float_constants();
  switch (random.pick(4)) {
    case 0:
      return constants[random.pick(static_cast<int>(constants.size()))];
    case 1:
      return static_cast<float>(random.pick(17) - 8) / 4.0f;
    case 2:  // any bit pattern: subnormals, NaNs with payloads, huge values
      return fj::bits_to_float(static_cast<int32_t>(random.rng()()));
    default:
      return std::uniform_real_distribution<float>(-100.0f, 100.0f)(random.rng());
  }
}

int32_t random_bits(RandomExpr& random, Type type) {
  return type == Type::Float ? fj::float_to_bits(random_float(random)) : random_int(random);
}

dsl::Type dsl_type(Type type) {
  return type == Type::Float  ? dsl::Type::Float
         : type == Type::Bool ? dsl::Type::Bool
                              : dsl::Type::Int;
}

// Random parameters: scalars of every kind, arrays of small random extents (sometimes empty)
// holding values that index and compare interestingly.
HostParams random_params(RandomExpr& random, const Variant& variant,
                         const RandomExprOptions& declared) {
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  for (const ScalarDecl& scalar : declared.scalars) {
    scalars[scalar.slot] = scalar.type == Type::Bool ? random.pick(2) * (1 + random.pick(3))
                                                     : random_bits(random, scalar.type);
  }
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  for (const ArrayDecl& decl : declared.arrays) {
    HostArray& array = arrays[decl.slot];
    array.rows = random.pick(8) == 0 ? 0 : 1 + random.pick(40);
    array.cols = decl.dims.size() == 2 ? (random.pick(8) == 0 ? 0 : 1 + random.pick(40)) : 1;
    array.bits.resize(static_cast<size_t>(array.rows) * array.cols);
    for (int32_t& bits : array.bits)
      bits = random.pick(3) ? random.pick(5) - 1 : random_bits(random, decl.type);
    if (decl.type == Type::Float && random.pick(2)) {
      for (int32_t& bits : array.bits)
        bits = fj::float_to_bits(static_cast<float>(bits % 7) * 0.5f);
    }
  }
  return HostParams(variant, std::move(scalars), std::move(arrays));
}

Variant variant_of(ir::Expr mask, ir::Expr score) {
  Variant variant;
  variant.name = variant.mask_name = "random";
  variant.score_name = "random_score";
  variant.mask = std::move(mask);
  variant.score = std::move(score);
  const RandomExprOptions declared = options(true);
  for (const ScalarDecl& scalar : declared.scalars)
    variant.scalars.push_back({scalar.name, dsl_type(scalar.type), scalar.slot, {}});
  for (const ArrayDecl& array : declared.arrays)
    variant.arrays.push_back({array.name, dsl_type(array.type), array.slot, array.dims});
  return variant;
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

int32_t random_position(RandomExpr& random) {
  static constexpr int32_t kExtremes[] = {kMin, kMin + 1, kMax, kMax - 20, -1};
  switch (random.pick(5)) {
    case 0:
      return kExtremes[random.pick(5)];
    case 1:
      return static_cast<int32_t>(random.rng()());
    default:
      return random.pick(80) - 10;
  }
}

TEST_CASE("host code equals the evaluator on random expressions", "[host_code][fuzz]") {
  const Campaign settings = campaign();
  RandomExpr masks(settings.seed, options(false));
  RandomExpr scores(settings.seed + 1, options(true));
  int64_t elements = 0, native = 0;
  for (int v = 0; v < settings.variants; ++v) {
    ir::Expr mask = masks.make(Type::Bool, 1 + masks.pick(6));
    // A third of the scores are an Int expression made visible as float(e).
    ir::Expr score = scores.pick(3) == 0
                         ? ir::ToFloat::make(scores.make(Type::Int, 1 + scores.pick(5)))
                         : scores.make(Type::Float, 1 + scores.pick(6));
    if (masks.pick(4) == 0) {
      mask = ir::run_passes(mask);
      score = ir::run_passes(score);
    }
    const Variant variant = variant_of(mask, score);
    INFO("mask:  " << ir::to_string(variant.mask));
    INFO("score: " << ir::to_string(variant.score));
    auto compiled = make_host_code(variant);
    INFO((compiled.ok() ? "" : compiled.error().message + "\n" + compiled.error().log));
    REQUIRE(compiled.ok());
    const HostCode& code = **compiled;
    native += code.native();

    for (int launch = 0; launch < 3; ++launch) {
      const HostParams host = random_params(masks, variant, options(true));
      const fj::MaskParams* params = masks.pick(10) == 0 ? nullptr : &host.params();
      for (int row = 0; row < 4; ++row) {
        const int32_t b = masks.pick(4) ? masks.pick(4) : random_int(masks);
        const int32_t h = masks.pick(4) ? masks.pick(5) - 1 : random_int(masks);
        const int32_t q = random_position(masks);
        const int32_t kv0 = random_position(masks);
        const int32_t n = 1 + masks.pick(40);
        std::vector<uint8_t> visible(n, 2);
        code.mask_row(params, b, h, q, kv0, n, visible.data());
        std::vector<float> got(n);
        for (float& s : got)
          s = random_float(scores);
        const std::vector<float> inputs = got;
        code.score_row(params, b, h, q, kv0, n, got.data());
        for (int32_t i = 0; i < n; ++i) {
          const EvalPoint point{b, h, q, fj::wrap_add(kv0, i), params};
          INFO("b " << b << " h " << h << " q " << q << " kv " << point.kv
                    << (params ? "" : " (no params)"));
          REQUIRE(visible[i] == (evaluate_mask(variant, point) ? 1 : 0));
          const float want = evaluate_score(variant, inputs[i], point);
          INFO("score in " << float_text(inputs[i]) << ": got " << float_text(got[i]) << ", want "
                           << float_text(want));
          REQUIRE(same_float(got[i], want));
          ++elements;
        }
      }
    }
  }
#if FLEXJIT_WITH_LLVM
  CHECK(native == settings.variants);
#else
  CHECK(native == 0);
#endif
  CHECK(elements > 0);
}

}  // namespace
}  // namespace flexjit
