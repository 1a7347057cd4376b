// Tile maps against the brute-force oracle: every standard mask over shapes with q_len < kv_len
// and tiles that do not divide the lengths; the FlexAttention BlockMask export against the
// element-wise construction; the oracle itself; array values from `--set` text.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/cli/settings.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/tile_map.h"
#include "flexjit/dsl/frontend.h"
#include "random_ir.h"
#include "standard_masks.h"

namespace flexjit {
namespace {

const dsl::Module& standard() {
  return testing::standard_masks();
}

// A standard mask with chunk = 24, so that chunks fit the small shapes below.
Variant lower(const std::string& name) {
  VariantSelection selection;
  selection.name = name;
  selection.defines = {{"chunk", "24"}};
  Result<Variant> variant = lower_variant(standard(), selection);
  INFO(name << ": " << (variant.ok() ? "" : variant.error().message));
  REQUIRE(variant.ok());
  return std::move(variant).value();
}

const RuntimeParam& array_param(const Variant& variant, const std::string& name) {
  const auto it = std::find_if(variant.arrays.begin(), variant.arrays.end(),
                               [&](const RuntimeParam& p) { return p.name == name; });
  REQUIRE(it != variant.arrays.end());
  return *it;
}

// The standard library's runtime parameters, arrays given as `--set` text for request b.
HostParams standard_params(const Variant& variant, int32_t window, int32_t b,
                           const std::map<std::string, std::string>& arrays) {
  std::vector<HostArray> values(variant.arrays.size());
  for (const auto& [name, text] : arrays) {
    const RuntimeParam& param = array_param(variant, name);
    Result<HostArray> array = parse_array_values(param, text, b, 0);
    INFO(name << "=" << text << ": " << (array.ok() ? "" : array.error().message));
    REQUIRE(array.ok());
    values[param.slot] = std::move(array).value();
  }
  return HostParams(variant, {window}, std::move(values));
}

const std::map<std::string, std::string>& sample_arrays() {
  static const std::map<std::string, std::string> arrays = {
      {"prefix_len", "37"},
      // Documents of 23, 50, 1, 40, 90 and 20 positions: every key of the shapes below.
      {"doc", "0*23,1*50,2,3*40,4*90,5*20"},
      // Two ranges, then unused pairs.
      {"ranges", "10,25,60,70,-1*12"},
  };
  return arrays;
}

struct Shape {
  int32_t q_len, kv_len, tile_q, tile_k;
};

// Square and rectangular, dividing and not, prefill and decode (q_len 1).
constexpr Shape kShapes[] = {
    {64, 64, 16, 16}, {50, 130, 16, 32},  {100, 100, 7, 13},
    {1, 77, 4, 8},    {130, 210, 32, 16}, {33, 33, 64, 64},
};

const std::vector<std::string>& standard_masks() {
  static const std::vector<std::string> names = {"causal",      "bidirectional", "sliding",
                                                 "sliding_sym", "prefix_lm",     "prefix_ranges",
                                                 "rswa",        "chunked",       "document"};
  return names;
}

// Where the analysis is not exact: prefix_ranges leaves one truly full 7x13 tile of these
// shapes Partial. Narrowing an || bounds the keys its right side is evaluated over, not the
// queries, and this tile needs both (docs/architecture.md#tile-analysis asks exactness of the other
// masks).
bool known_inexact(const std::string& name, const Shape& s) {
  return name == "prefix_ranges" && s.tile_q == 7;
}

// Visible pairs as the map claims them: a truly uniform tile that the map leaves Partial counts
// as partly visible, so that block_mask_from_visible builds what the map means.
std::vector<int64_t> visible_as_classified(const TileMap& map, std::vector<int64_t> visible) {
  const TileShape& shape = map.shape;
  for (int32_t row = 0; row < shape.rows(); ++row) {
    for (int32_t col = 0; col < shape.cols(); ++col) {
      const size_t i = static_cast<size_t>(row) * shape.cols() + col;
      const int64_t pairs = int64_t{shape.tile_rows(row)} * shape.tile_cols(col);
      if (map.classes[i] != TileClass::Partial || pairs == 1) continue;
      if (visible[i] == 0) visible[i] = 1;
      if (visible[i] == pairs) visible[i] = pairs - 1;
    }
  }
  return visible;
}

TEST_CASE(
    "tile maps of the standard masks are sound and exact; BlockMask export matches brute force",
    "[tile_map]") {
  for (const std::string& name : standard_masks()) {
    const Variant variant = lower(name);
    for (const Shape& s : kShapes) {
      for (const int32_t window : {1, 20}) {
        for (const int32_t b : {0, 1}) {
          INFO(name << " q_len " << s.q_len << " kv_len " << s.kv_len << " tile " << s.tile_q << "x"
                    << s.tile_k << " window " << window << " b " << b);
          auto shape = paged_tile_shape(s.q_len, s.kv_len, s.tile_q, s.tile_k, b, 0);
          REQUIRE(shape.ok());
          const HostParams params = standard_params(variant, window, b, sample_arrays());
          const std::vector<int64_t> visible =
              count_visible_pairs(variant, *shape, &params.params(), 2);
          const TileMap map = build_tile_map(variant, *shape, &params.params());
          const TileMap per_tile =
              build_tile_map(variant, *shape, &params.params(), TileMapMethod::Tiles);

          const Exactness exactness = check_tile_map(map, visible);
          CHECK(exactness.unsound == 0);
          CHECK(check_tile_map(per_tile, visible).unsound == 0);
          CHECK(check_tile_map(per_tile, visible).exact <= exactness.exact);
          if (known_inexact(name, s)) {
            CHECK(exactness.uniform - exactness.exact <= 1);
          } else {
            CHECK(exactness.exact == exactness.uniform);
            CHECK(export_block_mask(map) == block_mask_from_visible(*shape, visible));
          }
          CHECK(export_block_mask(map) ==
                block_mask_from_visible(*shape, visible_as_classified(map, visible)));

          // Counts agree with the classes, and tiles outside a row's kv range are Empty.
          TileCounts counted;
          for (int32_t row = 0; row < shape->rows(); ++row) {
            const KvRange range = map.kv_ranges[row];
            CHECK(range.lo >= 0);
            CHECK(range.hi <= shape->kv_len);
            for (int32_t col = 0; col < shape->cols(); ++col) {
              counted.add(map.at(row, col));
              const Tile tile = shape->tile(row, col);
              if (tile.k1 <= range.lo || tile.k0 >= range.hi) {
                CHECK(map.at(row, col) == TileClass::Empty);
              }
            }
          }
          CHECK(counted.empty == map.counts.empty);
          CHECK(counted.full == map.counts.full);
          CHECK(counted.partial == map.counts.partial);
          CHECK(map.counts.total() == shape->tiles());
        }
      }
    }
  }
}

TEST_CASE("counts and density of causal and bidirectional maps", "[tile_map]") {
  const Variant causal = lower("causal");
  auto shape = paged_tile_shape(64, 64, 16, 16);
  REQUIRE(shape.ok());
  const TileMap map = build_tile_map(causal, *shape, nullptr);
  CHECK(map.counts.empty == 6);
  CHECK(map.counts.full == 6);
  CHECK(map.counts.partial == 4);
  CHECK(map.counts.density() == Approx(10.0 / 16));
  // The last 16 queries of 64 keys see every key up to their own: one row, the last partial.
  auto decode = paged_tile_shape(16, 64, 16, 16);
  REQUIRE(decode.ok());
  const TileMap last = build_tile_map(causal, *decode, nullptr);
  CHECK(last.counts.full == 3);
  CHECK(last.counts.partial == 1);
  CHECK(last.at(0, 3) == TileClass::Partial);

  const TileMap dense = build_tile_map(lower("bidirectional"), *shape, nullptr);
  CHECK(dense.counts.full == 16);
  CHECK(dense.counts.density() == 1.0);
  CHECK(TileCounts{}.density() == 0.0);
}

TEST_CASE("BlockMask rows list their blocks first, then the other columns", "[tile_map]") {
  // Causal, 8 x 8 in 2 x 2 blocks: the diagonal blocks are partial, those left of it full.
  auto shape = paged_tile_shape(8, 8, 2, 2);
  REQUIRE(shape.ok());
  const BlockMask mask = export_block_mask(build_tile_map(lower("causal"), *shape, nullptr));
  CHECK(mask.q_blocks == 4);
  CHECK(mask.kv_blocks == 4);
  CHECK(mask.kv_num_blocks == std::vector<int32_t>{1, 1, 1, 1});
  CHECK(mask.full_kv_num_blocks == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(mask.kv_indices == std::vector<int32_t>{0, 1, 2, 3,  //
                                                1, 0, 2, 3,  //
                                                2, 0, 1, 3,  //
                                                3, 0, 1, 2});
  CHECK(mask.full_kv_indices == std::vector<int32_t>{0, 1, 2, 3,  //
                                                     0, 1, 2, 3,  //
                                                     0, 1, 2, 3,  //
                                                     0, 1, 2, 3});
}

TEST_CASE("a block clipped at the edge is never full in the BlockMask", "[tile_map]") {
  // Every pair visible; 5 x 5 in 4 x 4 blocks: only block (0, 0) is whole.
  auto shape = paged_tile_shape(5, 5, 4, 4);
  REQUIRE(shape.ok());
  const TileMap map = build_tile_map(lower("bidirectional"), *shape, nullptr);
  CHECK(map.counts.full == 4);  // the map's classes are over the clipped tiles
  const BlockMask mask = export_block_mask(map);
  CHECK(mask.full_kv_num_blocks == std::vector<int32_t>{1, 0});
  CHECK(mask.kv_num_blocks == std::vector<int32_t>{1, 2});
  CHECK(mask.kv_indices == std::vector<int32_t>{1, 0, 0, 1});
  CHECK(mask == block_mask_from_visible(
                    *shape, count_visible_pairs(lower("bidirectional"), *shape, nullptr, 1)));
}

TEST_CASE("the oracle catches unsound and inexact classes", "[tile_map]") {
  const Variant causal = lower("causal");
  auto shape = paged_tile_shape(32, 32, 8, 8);
  REQUIRE(shape.ok());
  const std::vector<int64_t> visible = count_visible_pairs(causal, *shape, nullptr, 1);
  CHECK(visible[0] == 36);  // the first diagonal tile: 1 + 2 + ... + 8
  CHECK(visible[1] == 0);
  CHECK(visible[4] == 64);
  TileMap map = build_tile_map(causal, *shape, nullptr);
  REQUIRE(check_tile_map(map, visible).unsound == 0);

  TileMap unsound = map;
  unsound.classes[0] = TileClass::Full;   // a partial tile called full
  unsound.classes[4] = TileClass::Empty;  // a full tile called empty
  CHECK(check_tile_map(unsound, visible).unsound == 2);

  TileMap inexact = map;
  inexact.classes[1] = TileClass::Partial;  // an empty tile left partial
  const Exactness exactness = check_tile_map(inexact, visible);
  CHECK(exactness.unsound == 0);
  CHECK(exactness.uniform == 12);
  CHECK(exactness.exact == 11);
  CHECK(exactness.rate() == Approx(11.0 / 12));
  CHECK(export_block_mask(inexact) != block_mask_from_visible(*shape, visible));
}

TEST_CASE("document masks are exact per tile through the array summaries", "[tile_map]") {
  const Variant document = lower("document");
  auto shape = paged_tile_shape(4096, 4096, 64, 64);
  REQUIRE(shape.ok());
  // Documents aligned to tiles: every tile is uniform, and exact classification needs the
  // summaries (a tile's doc ids without them are unknown).
  const HostParams params = standard_params(document, 0, 0, {{"doc", "0*1024,1*2048,2*512,3*512"}});
  const TileMap map = build_tile_map(document, *shape, &params.params());
  CHECK(map.counts.partial == 64);  // the diagonal
  CHECK(map.counts.full == (16 * 15 + 32 * 31 + 8 * 7 + 8 * 7) / 2);
  CHECK(map.evaluations < 8 * shape->rows());
}

TEST_CASE("tile maps of random masks are sound, spans never less exact than tiles",
          "[tile_map][fuzz]") {
  using testing::RandomExpr;
  using testing::RandomExprOptions;
  RandomExprOptions options;
  options.scalars = {{ir::Type::Int, 0, "window"}, {ir::Type::Int, 1, "p"}};
  options.arrays = {{ir::Type::Int, 0, "doc", {"b", "kv"}}};
  options.score = false;
  options.mask_shapes = 6;
  RandomExpr random(20240611, options);
  int64_t uniform = 0;
  for (int i = 0; i < 300; ++i) {
    Variant variant;
    variant.name = variant.mask_name = "random";
    variant.mask = random.make(ir::Type::Bool, 3);
    variant.scalars = {{"window", dsl::Type::Int, 0, {}}, {"p", dsl::Type::Int, 1, {}}};
    variant.arrays = {{"doc", dsl::Type::Int, 0, {"b", "kv"}}};
    const int32_t kv_len = 1 + random.pick(120);
    const int32_t q_len = 1 + random.pick(kv_len);
    auto shape = paged_tile_shape(q_len, kv_len, 1 + random.pick(24), 1 + random.pick(24));
    REQUIRE(shape.ok());
    // Document ids: runs of random lengths, increasing or shuffled, sometimes short of kv_len.
    HostArray doc;
    doc.rows = 1;
    for (int32_t id = 0; static_cast<int32_t>(doc.bits.size()) < kv_len; ++id)
      doc.bits.insert(doc.bits.end(), 1 + random.pick(30), random.pick(2) ? id : random.pick(4));
    doc.bits.resize(random.pick(4) == 0 ? random.pick(kv_len + 1) : kv_len);
    doc.cols = static_cast<int32_t>(doc.bits.size());
    const HostParams params(variant, {1 + random.pick(40), random.pick(100) - 20}, {doc});
    INFO("mask " << ir::to_string(variant.mask) << " q_len " << q_len << " kv_len " << kv_len
                 << " tile " << shape->tile_q << "x" << shape->tile_k);
    const std::vector<int64_t> visible = count_visible_pairs(variant, *shape, &params.params(), 1);
    const Exactness spans =
        check_tile_map(build_tile_map(variant, *shape, &params.params()), visible);
    const Exactness tiles = check_tile_map(
        build_tile_map(variant, *shape, &params.params(), TileMapMethod::Tiles), visible);
    CHECK(spans.unsound == 0);
    CHECK(tiles.unsound == 0);
    CHECK(spans.exact >= tiles.exact);
    uniform += spans.uniform;
  }
  CHECK(uniform > 10000);  // the masks are not all partial
}

TEST_CASE("paged tile shapes", "[tile_map]") {
  auto shape = paged_tile_shape(100, 300, 64, 128, 2, 5);
  REQUIRE(shape.ok());
  CHECK(shape->q_offset == 200);
  CHECK(shape->rows() == 2);
  CHECK(shape->cols() == 3);
  const Tile last = shape->tile(1, 2);
  CHECK(last.b == 2);
  CHECK(last.h == 5);
  CHECK(last.q0 == 264);
  CHECK(last.q1 == 300);
  CHECK(last.k0 == 256);
  CHECK(last.k1 == 300);
  CHECK_FALSE(paged_tile_shape(0, 10, 4, 4).ok());
  CHECK_FALSE(paged_tile_shape(11, 10, 4, 4).ok());
  CHECK_FALSE(paged_tile_shape(10, 10, 0, 4).ok());
  CHECK_FALSE(paged_tile_shape(10, 10, 4, -4).ok());
  CHECK_FALSE(paged_tile_shape(10, 10, 4, 4, -1, 0).ok());
}

// ---------------------------------------------------------------------------------------------
// Array values from text

RuntimeParam param(const std::string& name, dsl::Type type, std::vector<std::string> dims) {
  RuntimeParam p;
  p.name = name;
  p.type = type;
  p.dims = std::move(dims);
  return p;
}

HostArray parse_ok(const RuntimeParam& p, const std::string& text, int32_t b = 0, int32_t h = 0) {
  Result<HostArray> array = parse_array_values(p, text, b, h);
  INFO(p.name << "=" << text << ": " << (array.ok() ? "" : array.error().message));
  REQUIRE(array.ok());
  return std::move(array).value();
}

std::string parse_error(const RuntimeParam& p, const std::string& text, int32_t b = 0) {
  Result<HostArray> array = parse_array_values(p, text, b, 0);
  INFO(p.name << "=" << text);
  REQUIRE_FALSE(array.ok());
  return array.error().message;
}

TEST_CASE("array values: lists, repeats and rows", "[tile_map][set]") {
  const RuntimeParam doc = param("doc", dsl::Type::Int, {"b", "kv"});
  HostArray a = parse_ok(doc, "0*3, 1*2,7");
  CHECK(a.rows == 1);
  CHECK(a.cols == 6);
  CHECK(a.bits == std::vector<int32_t>{0, 0, 0, 1, 1, 7});

  // A single row serves request b: rows 0..b all hold it.
  a = parse_ok(doc, "4,-5*0,6", 2);
  CHECK(a.rows == 3);
  CHECK(a.cols == 2);
  CHECK(a.bits == std::vector<int32_t>{4, 6, 4, 6, 4, 6});

  a = parse_ok(doc, "1,2;3*2", 5);
  CHECK(a.rows == 2);
  CHECK(a.bits == std::vector<int32_t>{1, 2, 3, 3});

  const RuntimeParam prefix = param("prefix_len", dsl::Type::Int, {"b"});
  a = parse_ok(prefix, "100", 3);
  CHECK(a.rows == 4);
  CHECK(a.cols == 1);
  CHECK(a.bits == std::vector<int32_t>{100, 100, 100, 100});
  a = parse_ok(prefix, "1,2,3", 1);
  CHECK(a.rows == 3);
  CHECK(a.bits == std::vector<int32_t>{1, 2, 3});

  const RuntimeParam slopes = param("slopes", dsl::Type::Float, {"h"});
  a = parse_ok(slopes, "0.5", 0, 2);
  CHECK(a.rows == 3);
  CHECK(a.bits == std::vector<int32_t>(3, fj::float_to_bits(0.5f)));
  a = parse_ok(slopes, "1,2e-3*2");
  CHECK(a.bits == std::vector<int32_t>{fj::float_to_bits(1.0f), fj::float_to_bits(2e-3f),
                                       fj::float_to_bits(2e-3f)});

  // A first dimension that is neither b nor h is not filled.
  const RuntimeParam table = param("table", dsl::Type::Int, {"kv"});
  CHECK(parse_ok(table, "9", 4).rows == 1);
}

TEST_CASE("array values: bad text is an error naming the parameter", "[tile_map][set]") {
  const RuntimeParam doc = param("doc", dsl::Type::Int, {"b", "kv"});
  const RuntimeParam prefix = param("prefix_len", dsl::Type::Int, {"b"});
  const RuntimeParam slopes = param("slopes", dsl::Type::Float, {"h"});
  for (const std::string text : {"", " ", "1,,2", "1,", ",1", "x", "1.5", "1e3", "0x10",
                                 "2147483648", "1*", "1*x", "1*1.5", "*3", "1*-2", "1*2*3"}) {
    CHECK_THAT(parse_error(doc, text), Catch::Contains("doc"));
  }
  CHECK_THAT(parse_error(doc, "1*-2"), Catch::Contains("negative"));
  CHECK_THAT(parse_error(doc, "0*0"), Catch::Contains("no values"));
  CHECK_THAT(parse_error(doc, "1,2;3"), Catch::Contains("same number"));
  CHECK_THAT(parse_error(prefix, "1;2"), Catch::Contains("one dimension"));
  CHECK_THAT(parse_error(doc, "1*99999999999999999999"), Catch::Contains("more than"));
  CHECK_THAT(parse_error(doc, "1*67108865"), Catch::Contains("more than"));
  CHECK_THAT(parse_error(doc, "1*1000000", 1000), Catch::Contains("more than"));
  for (const std::string text : {"nan", "inf", "-inf", "1e39", "one", "0.5f"}) {
    CHECK_THAT(parse_error(slopes, text), Catch::Contains("slopes"));
  }
  CHECK_THAT(parse_error(param("window", dsl::Type::Int, {}), "1"),
             Catch::Contains("not an array"));
}

}  // namespace
}  // namespace flexjit
