// Exactness of the block-sparsity analysis on the standard masks
// (docs/architecture.md#tile-analysis): every tile that is truly all-masked or all-visible is
// classified Empty or Full, for causal, sliding, prefix_lm, rswa, chunked and document, over
// prefill and decode shapes with lengths that tiles do not divide, and tile sizes from 1 x 1 to 128
// x 128. Document ids are monotone and reach the analysis through HostParams' summaries. Alongside,
// kv_range must hold every visible key ([exactness]) and, tagged [kv_range], be as tight as the
// constraints allow.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"
#include "standard_masks.h"

namespace flexjit {
namespace {

const dsl::Module& standard() {
  return testing::standard_masks();
}

Variant lower(const std::string& name,
              std::vector<std::pair<std::string, std::string>> defines = {}) {
  VariantSelection selection;
  selection.name = name;
  selection.defines = std::move(defines);
  Result<Variant> variant = lower_variant(standard(), selection);
  INFO(name << ": " << (variant.ok() ? "" : variant.error().message));
  REQUIRE(variant.ok());
  return std::move(variant).value();
}

// Runtime values of the standard library's parameters; doc[b] is request b's document ids.
struct Setting {
  int32_t window = 0;
  std::vector<int32_t> prefix_len;
  std::vector<std::vector<int32_t>> doc;
};

// The setting as a launch passes it: through HostParams, so `doc` is summarised.
HostParams launch(const Variant& variant, const Setting& setting) {
  std::vector<int32_t> scalars(variant.scalars.size(), 0);
  for (const RuntimeParam& scalar : variant.scalars) {
    if (scalar.name == "window") scalars[scalar.slot] = setting.window;
  }
  std::vector<HostArray> arrays(variant.arrays.size());
  for (const RuntimeParam& array : variant.arrays) {
    HostArray& host = arrays[array.slot];
    if (array.name == "prefix_len") {
      host.rows = static_cast<int32_t>(setting.prefix_len.size());
      host.bits = setting.prefix_len;
    } else if (array.name == "doc" && !setting.doc.empty()) {
      host.rows = static_cast<int32_t>(setting.doc.size());
      host.cols = static_cast<int32_t>(setting.doc[0].size());
      for (const std::vector<int32_t>& ids : setting.doc) {
        REQUIRE(ids.size() == setting.doc[0].size());
        host.bits.insert(host.bits.end(), ids.begin(), ids.end());
      }
    }
  }
  return HostParams(variant, std::move(scalars), std::move(arrays));
}

// One request: queries are the last q_len of kv_len positions (docs/architecture.md#call-contract),
// keys 0..kv_len-1.
struct Shape {
  int32_t q_len, kv_len;
  int32_t q_start() const { return kv_len - q_len; }
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> list = {
      {256, 256},  // prefill, lengths the square tiles divide
      {333, 333},  // prefill, lengths no tile divides
      {150, 700},  // chunked prefill: queries start at 550
      {1, 777},    // decode
      {40, 1300},  // a window of 1024 ends inside the keys
  };
  return list;
}

struct TileSize {
  int32_t q, kv;
};
constexpr TileSize kTileSizes[] = {{16, 16}, {64, 64}, {128, 128}, {48, 80}, {1, 1}};
// 1 x 1 tiles only on matrices up to this many pairs: one classification per pair.
constexpr int64_t kMaxPairsForUnitTiles = 70000;

// The mask over a whole request, with prefix sums of visible pairs and, per query, the first
// and last visible key.
class Matrix {
 public:
  Matrix(const Variant& variant, const fj::MaskParams& params, int32_t b, Shape shape)
      : shape_(shape),
        sums_((static_cast<size_t>(shape.q_len) + 1) * (shape.kv_len + 1), 0),
        first_(shape.q_len, shape.kv_len),
        last_(shape.q_len, -1) {
    for (int32_t i = 0; i < shape.q_len; ++i) {
      for (int32_t j = 0; j < shape.kv_len; ++j) {
        const bool visible = evaluate_mask(variant, {b, 0, shape.q_start() + i, j, &params});
        sum(i + 1, j + 1) = sum(i, j + 1) + sum(i + 1, j) - sum(i, j) + visible;
        if (visible) {
          first_[i] = std::min(first_[i], j);
          last_[i] = j;
        }
      }
    }
  }

  // Visible pairs among queries [q0, q1) and keys [k0, k1) (positions, not rows).
  int64_t visible(int32_t q0, int32_t q1, int32_t k0, int32_t k1) const {
    const int32_t i0 = q0 - shape_.q_start(), i1 = q1 - shape_.q_start();
    return at(i1, k1) - at(i0, k1) - at(i1, k0) + at(i0, k0);
  }
  // The first and last visible key of query q; first > last when it sees none.
  int32_t first(int32_t q) const { return first_[q - shape_.q_start()]; }
  int32_t last(int32_t q) const { return last_[q - shape_.q_start()]; }

 private:
  int64_t& sum(int32_t i, int32_t j) {
    return sums_[static_cast<size_t>(i) * (shape_.kv_len + 1) + j];
  }
  int64_t at(int32_t i, int32_t j) const {
    return sums_[static_cast<size_t>(i) * (shape_.kv_len + 1) + j];
  }

  Shape shape_;
  std::vector<int64_t> sums_;
  std::vector<int32_t> first_, last_;
};

struct Tally {
  int64_t uniform = 0;    // tiles truly all-masked or all-visible
  int64_t exact = 0;      // of which classified so
  int64_t unsound = 0;    // tiles classified against the truth
  int64_t kv_ranges = 0;  // kv_range calls checked against the visible keys
  std::string first_miss;
  std::string first_unsound;
};

std::string where(const std::string& what, const Setting& setting, int32_t b, Shape shape) {
  std::ostringstream out;
  out << what << " window " << setting.window << " prefix_len {";
  for (const int32_t p : setting.prefix_len)
    out << " " << p;
  out << " } b " << b << " q_len " << shape.q_len << " kv_len " << shape.kv_len;
  return out.str();
}

// Classifies every tile of every size over one request and compares with the truth; checks
// that kv_range holds each tile row's visible keys.
void check_request(const Variant& variant, const std::string& what, const Setting& setting,
                   const HostParams& host, int32_t b, Shape shape, Tally& tally) {
  const fj::MaskParams& params = host.params();
  const Matrix matrix(variant, params, b, shape);
  for (const TileSize size : kTileSizes) {
    const int64_t pairs = int64_t{shape.q_len} * shape.kv_len;
    if (size.q == 1 && size.kv == 1 && pairs > kMaxPairsForUnitTiles) continue;
    for (int32_t q0 = shape.q_start(); q0 < shape.kv_len; q0 += size.q) {
      const int32_t q1 = std::min(q0 + size.q, shape.kv_len);
      for (int32_t k0 = 0; k0 < shape.kv_len; k0 += size.kv) {
        const int32_t k1 = std::min(k0 + size.kv, shape.kv_len);
        const int64_t visible = matrix.visible(q0, q1, k0, k1);
        const int64_t total = int64_t{q1 - q0} * (k1 - k0);
        const TileClass want = visible == 0       ? TileClass::Empty
                               : visible == total ? TileClass::Full
                                                  : TileClass::Partial;
        const TileClass got = classify_tile(variant, {b, 0, q0, q1, k0, k1}, &params);
        tally.uniform += want != TileClass::Partial;
        tally.exact += want != TileClass::Partial && got == want;
        if (got == want) continue;
        std::ostringstream tile;
        tile << where(what, setting, b, shape) << ": tile q [" << q0 << ", " << q1 << ") kv [" << k0
             << ", " << k1 << ") is " << tile_class_name(want) << " (" << visible << " of " << total
             << " visible), classified " << tile_class_name(got);
        if (got != TileClass::Partial && tally.unsound++ == 0) tally.first_unsound = tile.str();
        if (want != TileClass::Partial && tally.first_miss.empty()) tally.first_miss = tile.str();
      }
      // Soundness of the kv range on the keys of the request.
      const KvRange range = kv_range(variant, b, 0, q0, q1, &params);
      ++tally.kv_ranges;
      for (int32_t qv = q0; qv < q1; ++qv) {
        if (matrix.first(qv) > matrix.last(qv)) continue;
        const bool inside =
            !range.empty() && range.lo <= matrix.first(qv) && matrix.last(qv) < range.hi;
        if (!inside) {
          FAIL(where(what, setting, b, shape)
               << ": kv_range(q [" << q0 << ", " << q1 << ")) = [" << range.lo << ", " << range.hi
               << ") but q " << qv << " sees keys " << matrix.first(qv) << " to "
               << matrix.last(qv));
        }
      }
    }
  }
}

// Every request shape, for every request the setting's arrays describe and one beyond them.
Tally check_exact(const Variant& variant, const std::string& what, const Setting& setting,
                  const std::vector<Shape>& request_shapes = shapes()) {
  Tally tally;
  for (const Shape shape : request_shapes) {
    Setting sized = setting;
    for (std::vector<int32_t>& ids : sized.doc)
      ids.resize(shape.kv_len, ids.empty() ? 0 : ids.back());
    const HostParams host = launch(variant, sized);
    // One request more than the arrays hold: its reads are out of range and yield 0.
    const size_t rows = std::max(sized.prefix_len.size(), sized.doc.size());
    const int32_t requests = static_cast<int32_t>(rows == 0 ? 1 : rows + 1);
    for (int32_t b = 0; b < requests; ++b)
      check_request(variant, what, sized, host, b, shape, tally);
  }
  return tally;
}

void require_exact(const Tally& tally) {
  INFO(tally.exact << " of " << tally.uniform << " uniform tiles classified exactly; "
                   << tally.kv_ranges << " kv ranges hold every visible key");
  INFO("first unsound tile: " << tally.first_unsound);
  REQUIRE(tally.unsound == 0);
  INFO("first tile not classified exactly: " << tally.first_miss);
  CHECK(tally.exact == tally.uniform);
  CHECK(tally.uniform > 0);
}

TEST_CASE("causal is classified exactly", "[exactness]") {
  require_exact(check_exact(lower("causal"), "causal", {}));
}

TEST_CASE("sliding is classified exactly", "[exactness]") {
  const Variant sliding = lower("sliding");
  for (const int32_t window : {1, 100, 1024}) {
    Setting setting;
    setting.window = window;
    require_exact(check_exact(sliding, "sliding", setting));
  }
}

TEST_CASE("prefix_lm is classified exactly", "[exactness]") {
  const Variant prefix_lm = lower("prefix_lm");
  // Each request reads its own prefix length (and the one after the last reads 0).
  for (const std::vector<int32_t>& prefix_len : {std::vector<int32_t>{0}, {37, 300}, {1000, -5}}) {
    Setting setting;
    setting.prefix_len = prefix_len;
    require_exact(check_exact(prefix_lm, "prefix_lm", setting));
  }
}

// Not exact yet with the interval analysis (reported to the analysis owner). With window 100
// and prefix_len 37, tile q [64, 128) x kv [0, 64) is Full: keys below 37 are in the prefix,
// keys 37..63 lie within 127 - 37 = 90 < 100 of every query, and all are causal. But neither
// disjunct holds on the whole tile (`kv < 37` fails for kv >= 37, `q - kv < 100` fails for
// q - kv up to 127 - 0), so `kv < prefix || q - kv < window` evaluates to {false, true} and the
// tile is Partial. Deciding it needs the keys where `kv < prefix` fails (kv >= 37) to be known
// when the window disjunct is evaluated: refining kv by the first disjunct's negation.
TEST_CASE("rswa is classified exactly", "[exactness]") {
  const Variant rswa = lower("rswa");
  for (const auto& [window, prefix] : {std::pair{100, 37}, {1024, 300}, {1, 4}, {64, 0}}) {
    Setting setting;
    setting.window = window;
    setting.prefix_len = {prefix};
    require_exact(check_exact(rswa, "rswa", setting));
  }
}

TEST_CASE("chunked is classified exactly", "[exactness]") {
  // The default chunk of 8192 needs queries on both sides of a chunk boundary.
  require_exact(check_exact(lower("chunked"), "chunked 8192", {}, {{200, 8300}, {1, 8193}}));
  for (const char* chunk : {"96", "100"}) {
    require_exact(
        check_exact(lower("chunked", {{"chunk", chunk}}), std::string("chunked ") + chunk, {}));
  }
}

// Monotone document ids for `length` positions: runs whose lengths come from `run_length`,
// ids rising by `step` from `first`.
std::vector<int32_t> documents(int32_t length, const std::function<int32_t(int)>& run_length,
                               int32_t first = 0, int32_t step = 1) {
  std::vector<int32_t> ids;
  int32_t id = first;
  for (int run = 0; static_cast<int32_t>(ids.size()) < length; ++run, id += step) {
    const int32_t count = std::max(1, run_length(run));
    for (int32_t i = 0; i < count && static_cast<int32_t>(ids.size()) < length; ++i)
      ids.push_back(id);
  }
  return ids;
}

TEST_CASE("document is classified exactly with monotone document ids", "[exactness]") {
  const Variant document = lower("document");
  constexpr int32_t kLength = 1500;  // check_exact cuts or extends to each shape's kv_len
  std::mt19937 rng(7);
  const auto random_runs = [&rng](int32_t lo, int32_t hi) {
    return [&rng, lo, hi](int) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  };
  const std::vector<std::pair<std::string, std::vector<std::vector<int32_t>>>> patterns = {
      {"one document", {std::vector<int32_t>(kLength, 3)}},
      {"documents of 100", {documents(kLength, [](int) { return 100; })}},
      {"documents of 64 and 1..300",
       {documents(kLength, [](int) { return 64; }), documents(kLength, random_runs(1, 300))}},
      {"documents of 1..5", {documents(kLength, random_runs(1, 5))}},
      {"ids with gaps, documents of 10..200",
       {documents(kLength, random_runs(10, 200), -7, 3),
        documents(kLength, random_runs(1, 40), 5, 2)}},
  };
  for (const auto& [name, doc] : patterns) {
    Setting setting;
    setting.doc = doc;
    require_exact(check_exact(document, "document (" + name + ")", setting));
  }
}

// ---------------------------------------------------------------------------------------------
// Tightness of kv_range: the bounds the masks' linear constraints give, for every query tile.

using ExpectedRange = std::function<KvRange(int32_t q0, int32_t q1)>;

void check_kv_bounds(const Variant& variant, const std::string& what, const Setting& setting,
                     const ExpectedRange& expected) {
  int64_t ranges = 0, mismatches = 0;
  std::string first_mismatch;
  for (const Shape shape : shapes()) {
    Setting sized = setting;
    for (std::vector<int32_t>& ids : sized.doc)
      ids.resize(shape.kv_len, ids.empty() ? 0 : ids.back());
    const HostParams host = launch(variant, sized);
    for (const TileSize size : kTileSizes) {
      for (int32_t q0 = shape.q_start(); q0 < shape.kv_len; q0 += size.q) {
        const int32_t q1 = std::min(q0 + size.q, shape.kv_len);
        const KvRange got = kv_range(variant, 0, 0, q0, q1, &host.params());
        const KvRange want = expected(q0, q1);
        ++ranges;
        if (got.lo != want.lo || got.hi != want.hi) {
          if (mismatches++ == 0) {
            std::ostringstream out;
            out << where(what, sized, 0, shape) << ": kv_range(q [" << q0 << ", " << q1 << ")) = ["
                << got.lo << ", " << got.hi << "), want [" << want.lo << ", " << want.hi << ")";
            first_mismatch = out.str();
          }
        }
      }
    }
  }
  INFO(mismatches << " of " << ranges << " ranges differ; first: " << first_mismatch);
  CHECK(mismatches == 0);
}

int32_t floor_div(int32_t a, int32_t b) {
  return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

TEST_CASE("kv_range of causal ends at the last query", "[kv_range]") {
  check_kv_bounds(lower("causal"), "causal", {}, [](int32_t, int32_t q1) {
    return KvRange{0, q1};
  });
}

TEST_CASE("kv_range of sliding covers the window", "[kv_range]") {
  const Variant sliding = lower("sliding");
  for (const int32_t window : {1, 100, 1024}) {
    Setting setting;
    setting.window = window;
    check_kv_bounds(sliding, "sliding", setting, [window](int32_t q0, int32_t q1) {
      return KvRange{std::max(0, q0 - window + 1), q1};
    });
  }
}

TEST_CASE("kv_range of chunked starts at the first query's chunk", "[kv_range]") {
  for (const int32_t chunk : {96, 100, 8192}) {
    const Variant chunked = lower("chunked", {{"chunk", std::to_string(chunk)}});
    check_kv_bounds(chunked, "chunked " + std::to_string(chunk), {},
                    [chunk](int32_t q0, int32_t q1) {
                      return KvRange{floor_div(q0, chunk) * chunk, q1};
                    });
  }
}

TEST_CASE("kv_range of prefix_lm reaches the prefix", "[kv_range]") {
  const Variant prefix_lm = lower("prefix_lm");
  for (const int32_t prefix : {0, 37, 600, 5000}) {
    Setting setting;
    setting.prefix_len = {prefix};
    check_kv_bounds(prefix_lm, "prefix_lm", setting, [prefix](int32_t, int32_t q1) {
      return KvRange{0, std::max(q1, prefix)};
    });
  }
}

TEST_CASE("kv_range of rswa covers the prefix and the window", "[kv_range]") {
  const Variant rswa = lower("rswa");
  for (const auto& [window, prefix] : {std::pair{100, 37}, {1024, 0}, {1, 4}}) {
    Setting setting;
    setting.window = window;
    setting.prefix_len = {prefix};
    check_kv_bounds(rswa, "rswa", setting, [window, prefix](int32_t q0, int32_t q1) {
      return KvRange{prefix > 0 ? 0 : std::max(0, q0 - window + 1), q1};
    });
  }
}

TEST_CASE("kv_range of document is causal's: the data is not consulted", "[kv_range]") {
  Setting setting;
  setting.doc = {documents(1500, [](int) { return 100; })};
  check_kv_bounds(lower("document"), "document", setting, [](int32_t, int32_t q1) {
    return KvRange{0, q1};
  });
}

}  // namespace
}  // namespace flexjit
