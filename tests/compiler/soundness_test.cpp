// Soundness of the block-sparsity analysis (docs/architecture.md#tile-analysis) against brute
// force, on random masks of the whole language (random_ir.h): ints, floats, selects, any/all
// chains, comparisons of kv with linear forms in q, and reads of arrays indexed by positions, whose
// contents are random (monotone document ids among them) and whose summaries come from HostParams.
// Parameters take int32 extremes; tiles are small and lie near 0, at medium and negative positions
// and near the ends of int32.
//
// - classify_tile: no Empty tile holds a visible pair, no Full tile a masked one, with the
//   arrays' summaries and without them;
// - kv_range: no visible (q, kv) with kv >= 0 outside [lo, hi), checked on a window around
//   both ends of the range and at far keys.
//
// Each region of 16 x 16 (or 8 x 64) positions is evaluated once; every tile inside it is then
// checked in O(1) from prefix sums, which keeps a million tile checks within seconds. A longer
// campaign:
//   FLEXJIT_SOUNDNESS_TILES=20000000 FLEXJIT_SOUNDNESS_SEED=7 flexjit_tests_compiler [soundness]
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"
#include "random_ir.h"

namespace flexjit {
namespace {

using ir::Type;
using namespace testing;

// The test's environment variables, all read here: the number of tiles to check (default
// 1,000,000) and the random seed.
struct Campaign {
  int64_t tiles = 1000000;
  uint32_t seed = 20250301;
  bool chosen = false;  // set by the environment: report the counts
};

Campaign campaign() {
  Campaign result;
  if (const char* tiles = std::getenv("FLEXJIT_SOUNDNESS_TILES")) {
    result.tiles = std::max<int64_t>(1, std::strtoll(tiles, nullptr, 10));
    result.chosen = true;
  }
  if (const char* seed = std::getenv("FLEXJIT_SOUNDNESS_SEED")) {
    result.seed = static_cast<uint32_t>(std::strtoul(seed, nullptr, 10));
    result.chosen = true;
  }
  return result;
}

// The runtime parameters the random masks read: every kind of array a mask file can declare,
// summarised along rows or columns or not at all.
RandomExprOptions mask_options() {
  RandomExprOptions options;
  options.scalars = {{Type::Int, 0, "window"}, {Type::Int, 1, "p"},  {Type::Float, 2, "t"},
                     {Type::Bool, 3, "c"},     {Type::Bool, 4, "d"}, {Type::Int, 5, "chunk"}};
  options.arrays = {{Type::Int, 0, "doc", {"b", "kv"}},    {Type::Int, 1, "pos", {"kv"}},
                    {Type::Float, 2, "fdoc", {"b", "kv"}}, {Type::Float, 3, "fpos", {"q"}},
                    {Type::Int, 4, "prefix", {"b"}},       {Type::Int, 5, "ranges", {"b", "r"}},
                    {Type::Float, 6, "slopes", {"h"}},     {Type::Int, 7, "marks", {"kv", "x"}}};
  options.score = false;
  options.mask_shapes = 5;
  return options;
}

dsl::Type dsl_type(Type type) {
  return type == Type::Float  ? dsl::Type::Float
         : type == Type::Bool ? dsl::Type::Bool
                              : dsl::Type::Int;
}

// A variant of `mask` declaring the parameters of `options`, so that HostParams knows which
// arrays to summarise along which axis.
Variant variant_of(const ir::Expr& mask, const RandomExprOptions& options) {
  Variant variant;
  variant.name = variant.mask_name = "random";
  variant.mask = mask;
  for (const ScalarDecl& scalar : options.scalars) {
    variant.scalars.push_back({scalar.name, dsl_type(scalar.type), scalar.slot, {}});
  }
  for (const ArrayDecl& array : options.arrays) {
    variant.arrays.push_back({array.name, dsl_type(array.type), array.slot, array.dims});
  }
  return variant;
}

// ---------------------------------------------------------------------------------------------
// Random parameters

int32_t random_int_param(RandomExpr& random) {
  static constexpr int32_t kValues[] = {100, 1024, 8192, kMin, kMin + 1, kMax, kMax - 1, -1};
  switch (random.pick(4)) {
    case 0:
      return random.pick(11) - 5;
    case 1:
      return kValues[random.pick(8)];
    default:
      return random.pick(50) - 2;  // comparable with the positions of the tiles near 0
  }
}

float random_float(RandomExpr& random) {
  const std::vector<float>& constants = float_constants();
  switch (random.pick(3)) {
    case 0:
      return constants[random.pick(static_cast<int>(constants.size()))];
    case 1:
      return static_cast<float>(random.pick(17) - 8) / 4.0f;
    default:
      return std::uniform_real_distribution<float>(-100.0f, 100.0f)(random.rng());
  }
}

int32_t random_scalar(RandomExpr& random, Type type) {
  switch (type) {
    case Type::Bool:
      return random.pick(2) * (1 + random.pick(3));  // any nonzero value is true
    case Type::Float:
      return fj::float_to_bits(random_float(random));
    case Type::Int:
      break;
  }
  return random_int_param(random);
}

int32_t random_extent(RandomExpr& random, const std::string& dim) {
  if (dim == "q" || dim == "kv") {
    static constexpr int32_t kLengths[] = {0, 1, 5, 16, 17, 40, 64, 100, 300, 4100};
    return random.pick(3) ? 30 + random.pick(60) : kLengths[random.pick(10)];
  }
  if (random.pick(16) == 0) return 0;
  return dim == "r" ? 2 * (1 + random.pick(3)) : 1 + random.pick(3);
}

// Contents along one line: monotone document ids, small values, positions, extremes.
std::vector<int32_t> random_line(RandomExpr& random, Type type, int32_t length) {
  std::vector<int32_t> values(length);
  const int pattern = random.pick(5);
  int32_t id = random.pick(4) ? random.pick(3) : random_int_param(random);
  const int run = 1 + random.pick(24);
  for (int32_t i = 0; i < length; ++i) {
    int32_t value = 0;
    switch (pattern) {
      case 0:
      case 1:  // document ids: runs of equal ids, rising, sometimes by more than one
        if (i > 0 && random.pick(run) == 0) id = fj::wrap_add(id, 1 + (random.pick(4) == 0));
        value = id;
        break;
      case 2:
        value = random.pick(7) - 3;
        break;
      case 3:  // a position-like value, around i
        value = i / (1 + run % 4) + random.pick(3) - 1;
        break;
      default:
        value = random_int_param(random);
        break;
    }
    values[i] = type == Type::Float
                    ? fj::float_to_bits(pattern == 4 ? random_float(random)
                                                     : static_cast<float>(value) * 0.5f)
                    : value;
  }
  return values;
}

HostArray random_array(RandomExpr& random, const ArrayDecl& decl) {
  HostArray array;
  array.rows = random_extent(random, decl.dims[0]);
  array.cols = decl.dims.size() == 2 ? random_extent(random, decl.dims[1]) : 1;
  array.bits.resize(static_cast<size_t>(array.rows) * array.cols);
  const bool along_rows = decl.dims[0] == "q" || decl.dims[0] == "kv";
  const int32_t lines = along_rows ? array.cols : array.rows;
  const int32_t length = along_rows ? array.rows : array.cols;
  for (int32_t line = 0; line < lines; ++line) {
    const std::vector<int32_t> values = random_line(random, decl.type, length);
    for (int32_t i = 0; i < length; ++i) {
      const size_t index = along_rows ? static_cast<size_t>(i) * array.cols + line
                                      : static_cast<size_t>(line) * array.cols + i;
      array.bits[index] = values[i];
    }
  }
  return array;
}

// One launch's parameters: through HostParams (with summaries) and the same without them.
struct Launch {
  HostParams host;
  fj::MaskParams plain{};
};

Launch random_launch(RandomExpr& random, const Variant& variant, const RandomExprOptions& options) {
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  for (const ScalarDecl& scalar : options.scalars)
    scalars[scalar.slot] = random_scalar(random, scalar.type);
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  for (const ArrayDecl& array : options.arrays)
    arrays[array.slot] = random_array(random, array);
  Launch launch{HostParams(variant, std::move(scalars), std::move(arrays))};
  launch.plain = launch.host.params();
  for (fj::ArrayParam& array : launch.plain.array)
    array.summary = nullptr;
  return launch;
}

std::string describe(const Launch& launch, const RandomExprOptions& options) {
  std::ostringstream out;
  const fj::MaskParams& params = launch.host.params();
  for (const ScalarDecl& scalar : options.scalars) {
    out << scalar.name << " = ";
    if (scalar.type == Type::Float) {
      out << ir::float_text(fj::bits_to_float(params.scalar[scalar.slot]));
    } else {
      out << params.scalar[scalar.slot];
    }
    out << "\n";
  }
  for (const ArrayDecl& decl : options.arrays) {
    const HostArray& array = launch.host.arrays()[decl.slot];
    out << decl.name << " [" << array.rows << " x " << array.cols << "]"
        << (params.array[decl.slot].summary != nullptr ? " summarised" : "") << ":";
    for (size_t i = 0; i < array.bits.size() && i < 96; ++i) {
      out << " ";
      if (decl.type == Type::Float) {
        out << ir::float_text(fj::bits_to_float(array.bits[i]));
      } else {
        out << array.bits[i];
      }
    }
    out << (array.bits.size() > 96 ? " ...\n" : "\n");
  }
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// Regions

// A region is brute-forced once and holds the tiles checked in it: most are 16 x 16 positions
// with tiles of up to 8 x 8; one in four is 8 x 64 with tiles as wide, whose key ranges span
// whole blocks of the array summaries.
struct RegionShape {
  int rows, cols;            // queries, keys
  int tile_rows, tile_cols;  // the largest tile
};
constexpr RegionShape kSquare = {16, 16, 8, 8};
constexpr RegionShape kWide = {8, 64, 8, 64};
constexpr int kLargestRegion = 64;

int32_t clamp_origin(int64_t origin) {
  return static_cast<int32_t>(std::clamp<int64_t>(origin, kMin, int64_t{kMax} - kLargestRegion));
}

int32_t random_query_origin(RandomExpr& random) {
  switch (random.pick(8)) {
    case 0:
      return random.pick(6000);
    case 1:
      return -1 - random.pick(200);
    case 2:
      return kMin + random.pick(8);
    case 3:
      return kMax - kLargestRegion - random.pick(8);
    default:
      return random.pick(56) - 8;
  }
}

int32_t random_key_origin(RandomExpr& random, int32_t q0) {
  switch (random.pick(10)) {
    case 0:
      return random.pick(6000);
    case 1:
      return kMin + random.pick(8);
    case 2:
      return kMax - kLargestRegion - random.pick(8);
    case 3:
    case 4:
      return random.pick(48) - 8;
    default:  // around the diagonal
      return clamp_origin(int64_t{q0} + random.pick(40) - 28);
  }
}

// The mask over queries [q0, q0 + rows) and keys [k0, k0 + cols), with prefix sums of the
// visible pairs.
class Region {
 public:
  Region(const Variant& truth, const fj::MaskParams& params, int32_t b, int32_t h, int32_t q0,
         int32_t k0, RegionShape shape)
      : b(b),
        h(h),
        q0(q0),
        k0(k0),
        shape(shape),
        visible_(static_cast<size_t>(shape.rows) * shape.cols),
        sums_(static_cast<size_t>(shape.rows + 1) * (shape.cols + 1), 0) {
    for (int i = 0; i < shape.rows; ++i) {
      for (int j = 0; j < shape.cols; ++j) {
        const bool visible = evaluate_mask(truth, {b, h, q0 + i, k0 + j, &params});
        visible_[i * shape.cols + j] = visible;
        sum(i + 1, j + 1) = sum(i, j + 1) + sum(i + 1, j) - sum(i, j) + visible;
      }
    }
  }

  // Visible pairs among rows [i0, i1) and columns [j0, j1) of the region.
  int visible(int i0, int i1, int j0, int j1) const {
    return at(i1, j1) - at(i0, j1) - at(i1, j0) + at(i0, j0);
  }
  bool visible_at(int i, int j) const { return visible_[i * shape.cols + j]; }

  const int32_t b, h, q0, k0;
  const RegionShape shape;

 private:
  int& sum(int i, int j) { return sums_[i * (shape.cols + 1) + j]; }
  int at(int i, int j) const { return sums_[i * (shape.cols + 1) + j]; }

  std::vector<bool> visible_;
  std::vector<int> sums_;
};

struct Counts {
  int64_t expressions = 0;
  int64_t tiles = 0;            // tiles checked with the summaries
  int64_t plain_tiles = 0;      // the same tiles checked again without summaries
  int64_t empty = 0, full = 0;  // classes found with the summaries
  int64_t sharpened = 0;        // decided with the summaries, Partial without
  int64_t kv_ranges = 0;        // kv_range calls checked
  int64_t bounded = 0;          // of which narrower than [0, INT32_MAX)
  int64_t kv_pairs = 0;         // (q, kv) pairs checked outside the ranges
};

std::string tile_text(const Tile& tile) {
  std::ostringstream out;
  out << "b " << tile.b << " h " << tile.h << " q [" << tile.q0 << ", " << tile.q1 << ") kv ["
      << tile.k0 << ", " << tile.k1 << ")";
  return out.str();
}

// What a failure report shows after the failing tile or range: the mask and the launch.
using Context = std::function<std::string()>;

// Checks the class of random tiles inside `region`.
void check_tiles(const Variant& analysed, const Region& region, const Launch& launch,
                 bool reads_summaries, RandomExpr& random, int count, Counts& counts,
                 const Context& context) {
  for (int t = 0; t < count; ++t) {
    const RegionShape& shape = region.shape;
    const int rows = 1 + random.pick(shape.tile_rows), cols = 1 + random.pick(shape.tile_cols);
    const int i0 = random.pick(shape.rows - rows + 1), j0 = random.pick(shape.cols - cols + 1);
    const Tile tile{region.b,       region.h,
                    region.q0 + i0, region.q0 + i0 + rows,
                    region.k0 + j0, region.k0 + j0 + cols};
    const int visible = region.visible(i0, i0 + rows, j0, j0 + cols);
    const auto check = [&](const fj::MaskParams& params, const char* how) {
      const TileClass tile_class = classify_tile(analysed, tile, &params);
      if ((tile_class == TileClass::Empty && visible > 0) ||
          (tile_class == TileClass::Full && visible < rows * cols)) {
        FAIL("unsound tile class " << tile_class_name(tile_class) << " (" << how << ") for "
                                   << tile_text(tile) << ": " << visible << " of " << rows * cols
                                   << " pairs visible\n"
                                   << context());
      }
      return tile_class;
    };
    const TileClass with_summaries = check(launch.host.params(), "with summaries");
    ++counts.tiles;
    counts.empty += with_summaries == TileClass::Empty;
    counts.full += with_summaries == TileClass::Full;
    if (reads_summaries) {
      const TileClass without = check(launch.plain, "without summaries");
      ++counts.plain_tiles;
      counts.sharpened += with_summaries != TileClass::Partial && without == TileClass::Partial;
    }
  }
}

// Checks kv_range for a random range of the region's queries: no visible key outside it.
void check_kv_range(const Variant& truth, const Variant& analysed, const Region& region,
                    const fj::MaskParams& params, RandomExpr& random, Counts& counts,
                    const Context& context) {
  const int rows = 1 + random.pick(region.shape.tile_rows);
  const int i0 = random.pick(region.shape.rows - rows + 1);
  const int32_t q0 = region.q0 + i0, q1 = q0 + rows;
  const KvRange range = kv_range(analysed, region.b, region.h, q0, q1, &params);
  ++counts.kv_ranges;
  counts.bounded += range.lo > 0 || range.hi < kMax;
  // Keys are below seq_len <= INT32_MAX, so kv == INT32_MAX is never one: the exclusive int32
  // end of a KvRange cannot name it, and the contract is checked on [0, INT32_MAX).
  const auto outside = [&](int64_t key) {
    return key >= 0 && key < kMax && (range.empty() || key < range.lo || key >= range.hi);
  };
  const auto fail = [&](int32_t qv, int64_t key) {
    FAIL("kv_range(b " << region.b << ", h " << region.h << ", q [" << q0 << ", " << q1 << ")) = ["
                       << range.lo << ", " << range.hi << ") but q " << qv << " sees kv " << key
                       << "\n"
                       << context());
  };
  // The region's own keys, already evaluated.
  for (int j = 0; j < region.shape.cols; ++j) {
    if (!outside(int64_t{region.k0} + j)) continue;
    for (int i = i0; i < i0 + rows; ++i) {
      ++counts.kv_pairs;
      if (region.visible_at(i, j)) fail(region.q0 + i, int64_t{region.k0} + j);
    }
  }
  // Keys next to both ends of the range and far away.
  std::vector<int64_t> keys;
  const int64_t lo = range.empty() ? 0 : range.lo, hi = range.empty() ? 0 : range.hi;
  for (int d = 1; d <= 6; ++d) {
    keys.push_back(lo - d);
    keys.push_back(hi - 1 + d);
  }
  for (const int64_t key :
       {int64_t{0}, int64_t{1}, int64_t{kMax} - 1, int64_t{kMax} - 2, hi + random.pick(1 << 20),
        lo / 2, int64_t{q0}, int64_t{q1}, int64_t{random.pick(kMax)}}) {
    keys.push_back(key);
  }
  for (const int64_t key : keys) {
    if (!outside(key)) continue;
    if (key >= region.k0 && key < int64_t{region.k0} + region.shape.cols) continue;  // done
    for (int32_t qv = q0; qv < q1; ++qv) {
      ++counts.kv_pairs;
      const EvalPoint point{region.b, region.h, qv, static_cast<int32_t>(key), &params};
      if (evaluate_mask(truth, point)) fail(qv, key);
    }
  }
}

TEST_CASE("tile classes and kv ranges of random masks are sound", "[soundness]") {
  const Campaign settings = campaign();
  const RandomExprOptions options = mask_options();
  RandomExpr random(settings.seed, options);
  Counts counts;
  while (counts.tiles < settings.tiles) {
    const ir::Expr mask = random.make(Type::Bool, 1 + random.pick(5));
    const Variant truth = variant_of(mask, options);
    // Half the masks are analysed as built, half after the passes (as lowering leaves them).
    const Variant analysed =
        counts.expressions % 2 ? variant_of(ir::run_passes(mask), options) : truth;
    ++counts.expressions;
    bool reads_summaries = false;
    for (const ArrayDecl& array : options.arrays) {
      reads_summaries |= ir::uses_array(mask, array.slot) &&
                         summary_axis(truth.arrays[array.slot]) != fj::kSummaryNone;
    }
    for (int launch_index = 0; launch_index < 2; ++launch_index) {
      const Launch launch = random_launch(random, truth, options);
      for (int r = 0; r < 4; ++r) {
        const int32_t q0 = random_query_origin(random);
        const Region region(truth, launch.host.params(), random.pick(4), random.pick(5) - 1, q0,
                            random_key_origin(random, q0), r == 0 ? kWide : kSquare);
        const Context context = [&, number = counts.expressions] {
          return "seed " + std::to_string(settings.seed) + ", mask " + std::to_string(number) +
                 ": " + ir::to_string(analysed.mask) +
                 (analysed.mask.same_as(mask) ? "" : "\n from: " + ir::to_string(mask)) + "\n" +
                 describe(launch, options);
        };
        check_tiles(analysed, region, launch, reads_summaries, random, 64, counts, context);
        for (int k = 0; k < 3; ++k) {
          check_kv_range(truth, analysed, region, launch.host.params(), random, counts, context);
        }
        if (reads_summaries) {
          check_kv_range(truth, analysed, region, launch.plain, random, counts, context);
        }
      }
    }
  }
  std::ostringstream summary;
  summary << "seed " << settings.seed << ": " << counts.expressions << " masks, " << counts.tiles
          << " tiles (+" << counts.plain_tiles << " without summaries; " << counts.empty
          << " empty, " << counts.full << " full, " << counts.sharpened
          << " decided only with summaries), " << counts.kv_ranges << " kv ranges ("
          << counts.bounded << " bounded), " << counts.kv_pairs << " (q, kv) pairs outside them";
  if (settings.chosen) WARN(summary.str());
  INFO(summary.str());
  REQUIRE(counts.tiles >= settings.tiles);
  // The fuzzer must reach both decided outcomes, and summaries must decide tiles.
  CHECK(counts.empty > counts.tiles / 10);
  CHECK(counts.full > counts.tiles / 20);
  CHECK(counts.sharpened > counts.plain_tiles / 1000);
}

}  // namespace
}  // namespace flexjit
