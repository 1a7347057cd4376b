// Host mask evaluation benchmark (docs/codegen.md): each standard mask over a 16k x 16k grid
// (one request and head), row by row through HostCode::mask_row, LLVM-compiled against the IR
// evaluator; the standard scores through score_row likewise; tile classification
// (HostCode::classify, the compiled interval program) against MaskAnalysis over the 128 x 128
// tiles of a 128k x 128k grid; and the JIT compile time of every mask and variant. Prints
// markdown tables.
//
//   flexjit_bench_mask_eval [--quick] [--mask-file PATH] [--len N] [--sample-rows N]
//                           [--classify-len N]
//
// The native figure covers the whole grid. The evaluator's is measured on --sample-rows query
// rows spread over the grid, each against every key (the whole grid would take minutes per
// mask); the sampled rows of both are compared element for element. Times are thread CPU time
// (one thread), medians of a few runs.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/dsl/frontend.h"

namespace {

using flexjit::HostArray;
using flexjit::HostCode;

// This thread's CPU time, in seconds: unlike wall time, not inflated by other processes on a
// shared machine (the timed work is single-threaded and does no I/O).
using flexjit::bench::cpu_seconds;
using flexjit::bench::median;

HostArray values_array(std::vector<int32_t> values, int32_t rows) {
  HostArray array;
  array.rows = rows;
  array.cols = static_cast<int32_t>(values.size()) / rows;
  array.bits = std::move(values);
  return array;
}

// The runtime parameters every standard mask and score reads, by name: a 1024-key window,
// a 4096-token prefix, documents of random lengths in [1k, 16k] packed into the grid, three
// image ranges, ALiBi slopes for 8 heads.
std::map<std::string, int32_t> scalar_values() {
  return {{"window", 1024}};
}

std::map<std::string, HostArray> array_values(int32_t length) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> doc_length(1024, 16384);
  std::vector<int32_t> ids;
  for (int32_t id = 0; static_cast<int32_t>(ids.size()) < length; ++id) {
    const int32_t n = std::min(doc_length(rng), length - static_cast<int32_t>(ids.size()));
    ids.insert(ids.end(), n, id);
  }
  std::vector<int32_t> ranges = {
      1000, 3047, length / 4, length / 4 + 4095, length / 2, length / 2 + 575};
  ranges.resize(16, -1);
  std::vector<int32_t> slopes;
  for (int h = 0; h < 8; ++h)
    slopes.push_back(fj::float_to_bits(std::exp2(-1.0f - static_cast<float>(h))));
  return {{"prefix_len", values_array({4096}, 1)},
          {"doc", values_array(std::move(ids), 1)},
          {"ranges", values_array(std::move(ranges), 1)},
          {"slopes", values_array(std::move(slopes), 8)}};
}

flexjit::HostParams params_of(const flexjit::Variant& variant, int32_t length) {
  const std::map<std::string, int32_t> scalars = scalar_values();
  const std::map<std::string, HostArray> arrays = array_values(length);
  std::vector<int32_t> scalar_bits;
  for (const flexjit::RuntimeParam& param : variant.scalars) {
    const auto it = scalars.find(param.name);
    scalar_bits.push_back(it == scalars.end() ? 0 : it->second);
  }
  std::vector<HostArray> array_list;
  for (const flexjit::RuntimeParam& param : variant.arrays) {
    const auto it = arrays.find(param.name);
    array_list.push_back(it == arrays.end() ? HostArray{} : it->second);
  }
  return flexjit::HostParams(variant, std::move(scalar_bits), std::move(array_list));
}

// Query rows spread over the grid.
int32_t sampled_row(int i, int rows, int32_t length) {
  return static_cast<int32_t>(int64_t{length} * i / rows);
}

struct MaskTiming {
  double native_ns = 0, evaluator_ns = 0;
  int64_t visible = 0;  // over the whole grid
  bool agree = true;    // on the sampled rows
};

MaskTiming time_mask(const HostCode& native, const HostCode& evaluator,
                     const fj::MaskParams* params, int32_t length, int sample_rows, int repeats) {
  MaskTiming timing;
  std::vector<uint8_t> row(static_cast<size_t>(length)), other(row.size());
  std::vector<double> native_runs, evaluator_runs;
  // Timed: the calls alone (through a function pointer into JIT-compiled code, which the
  // compiler cannot drop). Untimed: the visible pairs, for the table.
  for (int r = 0; r < repeats; ++r) {
    const double start = cpu_seconds();
    for (int32_t q = 0; q < length; ++q)
      native.mask_row(params, 0, 0, q, 0, length, row.data());
    native_runs.push_back(cpu_seconds() - start);
  }
  for (int32_t q = 0; q < length; ++q) {
    native.mask_row(params, 0, 0, q, 0, length, row.data());
    timing.visible += std::count(row.begin(), row.end(), 1);
  }
  for (int r = 0; r < std::max(1, repeats / 2); ++r) {
    const double start = cpu_seconds();
    for (int i = 0; i < sample_rows; ++i)
      evaluator.mask_row(params, 0, 0, sampled_row(i, sample_rows, length), 0, length, row.data());
    evaluator_runs.push_back(cpu_seconds() - start);
  }
  for (int i = 0; i < sample_rows; ++i) {
    const int32_t q = sampled_row(i, sample_rows, length);
    native.mask_row(params, 0, 0, q, 0, length, row.data());
    evaluator.mask_row(params, 0, 0, q, 0, length, other.data());
    timing.agree = timing.agree && row == other;
  }
  timing.native_ns = 1e9 * median(native_runs) / (double(length) * length);
  timing.evaluator_ns = 1e9 * median(evaluator_runs) / (double(sample_rows) * length);
  return timing;
}

struct ClassifyTiming {
  double native_ns = 0, analysis_ns = 0;  // per tile
  int64_t tiles = 0, empty = 0, full = 0;
  bool agree = true;  // on every tile
};

// classify over every `tile` x `tile` tile of a length x length grid (one request and head),
// HostCode's against MaskAnalysis'. The classes are summed so that no call can be dropped.
ClassifyTiming time_classify(const HostCode& native, const flexjit::MaskAnalysis& analysis,
                             const fj::MaskParams* params, int32_t length, int32_t tile,
                             int repeats) {
  using flexjit::Tile;
  using flexjit::TileClass;
  const int32_t tiles = (length + tile - 1) / tile;
  std::vector<TileClass> classes(static_cast<size_t>(tiles) * tiles), other(classes.size());
  const auto run = [&](auto&& classify, std::vector<TileClass>& out) {
    const double start = cpu_seconds();
    for (int32_t row = 0; row < tiles; ++row) {
      const int32_t q0 = row * tile, q1 = std::min(length, q0 + tile);
      for (int32_t col = 0; col < tiles; ++col) {
        const int32_t k0 = col * tile;
        out[static_cast<size_t>(row) * tiles + col] =
            classify(Tile{0, 0, q0, q1, k0, std::min(length, k0 + tile)});
      }
    }
    return cpu_seconds() - start;
  };
  std::vector<double> native_runs, analysis_runs;
  for (int r = 0; r < repeats; ++r) {
    native_runs.push_back(run([&](const Tile& t) { return native.classify(t, params); }, classes));
    analysis_runs.push_back(
        run([&](const Tile& t) { return analysis.classify(t, params); }, other));
  }
  ClassifyTiming timing;
  timing.tiles = static_cast<int64_t>(classes.size());
  timing.agree = classes == other;
  timing.empty = std::count(classes.begin(), classes.end(), TileClass::Empty);
  timing.full = std::count(classes.begin(), classes.end(), TileClass::Full);
  timing.native_ns = 1e9 * median(native_runs) / double(timing.tiles);
  timing.analysis_ns = 1e9 * median(analysis_runs) / double(timing.tiles);
  return timing;
}

struct ScoreTiming {
  double native_ns = 0, evaluator_ns = 0;
  bool agree = true;
};

// score_row over the sampled rows (scores are per visible pair in attention; every pair here).
ScoreTiming time_score(const HostCode& native, const HostCode& evaluator,
                       const fj::MaskParams* params, int32_t length, int rows, int repeats) {
  std::vector<float> inputs(static_cast<size_t>(length));
  std::mt19937 rng(11);
  for (float& s : inputs)
    s = std::uniform_real_distribution<float>(-30.0f, 30.0f)(rng);
  std::vector<float> scores(inputs.size()), other(inputs.size());
  const auto run = [&](const HostCode& code, int row_count) {
    const double start = cpu_seconds();
    for (int i = 0; i < row_count; ++i) {
      scores = inputs;
      code.score_row(params, 0, 1, sampled_row(i, row_count, length), 0, length, scores.data());
    }
    return cpu_seconds() - start;
  };
  ScoreTiming timing;
  std::vector<double> native_runs, evaluator_runs;
  for (int r = 0; r < repeats; ++r)
    native_runs.push_back(run(native, rows));
  for (int r = 0; r < std::max(1, repeats / 2); ++r)
    evaluator_runs.push_back(run(evaluator, rows));
  for (int i = 0; i < rows; ++i) {
    const int32_t q = sampled_row(i, rows, length);
    scores = inputs;
    other = inputs;
    native.score_row(params, 0, 1, q, 0, length, scores.data());
    evaluator.score_row(params, 0, 1, q, 0, length, other.data());
    // Bit for bit (the standard scores make no NaN from these inputs).
    timing.agree = timing.agree &&
                   std::memcmp(scores.data(), other.data(), scores.size() * sizeof(float)) == 0;
  }
  timing.native_ns = 1e9 * median(native_runs) / (double(rows) * length);
  timing.evaluator_ns = 1e9 * median(evaluator_runs) / (double(rows) * length);
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flexjit_bench_mask_eval: LLVM-compiled host masks against the IR evaluator"};
  bool quick = false;
  std::string mask_file = FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask";
  int32_t length = 16384;
  int sample_rows = 64;
  int32_t classify_length = 131072;
  int repeats = 3;
  app.add_flag("--quick", quick, "4k x 4k, one run, 16 sampled rows");
  app.add_option("--mask-file", mask_file, "the standard masks")->capture_default_str();
  app.add_option("--len", length, "grid side: q and kv in [0, len)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--sample-rows", sample_rows, "query rows the evaluator is timed on")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--classify-len", classify_length, "grid side of the classify table")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    length = std::min(length, 4096);
    classify_length = std::min(classify_length, 16384);
    sample_rows = std::min(sample_rows, 16);
    repeats = 1;
  }

  const std::optional<flexjit::dsl::Module> loaded = flexjit::bench::load_masks(mask_file);
  if (!loaded) return 1;
  const flexjit::dsl::Module& module = *loaded;
  const auto lower = [&](const std::string& name) -> flexjit::Result<flexjit::Variant> {
    return flexjit::lower_mask(module, name);
  };
  const auto host_code = [](const flexjit::Variant& variant, bool native) {
    auto code = flexjit::make_host_code(variant, native);
    if (!code) {
      fmt::print(stderr, "{}: {}\n{}", variant.name, code.error().message, code.error().log);
      std::exit(1);
    }
    return *code;
  };

  const bool native_build = FLEXJIT_WITH_LLVM;
  fmt::print(
      "Masks over a {} x {} grid (q, kv in [0, {})), one request and head, thread CPU time.\n",
      length, length, length);
  fmt::print("LLVM: mask_row over the whole grid, median of {} runs{}. Evaluator: {} query rows\n",
             repeats, native_build ? "" : " (NOT NATIVE: built without LLVM)", sample_rows);
  fmt::print("spread over the grid against every key; both compared on those rows.\n\n");
  fmt::print("| mask | visible | LLVM ns/element | evaluator ns/element | speedup | agree |\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: | --- |\n");
  bool all_agree = true;
  for (const flexjit::dsl::Decl& decl : module.decls) {
    if (decl.kind != flexjit::dsl::DeclKind::Mask) continue;
    auto variant = lower(decl.name);
    if (!variant) {
      fmt::print(stderr, "{}: {}\n", decl.name, variant.error().message);
      return 1;
    }
    const flexjit::HostParams params = params_of(*variant, length);
    const MaskTiming t = time_mask(*host_code(*variant, true), *host_code(*variant, false),
                                   &params.params(), length, sample_rows, repeats);
    all_agree = all_agree && t.agree;
    fmt::print("| {} | {:.1f}% | {:.3f} | {:.2f} | {:.0f}x | {} |\n", decl.name,
               100.0 * double(t.visible) / (double(length) * length), t.native_ns, t.evaluator_ns,
               t.evaluator_ns / t.native_ns, t.agree ? "yes" : "NO");
  }

  fmt::print(
      "\nScores: score_row on {} query rows x {} keys (head 1), LLVM against the "
      "evaluator.\n\n",
      sample_rows * 4, length);
  fmt::print("| variant | score | LLVM ns/element | evaluator ns/element | speedup | agree |\n");
  fmt::print("| --- | --- | ---: | ---: | ---: | --- |\n");
  for (const flexjit::dsl::Decl& decl : module.decls) {
    if (decl.kind != flexjit::dsl::DeclKind::Variant || decl.variant_score.empty()) continue;
    auto variant = lower(decl.name);
    if (!variant) return 1;
    const flexjit::HostParams params = params_of(*variant, length);
    const ScoreTiming t = time_score(*host_code(*variant, true), *host_code(*variant, false),
                                     &params.params(), length, sample_rows * 4, repeats);
    all_agree = all_agree && t.agree;
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.1f}x | {} |\n", decl.name, variant->score_name,
               t.native_ns, t.evaluator_ns, t.evaluator_ns / t.native_ns, t.agree ? "yes" : "NO");
  }

  constexpr int32_t kTile = 128;
  fmt::print(
      "\nTile classes: classify over the {} x {} tiles of a {} x {} grid (one request and "
      "head), LLVM-compiled interval program{} against MaskAnalysis (its interpreter), median "
      "of {} runs, thread CPU time.\n\n",
      kTile, kTile, classify_length, classify_length,
      native_build ? "" : " (NOT NATIVE: built without LLVM)", repeats);
  fmt::print(
      "| mask | tiles | empty | full | LLVM ns/tile | MaskAnalysis ns/tile | speedup | agree "
      "|\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const flexjit::dsl::Decl& decl : module.decls) {
    if (decl.kind != flexjit::dsl::DeclKind::Mask) continue;
    auto variant = lower(decl.name);
    if (!variant) return 1;
    const flexjit::HostParams params = params_of(*variant, classify_length);
    const ClassifyTiming t =
        time_classify(*host_code(*variant, true), flexjit::MaskAnalysis(*variant), &params.params(),
                      classify_length, kTile, repeats);
    all_agree = all_agree && t.agree;
    fmt::print("| {} | {} | {:.1f}% | {:.1f}% | {:.1f} | {:.1f} | {:.1f}x | {} |\n", decl.name,
               t.tiles, 100.0 * double(t.empty) / double(t.tiles),
               100.0 * double(t.full) / double(t.tiles), t.native_ns, t.analysis_ns,
               t.analysis_ns / t.native_ns, t.agree ? "yes" : "NO");
  }

  fmt::print(
      "\nJIT compile time per variant (make_host_code: IR to LLVM IR, O2, machine code, "
      "JIT link), median of 5, thread CPU and wall time.\n\n");
  fmt::print("| mask or variant | CPU ms | wall ms |\n| --- | ---: | ---: |\n");
  for (const flexjit::dsl::Decl& decl : module.decls) {
    if (decl.kind != flexjit::dsl::DeclKind::Mask && decl.kind != flexjit::dsl::DeclKind::Variant)
      continue;
    auto variant = lower(decl.name);
    if (!variant) return 1;
    std::vector<double> cpu, wall;
    for (int r = 0; r < 5; ++r) {
      timespec start{}, end{};
      clock_gettime(CLOCK_MONOTONIC, &start);
      const double cpu_start = cpu_seconds();
      static_cast<void>(host_code(*variant, true));
      cpu.push_back(cpu_seconds() - cpu_start);
      clock_gettime(CLOCK_MONOTONIC, &end);
      wall.push_back(double(end.tv_sec - start.tv_sec) +
                     1e-9 * double(end.tv_nsec - start.tv_nsec));
    }
    fmt::print("| {} | {:.1f} | {:.1f} |\n", decl.name, 1e3 * median(cpu), 1e3 * median(wall));
  }
  if (!all_agree) {
    fmt::print(stderr, "LLVM and the evaluator disagree: a bug in the host code generator\n");
    return 1;
  }
  return 0;
}
