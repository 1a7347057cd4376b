// Host classification benchmark (docs/architecture.md#tile-analysis, #targets "mask metadata per
// batch"): the tile map of a 128k x 128k attention matrix in 128x128 tiles for each standard mask,
// against building the same block mask element by element (what create_block_mask does). Prints a
// markdown table.
//
//   flexjit_bench_classify [--quick] [--mask-file PATH] [--len N] [--tile T] [--repeats N]
//
// The element-wise figure is an estimate: evaluate_mask over every pair of 128k x 128k is
// 17G evaluations, so the bench times a sample of query rows against every key and
// extrapolates the rate to the whole matrix (one thread, evaluation only).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/tile_map.h"
#include "flexjit/dsl/frontend.h"

namespace {

// This thread's CPU time, in seconds: unlike wall time, not inflated by other processes on a
// shared machine (the timed work is single-threaded and does no I/O).
using flexjit::bench::cpu_seconds;
using flexjit::bench::median;

// One benchmarked mask: its name and its runtime parameters by name.
struct Case {
  std::string mask;
  std::string note;
  std::map<std::string, int32_t> scalars;
  std::map<std::string, flexjit::HostArray> arrays;
};

flexjit::HostArray row_array(std::vector<int32_t> values) {
  flexjit::HostArray array;
  array.rows = 1;
  array.cols = static_cast<int32_t>(values.size());
  array.bits = std::move(values);
  return array;
}

// Documents of random lengths in [1k, 16k] packed into `length` positions.
flexjit::HostArray packed_documents(int32_t length, uint32_t seed, int* documents) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> doc_length(1024, 16384);
  std::vector<int32_t> ids;
  ids.reserve(length);
  int32_t id = 0;
  while (static_cast<int32_t>(ids.size()) < length) {
    const int32_t n = std::min(doc_length(rng), length - static_cast<int32_t>(ids.size()));
    ids.insert(ids.end(), n, id++);
  }
  *documents = id;
  return row_array(std::move(ids));
}

std::vector<Case> cases(int32_t length) {
  std::vector<Case> all;
  all.push_back({"causal", "", {}, {}});
  all.push_back({"sliding", "window 1024", {{"window", 1024}}, {}});
  flexjit::HostArray prefix;
  prefix.rows = 1;
  prefix.bits = {4096};
  all.push_back({"prefix_lm", "prefix 4096", {}, {{"prefix_len", prefix}}});
  flexjit::HostArray sinks = prefix;
  sinks.bits = {128};
  all.push_back({"rswa", "window 1024, prefix 128", {{"window", 1024}}, {{"prefix_len", sinks}}});
  all.push_back({"chunked", "chunk 8192", {}, {}});
  int documents = 0;
  flexjit::HostArray doc = packed_documents(length, 7, &documents);
  all.push_back({"document", fmt::format("{} docs of 1k-16k", documents), {}, {{"doc", doc}}});
  // Three image ranges (inclusive [start, end] pairs); the other five of max_ranges unused.
  std::vector<int32_t> ranges = {
      1000, 3047, length / 4, length / 4 + 4095, length / 2, length / 2 + 575};
  ranges.resize(16, -1);
  all.push_back({"prefix_ranges", "3 ranges", {}, {{"ranges", row_array(ranges)}}});
  return all;
}

flexjit::HostParams params_of(const flexjit::Variant& variant, const Case& c) {
  std::vector<int32_t> scalars;
  for (const flexjit::RuntimeParam& param : variant.scalars) {
    const auto it = c.scalars.find(param.name);
    scalars.push_back(it == c.scalars.end() ? 0 : it->second);
  }
  std::vector<flexjit::HostArray> arrays;
  for (const flexjit::RuntimeParam& param : variant.arrays) {
    const auto it = c.arrays.find(param.name);
    arrays.push_back(it == c.arrays.end() ? flexjit::HostArray{} : it->second);
  }
  return flexjit::HostParams(variant, std::move(scalars), std::move(arrays));
}

// Seconds per evaluate_mask call over `sample_rows` query rows spread over the matrix, each
// against every key.
double elementwise_seconds_per_pair(const flexjit::Variant& variant,
                                    const flexjit::TileShape& shape, const fj::MaskParams* params,
                                    int sample_rows) {
  const double start = cpu_seconds();
  for (int i = 0; i < sample_rows; ++i) {
    const int32_t q = shape.q_offset + static_cast<int32_t>(int64_t{shape.q_len} * i / sample_rows);
    for (int32_t kv = 0; kv < shape.kv_len; ++kv)
      static_cast<void>(flexjit::evaluate_mask(variant, {shape.b, shape.h, q, kv, params}));
  }
  return (cpu_seconds() - start) / (double(sample_rows) * shape.kv_len);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flexjit_bench_classify: host tile maps against element-wise block masks"};
  bool quick = false;
  std::string mask_file = FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask";
  int32_t length = 131072;
  int32_t tile = 128;
  int repeats = 7;
  int sample_rows = 16;
  app.add_flag("--quick", quick, "32k x 32k, 3 repeats, 4 sampled rows");
  app.add_option("--mask-file", mask_file, "the standard masks")->capture_default_str();
  app.add_option("--len", length, "q_len = kv_len")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--tile", tile, "square tile side")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed runs per mask (median)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    length = std::min(length, 32768);
    repeats = std::min(repeats, 3);
    sample_rows = 4;
  }

  const std::optional<flexjit::dsl::Module> loaded = flexjit::bench::load_masks(mask_file);
  if (!loaded) return 1;
  const flexjit::dsl::Module& module = *loaded;
  auto shape = flexjit::paged_tile_shape(length, length, tile, tile);
  if (!shape) {
    fmt::print(stderr, "{}\n", shape.error().message);
    return 1;
  }

  fmt::print("Tile maps of a {} x {} matrix in {}x{} tiles ({} tiles), one request and head;\n",
             length, length, tile, tile, shape->tiles());
  fmt::print(
      "median of {} runs, thread CPU time. `spans` is build_tile_map (TileMapMethod::Spans),\n",
      repeats);
  fmt::print(
      "`per tile` classifies each tile in the kv range (TileMapMethod::Tiles); `summaries`\n");
  fmt::print("builds the runtime parameters with their array summaries (HostParams).\n");
  fmt::print(
      "Element-wise: evaluate_mask on every pair, ESTIMATED: {} query rows spread over the\n",
      sample_rows);
  fmt::print("matrix are timed against all {} keys and the rate extrapolated to {:.3g} pairs.\n\n",
             length, double(length) * length);
  fmt::print(
      "| mask | params | tiles (empty/full/partial) | evaluations | summaries µs | spans µs | "
      "per tile µs | element-wise s (est.) | speedup | < 1 ms |\n");
  fmt::print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const Case& c : cases(length)) {
    auto variant = flexjit::lower_mask(module, c.mask);
    if (!variant) {
      fmt::print(stderr, "{}: {}\n", c.mask, variant.error().message);
      return 1;
    }
    std::vector<double> summary_times, span_times, tile_times;
    flexjit::TileMap map;
    for (int r = 0; r < repeats; ++r) {
      const double start = cpu_seconds();
      const flexjit::HostParams params = params_of(*variant, c);
      const double spans = cpu_seconds();
      map = flexjit::build_tile_map(*variant, *shape, &params.params());
      const double tiles = cpu_seconds();
      const flexjit::TileMap per_tile = flexjit::build_tile_map(*variant, *shape, &params.params(),
                                                                flexjit::TileMapMethod::Tiles);
      const double end = cpu_seconds();
      summary_times.push_back(spans - start);
      span_times.push_back(tiles - spans);
      tile_times.push_back(end - tiles);
      if (per_tile.counts.full + per_tile.counts.empty > map.counts.full + map.counts.empty) {
        fmt::print(stderr, "{}: per-tile classification more exact than spans\n", c.mask);
        return 1;
      }
    }
    const flexjit::HostParams params = params_of(*variant, c);
    const double per_pair =
        elementwise_seconds_per_pair(*variant, *shape, &params.params(), sample_rows);
    const double elementwise = per_pair * double(shape->q_len) * shape->kv_len;
    const double classify = median(span_times);
    fmt::print(
        "| {} | {} | {} ({}/{}/{}) | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.3g}x | {} |\n",
        c.mask, c.note.empty() ? "—" : c.note, map.counts.total(), map.counts.empty,
        map.counts.full, map.counts.partial, map.evaluations, median(summary_times) * 1e6,
        classify * 1e6, median(tile_times) * 1e6, elementwise, elementwise / classify,
        classify < 1e-3 ? "yes" : "no");
  }
  return 0;
}
