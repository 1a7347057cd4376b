// HostCode::classify and HostCode::kv_range compiled by LLVM (compiler/codegen/llvm/
// native_analysis.cpp) against MaskAnalysis, which interprets the same interval program: the
// same tile classes and kv ranges, exactly, for the standard masks and variants and for random
// masks, over random tiles near 0 and the int32 ends, negative queries, and parameters whose
// arrays come with their summaries and without. The evaluator-backed HostCode is MaskAnalysis
// itself, checked once.
//
// A longer random campaign:
//   FLEXJIT_HOST_ANALYSIS_MASKS=20000 FLEXJIT_HOST_CODE_SEED=7 flexjit_tests_compiler
//     "[host_code][analysis]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../compiler/analysis/analysis.h"
#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/dsl/frontend.h"
#include "random_ir.h"
#include "random_launch.h"
#include "standard_masks.h"

namespace flexjit {
namespace {

using ir::Type;
using namespace testing;

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

const dsl::Module& standard() {
  return testing::standard_masks();
}

std::shared_ptr<const HostCode> native_code(const Variant& variant) {
  Result<std::shared_ptr<const HostCode>> code = make_host_code(variant);
  if (!code.ok()) FAIL(code.error().message << "\n" << code.error().log);
  // Without LLVM the comparison is of MaskAnalysis with itself, still a valid test.
  CHECK((*code)->native() == FLEXJIT_WITH_LLVM);
  return *code;
}

// Counts the comparisons made, and fails on the first difference.
struct Comparer {
  int64_t classes = 0, ranges = 0;
  int64_t decided = 0;  // tiles classified Empty or Full

  void tile(const HostCode& code, const MaskAnalysis& analysis, const Tile& tile,
            const fj::MaskParams* params) {
    const TileClass want = analysis.classify(tile, params);
    const TileClass got = code.classify(tile, params);
    if (got != want) {
      FAIL("classify " << tile_text(tile) << ": compiled " << tile_class_name(got)
                       << ", MaskAnalysis " << tile_class_name(want));
    }
    ++classes;
    decided += want != TileClass::Partial;
    const KvRange want_range = analysis.kv_range(tile.b, tile.h, tile.q0, tile.q1, params);
    const KvRange got_range = code.kv_range(tile.b, tile.h, tile.q0, tile.q1, params);
    if (got_range.lo != want_range.lo || got_range.hi != want_range.hi) {
      FAIL("kv_range " << tile_text(tile) << ": compiled [" << got_range.lo << ", " << got_range.hi
                       << "), MaskAnalysis [" << want_range.lo << ", " << want_range.hi << ")");
    }
    ++ranges;
  }

  // Tiles of a launch: with the arrays' summaries, without them, and without any parameters.
  void launch(const HostCode& code, const MaskAnalysis& analysis, const HostParams& host,
              RandomExpr& random, int tiles) {
    fj::MaskParams plain = host.params();
    for (fj::ArrayParam& array : plain.array)
      array.summary = nullptr;
    for (int t = 0; t < tiles; ++t) {
      const Tile tile = random_tile(random);
      INFO(tile_text(tile));
      this->tile(code, analysis, tile, &host.params());
      this->tile(code, analysis, tile, &plain);
      if (t % 8 == 0) this->tile(code, analysis, tile, nullptr);
    }
  }
};

// Tiles of the standard masks where they are meant to run: aligned tiles of a grid near 0.
void grid_tiles(Comparer& comparer, const HostCode& code, const MaskAnalysis& analysis,
                const HostParams& host, RandomExpr& random) {
  const int32_t size = 16 << random.pick(4);
  for (int32_t q0 = 0; q0 < 1024; q0 += size) {
    for (int32_t k0 = 0; k0 < 1024; k0 += size) {
      comparer.tile(code, analysis,
                    Tile{random.pick(2), random.pick(8), q0, q0 + size, k0, k0 + size},
                    &host.params());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tests

TEST_CASE("compiled classify and kv_range equal MaskAnalysis on the standard masks",
          "[host_code][analysis]") {
  RandomExpr random(20261122, {});
  Comparer comparer;
  const dsl::Module& module = standard();
  std::vector<std::string> names;
  for (const dsl::Decl& decl : module.decls) {
    if (decl.kind == dsl::DeclKind::Mask || decl.kind == dsl::DeclKind::Variant)
      names.push_back(decl.name);
  }
  REQUIRE(names.size() >= 10);
  for (const std::string& name : names) {
    INFO(name);
    Result<Variant> variant = lower_mask(module, name);
    REQUIRE(variant.ok());
    const std::shared_ptr<const HostCode> code = native_code(*variant);
    const MaskAnalysis analysis(*variant);
    for (int launch = 0; launch < 12; ++launch) {
      const HostParams host = standard_params(random, *variant, launch % 2 == 0);
      grid_tiles(comparer, *code, analysis, host, random);
      comparer.launch(*code, analysis, host, random, 300);
    }
  }
  INFO(comparer.classes << " classes, " << comparer.ranges << " kv ranges");
  CHECK(comparer.classes >= 100000);
  CHECK(comparer.decided >= comparer.classes / 4);
}

TEST_CASE("compiled classify and kv_range equal MaskAnalysis on random masks",
          "[host_code][analysis]") {
  const RandomExprOptions options = mask_options(5);
  const int masks = env_int("FLEXJIT_HOST_ANALYSIS_MASKS", 250);
  RandomExpr random(static_cast<uint32_t>(env_int("FLEXJIT_HOST_CODE_SEED", 20261123)), options);
  Comparer comparer;
  int64_t narrowed = 0;
  for (int m = 0; m < masks; ++m) {
    // Now and then a deep one, whose frame is large.
    const ir::Expr made = random.make(Type::Bool, m % 25 == 0 ? 8 : 1 + random.pick(5));
    const Variant variant = random_variant(m % 2 ? ir::run_passes(made) : made, options);
    INFO(ir::to_string(variant.mask));
    const std::shared_ptr<const HostCode> code = native_code(variant);
    const MaskAnalysis analysis(variant);
    narrowed += ir::to_string(variant.mask).find("||") != std::string::npos;
    for (int launch = 0; launch < 3; ++launch) {
      const HostParams host = random_params(random, variant);
      comparer.launch(*code, analysis, host, random, 40);
    }
  }
  INFO(comparer.classes << " classes, " << comparer.ranges << " kv ranges, " << narrowed
                        << " masks with ||");
  CHECK(comparer.classes >= 200 * masks);
  CHECK(comparer.decided >= comparer.classes / 10);
  CHECK(narrowed >= masks / 10);
}

// A tile class only tells whether the mask's interval lies at 0, at 1 or spans both, so an
// operation computed with a slightly wrong end hides in most masks. `e < threshold`, with the
// threshold at each end of e's interval over the tile (by the interpreter) and just past it,
// is Empty or Full exactly when the compiled ends are those ends: every Int and Float
// expression's interval is compared end for end (and a Float's NaN flag).
TEST_CASE("compiled intervals of random expressions end where MaskAnalysis' do",
          "[host_code][analysis]") {
  RandomExprOptions options = mask_options(5);
  options.mask_shapes = 0;
  RandomExpr random(static_cast<uint32_t>(env_int("FLEXJIT_HOST_CODE_SEED", 20261125)), options);
  constexpr int kThreshold = 5;  // a scalar slot the expressions do not read
  const int expressions = env_int("FLEXJIT_HOST_ANALYSIS_MASKS", 250) * 3 / 2;
  Comparer comparer;
  // One operation of positions, params and constants: its corner cases (a divisor range
  // reaching 0, products at the int32 ends) meet the thresholds far more often than inside
  // random trees.
  const auto operand = [&]() -> ir::Expr {
    switch (random.pick(6)) {
      case 0:
        return q();
      case 1:
        return kv();
      case 2:
        return ir::Sub::make(q(), kv());
      case 3:
        return ir::Param::make(Type::Int, random.pick(2), "p");
      case 4:
        return ir::Sub::make(kv(), num(random_int(random)));
      default:
        return num(random_int(random));
    }
  };
  const auto operation = [&]() {
    const ir::Expr a = operand(), b = operand();
    switch (random.pick(7)) {
      case 0:
        return ir::Div::make(a, b);
      case 1:
        return ir::Mod::make(a, b);
      case 2:
        return ir::Mul::make(a, b);
      case 3:
        return ir::Add::make(a, b);
      case 4:
        return ir::Sub::make(a, b);
      case 5:
        return ir::Abs::make(a);
      default:
        return ir::Neg::make(a);
    }
  };
  for (int e = 0; e < expressions; ++e) {
    const Type type = e % 3 == 2 ? Type::Float : Type::Int;
    const ir::Expr made = e % 3 == 1 ? operation() : random.make(type, 1 + random.pick(4));
    const ir::Expr value = e % 2 ? ir::run_passes(made) : made;
    const Variant variant = random_variant(
        ir::LT::make(value, ir::Param::make(type, kThreshold, "threshold")), options);
    INFO(ir::to_string(variant.mask));
    const IntervalProgram program = plan_mask(value).program;
    const std::shared_ptr<const HostCode> code = native_code(variant);
    const MaskAnalysis analysis(variant);
    for (int launch = 0; launch < 2; ++launch) {
      const HostParams host = random_params(random, variant);
      for (int t = 0; t < 24; ++t) {
        const Tile tile = random_tile(random);
        if (tile.q0 >= tile.q1 || tile.k0 >= tile.k1) continue;
        const TileBox box{tile, fj::Interval::range(tile.q0, int64_t{tile.q1} - 1),
                          fj::Interval::range(tile.k0, int64_t{tile.k1} - 1), host.params()};
        const ir::IntervalValue interval = program.value(box);
        std::vector<int32_t> thresholds;
        if (type == Type::Float) {
          const float infinity = std::numeric_limits<float>::infinity();
          for (const float end : {interval.floats.lo, interval.floats.hi}) {
            thresholds.push_back(fj::float_to_bits(end));
            thresholds.push_back(fj::float_to_bits(std::nextafter(end, infinity)));
          }
        } else {
          for (const int64_t end : {interval.ints.lo, interval.ints.hi}) {
            thresholds.push_back(static_cast<int32_t>(end));
            thresholds.push_back(static_cast<int32_t>(std::min<int64_t>(end + 1, kMax)));
          }
        }
        for (const int32_t threshold : thresholds) {
          fj::MaskParams params = host.params();
          params.scalar[kThreshold] = threshold;
          comparer.tile(*code, analysis, tile, &params);
        }
      }
    }
  }
  INFO(comparer.classes << " classes");
  CHECK(comparer.classes >= 100 * expressions);
  CHECK(comparer.decided >= comparer.classes / 4);
}

TEST_CASE("the evaluator's classify and kv_range are MaskAnalysis'", "[host_code][analysis]") {
  Result<Variant> variant = lower_mask(standard(), "rswa");
  REQUIRE(variant.ok());
  Result<std::shared_ptr<const HostCode>> code = make_host_code(*variant, false);
  REQUIRE(code.ok());
  REQUIRE_FALSE((*code)->native());
  const MaskAnalysis analysis(*variant);
  RandomExpr random(20261124, {});
  Comparer comparer;
  for (int launch = 0; launch < 4; ++launch) {
    const HostParams host = standard_params(random, *variant, true);
    comparer.launch(**code, analysis, host, random, 200);
  }
  CHECK(comparer.classes >= 1600);
}

}  // namespace
}  // namespace flexjit
