// Tile classification: sound on random expressions (checked by brute force), exact on the
// standard causal and sliding masks. Constant folding is checked on the same expressions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"

namespace flexjit {
namespace {

using ir::Expr;

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr int kParams = 3;  // slots 0, 1 Int; slot 2 Bool

// Random well-typed expressions over every node kind, variables, params, and small and
// extreme constants.
class RandomExpr {
 public:
  explicit RandomExpr(uint32_t seed) : rng_(seed) {}

  Expr boolean(int depth) {
    if (depth == 0 || pick(6) == 0) {
      return pick(2) ? ir::BoolImm::make(pick(2) == 1) : ir::Param::make(ir::Type::Bool, 2, "f");
    }
    switch (pick(6)) {
      case 0: {
        static constexpr ir::ExprKind kComparisons[] = {ir::ExprKind::EQ, ir::ExprKind::NE,
                                                        ir::ExprKind::LT, ir::ExprKind::LE,
                                                        ir::ExprKind::GT, ir::ExprKind::GE};
        return operation(kComparisons[pick(6)], {integer(depth - 1), integer(depth - 1)});
      }
      case 1:
        return operation(pick(2) ? ir::ExprKind::EQ : ir::ExprKind::NE,
                         {boolean(depth - 1), boolean(depth - 1)});
      case 2:
        return ir::Not::make(boolean(depth - 1));
      case 3:
        return ir::Select::make(boolean(depth - 1), boolean(depth - 1), boolean(depth - 1));
      default:
        return operation(pick(2) ? ir::ExprKind::And : ir::ExprKind::Or,
                         {boolean(depth - 1), boolean(depth - 1)});
    }
  }

  Expr integer(int depth) {
    if (depth == 0 || pick(5) == 0) return integer_leaf();
    static constexpr ir::ExprKind kBinary[] = {
        ir::ExprKind::Add, ir::ExprKind::Sub, ir::ExprKind::Mul, ir::ExprKind::Div,
        ir::ExprKind::Mod, ir::ExprKind::Min, ir::ExprKind::Max};
    switch (pick(10)) {
      case 0:
        return ir::Abs::make(integer(depth - 1));
      case 1:
        return ir::Neg::make(integer(depth - 1));
      case 2:
        return ir::Select::make(boolean(depth - 1), integer(depth - 1), integer(depth - 1));
      default:
        return operation(kBinary[pick(7)], {integer(depth - 1), integer(depth - 1)});
    }
  }

  int32_t param_value() {
    static constexpr int32_t kValues[] = {0, 1, -1, 3, 64, kMin, kMax};
    return pick(3) ? static_cast<int32_t>(pick(21)) - 10 : kValues[pick(7)];
  }

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  std::mt19937& rng() { return rng_; }

 private:
  Expr integer_leaf() {
    static constexpr ir::Variable kVariables[] = {ir::Variable::B, ir::Variable::H, ir::Variable::Q,
                                                  ir::Variable::KV};
    static constexpr int32_t kExtremes[] = {kMin, kMin + 1, kMax, kMax - 1, 1 << 16, -(1 << 16)};
    switch (pick(6)) {
      case 0:
      case 1:
        return ir::Var::make(kVariables[2 + pick(2)]);
      case 2:
        return ir::Var::make(kVariables[pick(2)]);
      case 3:
        return ir::Param::make(ir::Type::Int, pick(2), pick(2) ? "p0" : "p1");
      case 4:
        return ir::IntImm::make(kExtremes[pick(6)]);
      default:
        return ir::IntImm::make(pick(11) - 5);
    }
  }

  Expr operation(ir::ExprKind kind, std::vector<Expr> operands) {
    return ir::make_operation(kind, operands);
  }

  std::mt19937 rng_;
};

struct Truth {
  bool any_true = false;
  bool any_false = false;
};

// The parameter block with `scalars` in the first slots.
fj::MaskParams block_of(std::span<const int32_t> scalars) {
  fj::MaskParams block{};
  std::copy(scalars.begin(), scalars.end(), block.scalar);
  return block;
}

Truth brute_force(const Variant& mask, const Tile& tile, std::span<const int32_t> scalars) {
  const fj::MaskParams params = block_of(scalars);
  Truth truth;
  for (int64_t qv = tile.q0; qv < tile.q1; ++qv) {
    for (int64_t kvv = tile.k0; kvv < tile.k1; ++kvv) {
      const bool visible = evaluate_mask(
          mask, {tile.b, tile.h, static_cast<int32_t>(qv), static_cast<int32_t>(kvv), &params});
      (visible ? truth.any_true : truth.any_false) = true;
    }
  }
  return truth;
}

// A small tile with its origin near 0 or near an end of int32.
Tile random_tile(RandomExpr& random) {
  const auto origin = [&](int size) -> int32_t {
    switch (random.pick(4)) {
      case 0:
        return kMin + random.pick(4);
      case 1:
        return kMax - size + 1 - random.pick(4);
      default:
        return random.pick(81) - 40;
    }
  };
  const int q_size = 1 + random.pick(6);
  const int kv_size = 1 + random.pick(6);
  Tile tile;
  tile.b = random.pick(3);
  tile.h = random.pick(3) - 1;
  tile.q0 = origin(q_size);
  tile.q1 = tile.q0 + q_size;
  tile.k0 = origin(kv_size);
  tile.k1 = tile.k0 + kv_size;
  return tile;
}

TEST_CASE("classification is sound on random expressions", "[classify][fuzz]") {
  RandomExpr random(20240601);
  int tiles = 0, empty = 0, full = 0;
  for (int expression = 0; expression < 3000; ++expression) {
    Variant mask;
    mask.name = "random";
    mask.mask = random.boolean(1 + random.pick(5));
    for (int round = 0; round < 4; ++round) {
      const int32_t params[kParams] = {random.param_value(), random.param_value(), random.pick(2)};
      for (int t = 0; t < 5; ++t) {
        const Tile tile = random_tile(random);
        const fj::MaskParams block = block_of(params);
        const TileClass tile_class = classify_tile(mask, tile, &block);
        const Truth truth = brute_force(mask, tile, params);
        INFO(ir::to_string(mask.mask)
             << "\n q [" << tile.q0 << ", " << tile.q1 << ") kv [" << tile.k0 << ", " << tile.k1
             << ") b " << tile.b << " h " << tile.h << " params " << params[0] << ", " << params[1]
             << ", " << params[2] << ": " << tile_class_name(tile_class));
        REQUIRE_FALSE((tile_class == TileClass::Empty && truth.any_true));
        REQUIRE_FALSE((tile_class == TileClass::Full && truth.any_false));
        ++tiles;
        empty += tile_class == TileClass::Empty;
        full += tile_class == TileClass::Full;
      }
    }
  }
  CHECK(tiles == 60000);
  // The fuzzer must exercise both decided outcomes, not only Partial.
  CHECK(empty > tiles / 10);
  CHECK(full > tiles / 10);
}

TEST_CASE("constant folding preserves meaning on random expressions", "[fold][fuzz]") {
  RandomExpr random(77);
  for (int expression = 0; expression < 3000; ++expression) {
    Variant original;
    original.mask = random.boolean(1 + random.pick(5));
    Variant folded;
    folded.mask = ir::fold_constants(original.mask);
    const int32_t params[kParams] = {random.param_value(), random.param_value(), random.pick(2)};
    const Tile tile = random_tile(random);
    for (int32_t qv = tile.q0; qv < tile.q1; ++qv) {
      const fj::MaskParams block = block_of(params);
      const EvalPoint point{tile.b, tile.h, qv, tile.k0, &block};
      INFO(ir::to_string(original.mask) << "\nfolded: " << ir::to_string(folded.mask));
      REQUIRE(evaluate_mask(original, point) == evaluate_mask(folded, point));
    }
  }
}

TEST_CASE("empty ranges are Empty", "[classify]") {
  Variant everything;
  everything.mask = ir::BoolImm::make(true);
  CHECK(classify_tile(everything, {0, 0, 0, 16, 0, 16}, nullptr) == TileClass::Full);
  CHECK(classify_tile(everything, {0, 0, 5, 5, 0, 16}, nullptr) == TileClass::Empty);
  CHECK(classify_tile(everything, {0, 0, 0, 16, 9, 3}, nullptr) == TileClass::Empty);
  CHECK(std::string(tile_class_name(TileClass::Partial)) == "partial");
}

// ---------------------------------------------------------------------------------------------
// Exactness on the standard masks

Variant lower(std::string_view name) {
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check(
      {"standard.mask",
       "param window: int\nmask causal = q >= kv\nmask sliding = causal && q - kv < window\n"},
      diagnostics);
  REQUIRE_FALSE(dsl::has_errors(diagnostics));
  Result<Variant> mask = lower_mask(module, name);
  REQUIRE(mask.ok());
  return std::move(mask).value();
}

// Checks every tile of the given sizes whose origins lie on grids with steps `q_step` and
// `kv_step`: tiles on, above, below and across both diagonals, with negative positions, and
// near INT32_MAX. Returns how many were truly all-false or all-true.
int check_exact(const Variant& mask, int32_t window, int32_t q_size, int32_t kv_size,
                int32_t q_step, int32_t kv_step) {
  const int32_t params[] = {window};
  std::vector<int32_t> q_origins, kv_origins;
  for (int32_t o = -96; o <= 1200; o += q_step)
    q_origins.push_back(o);
  for (int32_t o = -80; o <= 1200; o += kv_step)
    kv_origins.push_back(o);
  q_origins.push_back(kMax - q_size + 1);
  kv_origins.push_back(kMax - kv_size + 1);
  kv_origins.push_back(kMax - kv_size - 70);
  int uniform_tiles = 0;
  for (const int32_t q0 : q_origins) {
    for (const int32_t k0 : kv_origins) {
      const Tile tile{0, 0, q0, q0 + q_size, k0, k0 + kv_size};
      const Truth truth = brute_force(mask, tile, params);
      const TileClass want = !truth.any_true    ? TileClass::Empty
                             : !truth.any_false ? TileClass::Full
                                                : TileClass::Partial;
      const fj::MaskParams block = block_of(params);
      if (classify_tile(mask, tile, &block) != want) {
        FAIL_CHECK(mask.name << " window " << window << " q [" << tile.q0 << ", " << tile.q1
                             << ") kv [" << tile.k0 << ", " << tile.k1 << "): want "
                             << tile_class_name(want));
      }
      uniform_tiles += want != TileClass::Partial;
    }
  }
  return uniform_tiles;
}

TEST_CASE("causal and sliding are classified exactly", "[classify][exact]") {
  const Variant causal = lower("causal");
  const Variant sliding = lower("sliding");
  int uniform_tiles = 0;
  for (const int32_t q_size : {1, 5, 16}) {
    for (const int32_t kv_size : {1, 4, 16}) {
      uniform_tiles += check_exact(causal, 0, q_size, kv_size, 23, 29);
      for (const int32_t window : {1, 2, 3, 17, 64, 1000}) {
        uniform_tiles += check_exact(sliding, window, q_size, kv_size, 23, 29);
      }
    }
  }
  // Large tiles, where a window fits inside one tile or spans several.
  uniform_tiles += check_exact(causal, 0, 64, 64, 61, 67);
  for (const int32_t window : {1, 17, 100, 1000}) {
    uniform_tiles += check_exact(sliding, window, 64, 64, 61, 67);
  }
  CHECK(uniform_tiles > 30000);
}

}  // namespace
}  // namespace flexjit

namespace flexjit {
namespace {

// The key tile width the code generator picks for the Hopper kernel at head dim 128
// (kWideKeyTiles, docs/hopper.md#tile-width) from the mask's structure: 128 keys where they
// compute little more than 64 (causal-shaped masks, arrays of zeros standing for runtime data),
// 64 where bands or periodic columns would turn Empty halves into computed tiles, where the
// structure is in a runtime parameter, and where the element part loads per element (a
// key-uniform score's loads aside).
TEST_CASE("wide key tiles follow the mask's structure", "[emit][classify]") {
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check(
      {"tiles.mask",
       "const window: int = 1024\n"
       "const stride: int = 128\n"
       "param w: int\n"
       "param doc: int[b, kv]\n"
       "param global_token: int[kv]\n"
       "param bias: float[h, d]\n"
       "mask causal = q >= kv\n"
       "mask modular = causal && (kv - q) % 3 != 1\n"
       "mask document = causal && doc[b, q] == doc[b, kv]\n"
       "mask chunked = causal && q / 8192 == kv / 8192\n"
       "mask sliding = causal && q - kv < window\n"
       "mask runtime_window = causal && q - kv < w\n"
       "mask fixed = causal && (q / stride == kv / stride || kv % stride >= stride - 8)\n"
       "mask longformer = abs(q - kv) <= 256 || global_token[kv] != 0\n"
       "mask image2d = abs(q / 128 - kv / 128) <= 7 && abs(q % 128 - kv % 128) <= 7\n"
       "mask strided = causal && (q - kv < stride || (q - kv) % stride == 0)\n"
       "mask dilated = causal && q - kv < 1024 && (q - kv) % 2 == 0\n"
       "param head_window: int[h]\n"
       "mask head_windows = causal && q - kv < head_window[h]\n"
       "param blocks: int[qb, kb]\n"
       "mask block_table = abs(q / 64 - kv / 64) <= 1 || blocks[q / 64, kv / 64] != 0\n"
       "param bits: int[r, c]\n"
       "mask random_bits = causal && (q == kv || (bits[q, kv / 32] >> (kv % 32)) & 1 == 1)\n"
       "score biased = score + bias[h, clamp(q - kv, 0, 255)]\n"
       "score periodic = score + bias[h, (q - kv) % 256]\n"
       "variant causal_biased = causal with biased\n"
       "variant causal_periodic = causal with periodic\n"},
      diagnostics);
  REQUIRE_FALSE(dsl::has_errors(diagnostics));
  const auto wide = [&](const char* name) {
    Result<Variant> variant = lower_mask(module, name);
    REQUIRE(variant.ok());
    return emit_cuda_variant(*variant, "V").find("kWideKeyTiles = true;") != std::string::npos;
  };
  CHECK(wide("causal"));
  CHECK(wide("modular"));
  CHECK(wide("document"));
  CHECK(wide("chunked"));
  CHECK_FALSE(wide("sliding"));
  CHECK_FALSE(wide("runtime_window"));
  CHECK_FALSE(wide("fixed"));
  CHECK_FALSE(wide("longformer"));
  CHECK_FALSE(wide("image2d"));
  // A score's loads count unless its term is key-uniform away from a band (score_kv_uniform).
  CHECK(wide("causal_biased"));
  CHECK_FALSE(wide("causal_periodic"));

  // Head dim 64 (kNarrowKeyTilesHd64): 128 keys unless they compute over 1/4 more on both
  // probes (at 0 and at 1024: a runtime window of 0 is no model's), or over 1/32 more where the
  // element part loads.
  const auto narrow_hd64 = [&](const char* name) {
    Result<Variant> variant = lower_mask(module, name);
    REQUIRE(variant.ok());
    return emit_cuda_variant(*variant, "V").find("kNarrowKeyTilesHd64 = true;") !=
           std::string::npos;
  };
  CHECK(narrow_hd64("fixed"));
  CHECK(narrow_hd64("strided"));
  CHECK(narrow_hd64("image2d"));
  CHECK(narrow_hd64("block_table"));
  CHECK_FALSE(narrow_hd64("causal"));
  CHECK_FALSE(narrow_hd64("dilated"));
  CHECK_FALSE(narrow_hd64("sliding"));
  CHECK_FALSE(narrow_hd64("longformer"));
  CHECK_FALSE(narrow_hd64("runtime_window"));
  CHECK_FALSE(narrow_hd64("head_windows"));
  CHECK_FALSE(narrow_hd64("random_bits"));
  CHECK_FALSE(narrow_hd64("causal_periodic"));

  // The probe itself: causal's computed elements at 64 and 128 keys per tile, 64 queries.
  Result<Variant> causal = lower_mask(module, "causal");
  REQUIRE(causal.ok());
  const MaskAnalysis analysis(*causal);
  // Row r of 64 queries reaches key 64 r + 63: 64-key tiles 0..r, 128-key tiles 0..r/2.
  int64_t narrow = 0, wide_elements = 0;
  for (int64_t r = 0; r < 16; ++r) {
    narrow += 64 * 64 * (r + 1);
    wide_elements += 64 * 128 * (r / 2 + 1);
  }
  CHECK(analysis.computed_elements(1024, 64, 64, nullptr) == narrow);
  CHECK(analysis.computed_elements(1024, 64, 128, nullptr) == wide_elements);
}

}  // namespace
}  // namespace flexjit
