// The CPU backend (runtime/cpu/cpu_attention) against the float64 reference, through the C API
// with arch "cpu" on paged_check's inputs: shuffled block tables with huge garbage past each
// sequence, NaN in every cache slot no request owns, poisoned outputs. A seeded sweep over
// masks x scores x head dims x dtypes x page sizes x GQA groups x KV layouts x query mixes,
// the encoder path, rows with no visible key, block tables shorter than the sequence, results
// that do not depend on the number of threads, and fp8 (e4m3) caches with the conversions they
// are read and written with.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "check/cpu_check.h"
#include "check/paged_check.h"
#include "check/reference.h"
#include "check/shard_check.h"
#include "cpu/cpu_attention.h"
#include "cpu/float16.h"
#include "fj_ops.cuh"
#include "flexjit/flexjit.h"
#include "flexjit/internal/supported.h"
#include "launch/handles.h"
#include "shard_check_asserts.h"

namespace {

struct Standard {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  int32_t num_params = 0;
  int32_t window_slot = -1;
  Standard() {
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    REQUIRE(fj_program_create_from_file(context, FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask",
                                        &program) == FJ_SUCCESS);
    REQUIRE(fj_program_param_count(program, &num_params) == FJ_SUCCESS);
    REQUIRE(fj_program_param_slot(program, "window", &window_slot) == FJ_SUCCESS);
  }
  ~Standard() {
    fj_program_destroy(program);
    fj_context_destroy(context);
  }
};

Standard& standard() {
  static Standard instance;
  return instance;
}

// The program's scalar parameters: all 0 but `window`.
std::vector<int32_t> params_with_window(int window) {
  std::vector<int32_t> params(standard().num_params, 0);
  params[standard().window_slot] = window;
  return params;
}

const char* layout_name(flexjit::KvLayout layout) {
  switch (layout) {
    case flexjit::KvLayout::NHD:
      return "NHD";
    case flexjit::KvLayout::HND:
      return "HND";
    case flexjit::KvLayout::NHD_JOINT:
      return "NHD_JOINT";
    case flexjit::KvLayout::HND_JOINT:
      return "HND_JOINT";
    case flexjit::KvLayout::NHD_2D:
      return "NHD_2D";
  }
  return "?";
}

std::string describe(const flexjit::PagedCheckConfig& config) {
  std::string defines;
  for (const auto& [name, value] : config.defines)
    defines += fmt::format(" -D {}={}", name, value);
  return fmt::format(
      "{}{}{}{} hd{} {}{} {} heads {}/{} {} query_lens [{}] context_lens [{}] window {} seed {}",
      config.mask, config.score.empty() ? "" : " with ", config.score, defines, config.head_dim,
      config.dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16",
      !config.kv_fp8                                ? ""
      : config.kv_scale == flexjit::KvScale::Tensor ? " kvfp8 (scale per tensor)"
                                                    : " kvfp8 (scales per kv head)",
      config.contiguous ? std::string("contiguous") : fmt::format("page{}", config.page_size),
      config.num_heads, config.num_kv_heads, layout_name(config.layout),
      fmt::join(config.query_lens, ","), fmt::join(config.context_lens, ","),
      config.params.empty() ? 0 : config.params[standard().window_slot], config.seed);
}

flexjit::PagedCheckReport check(const flexjit::PagedCheckConfig& config) {
  INFO(describe(config));
  auto report = flexjit::run_cpu_paged_check(standard().context, standard().program, config);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  return *report;
}

bool correct(const flexjit::PagedCheckConfig& config, const flexjit::PagedCheckReport& report) {
  INFO(describe(config));
  INFO(fmt::format(
      "{}: rel err {:.3e} (tolerance {:.0e}), bad {}, empty rows wrong {}, lse err "
      "{:.3e}, visible pairs {}",
      report.kernel_name, report.relative_error, flexjit::relative_error_tolerance(config),
      report.bad_outputs, report.empty_rows_wrong, report.lse_max_abs_error, report.visible_pairs));
  CHECK(report.bad_outputs == 0);
  CHECK(report.empty_rows_wrong == 0);
  CHECK(report.relative_error <= flexjit::relative_error_tolerance(config));
  CHECK(report.lse_max_abs_error <= 2e-2);
  return report.bad_outputs == 0 && report.empty_rows_wrong == 0 &&
         report.relative_error <= flexjit::relative_error_tolerance(config) &&
         report.lse_max_abs_error <= 2e-2;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int below(int n) { return static_cast<int>(engine_() % static_cast<uint64_t>(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }  // inclusive

 private:
  std::mt19937_64 engine_;
};

// Request lengths of a query mix, at most ~700 keys per request so the reference stays fast.
void add_lengths(const std::string& mix, Rng& rng, flexjit::PagedCheckConfig& config) {
  const auto add = [&](int query_len, int context_len) {
    config.query_lens.push_back(query_len);
    config.context_lens.push_back(context_len);
  };
  if (mix == "decode") {  // one token per request over cached contexts (0: a new sequence)
    add(1, rng.between(300, 599));
    for (int r = rng.between(1, 5); r > 0; --r)
      add(1, rng.between(0, 599));
  } else if (mix == "short") {  // a few tokens each (speculative decoding, short prompts)
    for (int r = rng.between(1, 3); r > 0; --r)
      add(rng.between(2, 40), rng.between(0, 120));
  } else if (mix == "prefill") {  // whole prompts of several query tiles
    add(rng.between(129, 330), 0);
    for (int r = rng.between(0, 2); r > 0; --r)
      add(rng.between(1, 200), 0);
  } else if (mix == "chunked") {  // vLLM's chunked prefill: decodes, chunks after history
    for (int r = rng.between(1, 3); r > 0; --r)
      add(1, rng.between(50, 599));
    const int context = rng.between(1, 400);
    add(rng.between(2, std::min(200, 600 - context)), context);
    if (rng.below(2) == 0) add(0, rng.between(0, 300));  // no new token this step
    for (size_t r = config.query_lens.size() - 1; r > 0; --r) {
      const int other = rng.below(static_cast<int>(r) + 1);
      std::swap(config.query_lens[r], config.query_lens[other]);
      std::swap(config.context_lens[r], config.context_lens[other]);
    }
  } else if (mix == "long") {  // one long prompt after a long history
    add(rng.between(300, 420), rng.between(150, 280));
  } else if (mix == "packed") {  // encoder sequences, at times an empty one
    for (int r = rng.between(2, 5); r > 0; --r)
      add(rng.between(1, 200), 0);
    if (rng.below(3) == 0) add(0, 0);
  } else {
    REQUIRE(mix == "packed_long");
    add(rng.between(256, 520), 0);
  }
}

struct Axes {
  std::vector<std::string> masks, scores, queries;
  std::vector<int> page_sizes;
  std::vector<flexjit::KvLayout> layouts;
  bool contiguous;
};

// `count` configurations of one space: each axis cycles through a fresh shuffle of its values,
// so every value appears about count / size times, in ever different combinations.
std::vector<flexjit::PagedCheckConfig> sweep_configs(const Axes& axes, int count, uint64_t seed) {
  const std::vector<int> head_dims(flexjit::supported::kHeadDims.begin(),
                                   flexjit::supported::kHeadDims.end());
  const std::vector<fj_dtype> dtypes = {FJ_DTYPE_BF16, FJ_DTYPE_FP16};
  // (query heads, kv heads): groups 1, 2, 4, 8 and MQA over 6 query heads (not a power of 2).
  const std::vector<std::pair<int, int>> heads = {{4, 4}, {6, 3}, {8, 2}, {8, 1}, {6, 1}};
  const std::vector<int> windows = {1, 7, 64, 100, 250, 1 << 30};
  Rng rng(seed);
  const std::vector<size_t> sizes = {axes.masks.size(),   axes.scores.size(),     head_dims.size(),
                                     dtypes.size(),       axes.page_sizes.size(), heads.size(),
                                     axes.layouts.size(), axes.queries.size()};
  std::vector<std::vector<int>> orders(sizes.size());
  std::vector<flexjit::PagedCheckConfig> configs;
  for (int i = 0; i < count; ++i) {
    std::vector<int> pick(sizes.size());
    for (size_t a = 0; a < sizes.size(); ++a) {
      const int n = static_cast<int>(sizes[a]);
      if (i % n == 0) {
        orders[a].resize(n);
        for (int v = 0; v < n; ++v)
          orders[a][v] = v;
        for (int v = n - 1; v > 0; --v)
          std::swap(orders[a][v], orders[a][rng.below(v + 1)]);
      }
      pick[a] = orders[a][i % n];
    }
    flexjit::PagedCheckConfig config;
    config.contiguous = axes.contiguous;
    config.mask = axes.masks[pick[0]];
    const std::string& score = axes.scores[pick[1]];
    config.score = score == "none" ? "" : score;
    if (config.mask == "chunked") config.defines.push_back({"chunk", "96"});
    if (score == "softcap") config.defines.push_back({"cap", "2.5"});  // a cap that bends
    config.head_dim = head_dims[pick[2]];
    config.dtype = dtypes[pick[3]];
    config.page_size = axes.page_sizes[pick[4]];
    std::tie(config.num_heads, config.num_kv_heads) = heads[pick[5]];
    config.layout = axes.layouts[pick[6]];
    config.seed = seed * 1000 + i;
    Rng lengths(config.seed);
    add_lengths(axes.queries[pick[7]], lengths, config);
    config.params = params_with_window(windows[rng.below(static_cast<int>(windows.size()))]);
    configs.push_back(std::move(config));
  }
  return configs;
}

void run_sweep(const char* name, const std::vector<flexjit::PagedCheckConfig>& configs) {
  const auto start = std::chrono::steady_clock::now();
  std::map<fj_dtype, std::pair<double, int>> worst;  // by dtype: ratio to tolerance, case
  double worst_lse = 0;
  int failed = 0;
  int64_t visible = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const flexjit::PagedCheckConfig& config = configs[i];
    INFO(fmt::format("{} case #{}", name, i));
    const flexjit::PagedCheckReport report = check(config);
    failed += !correct(config, report);
    visible += report.visible_pairs;
    const double ratio = report.relative_error / flexjit::relative_error_tolerance(config);
    if (ratio >= worst[config.dtype].first) worst[config.dtype] = {ratio, static_cast<int>(i)};
    worst_lse = std::max(worst_lse, report.lse_max_abs_error);
  }
  CHECK(visible > 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%s: %zu configurations, %d failed, %.1f s; worst relative error / tolerance: bf16 "
      "%.3f (case #%d), fp16 %.3f (case #%d); worst lse error %.2e\n",
      name, configs.size(), failed, seconds, worst[FJ_DTYPE_BF16].first,
      worst[FJ_DTYPE_BF16].second, worst[FJ_DTYPE_FP16].first, worst[FJ_DTYPE_FP16].second,
      worst_lse);
  std::fflush(stdout);
}

}  // namespace

TEST_CASE("CPU paged attention matches the reference over a sweep", "[cpu][sweep]") {
  const Axes paged{{"causal", "sliding", "prefix_lm", "rswa", "chunked", "document",
                    "prefix_ranges", "bidirectional"},
                   {"none", "softcap", "alibi"},
                   {"decode", "short", "prefill", "chunked", "long"},
                   {16, 32, 64, 128, 256},
                   {flexjit::KvLayout::NHD, flexjit::KvLayout::HND, flexjit::KvLayout::NHD_JOINT,
                    flexjit::KvLayout::HND_JOINT, flexjit::KvLayout::NHD_2D},
                   false};
  run_sweep("[cpu] paged sweep", sweep_configs(paged, 200, 7));
}

TEST_CASE("CPU: sharded keys merge into the unsharded result (context parallelism)",
          "[cpu][sweep][shard]") {
  // The paged sweep's space, each configuration dealt into 2-8 shards: vLLM's interleaved layout
  // (runs of 1, 3, 16, 64 or 100 keys) or contiguous shards cut at random points, uneven and at
  // times empty; each shard run as a sharded call, the states merged by fj_merge_states_n (the
  // sinks with them), against the reference and the unsharded call.
  const Axes paged{{"causal", "sliding", "prefix_lm", "rswa", "chunked", "document",
                    "prefix_ranges", "bidirectional"},
                   {"none", "softcap", "alibi"},
                   {"decode", "short", "chunked", "long"},
                   {16, 64},
                   {flexjit::KvLayout::NHD, flexjit::KvLayout::HND_JOINT},
                   false};
  std::vector<flexjit::PagedCheckConfig> configs = sweep_configs(paged, 48, 36);
  Rng rng(3600);
  const std::vector<int> interleaves = {1, 3, 16, 64, 100};
  flexjit::testing::ShardSweepReach reach;
  for (size_t i = 0; i < configs.size(); ++i) {
    flexjit::PagedCheckConfig& config = configs[i];
    if (i % 6 == 5) config.sinks = flexjit::random_sinks(config.num_heads, config.seed);
    if (i % 8 == 7) config.kv_fp8 = true;
    config.arch = "cpu";
    flexjit::ShardCheckConfig shards;
    shards.count = rng.between(2, 8);
    shards.layout =
        i % 3 == 2 ? flexjit::ShardLayout::Contiguous : flexjit::ShardLayout::Interleaved;
    shards.interleave = interleaves[rng.below(static_cast<int>(interleaves.size()))];
    shards.seed = config.seed;
    INFO(fmt::format("case #{}: {}; {} shards, {}", i, describe(config), shards.count,
                     shards.layout == flexjit::ShardLayout::Contiguous
                         ? std::string("contiguous")
                         : fmt::format("interleave {}", shards.interleave)));
    auto report = flexjit::run_shard_check(standard().context, standard().program, config, shards);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    correct(config, report->merged);
    flexjit::testing::check_against_unsharded(config, *report);
    reach.add(*report);
  }
  reach.check();
}

TEST_CASE("CPU encoder attention matches the reference over a sweep", "[cpu][sweep]") {
  const Axes encoder{{"bidirectional", "sliding_sym", "document", "causal"},
                     {"none", "softcap", "alibi"},
                     {"packed", "packed_long"},
                     {16},
                     {flexjit::KvLayout::NHD},
                     true};
  run_sweep("[cpu] encoder sweep", sweep_configs(encoder, 40, 11));
}

TEST_CASE("CPU: the library's variants and data-dependent masks", "[cpu]") {
  struct Case {
    const char* mask;
    const char* score;
    std::vector<std::pair<std::string, std::string>> defines;
  };
  const std::vector<Case> cases = {
      {"causal_softcap", "", {{"cap", "2.5"}}},
      {"causal_alibi", "", {}},
      {"gemma2_local", "", {}},
      {"llama4_local", "", {{"chunk", "64"}}},
      {"document", "softcap", {{"cap", "4"}}},
  };
  for (const Case& c : cases) {
    flexjit::PagedCheckConfig config;
    config.mask = c.mask;
    config.score = c.score;
    config.defines = c.defines;
    config.head_dim = 128;
    config.num_heads = 8;
    config.num_kv_heads = 2;
    config.query_lens = {1, 7, 300, 129};
    config.context_lens = {700, 50, 0, 200};
    config.params = params_with_window(100);
    config.seed = 77;
    const flexjit::PagedCheckReport report = check(config);
    CHECK(report.visible_pairs > 0);
    correct(config, report);
  }
}

TEST_CASE("CPU: rows with no visible key give 0 and lse -inf", "[cpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.contiguous = GENERATE(false, true);
  config.query_lens = {5, 70};
  config.context_lens = {config.contiguous ? 0 : 10, 0};
  config.params = params_with_window(GENERATE(0, -3));
  const flexjit::PagedCheckReport report = check(config);
  CHECK(report.visible_pairs == 0);
  correct(config, report);
}

TEST_CASE("CPU: attention sinks join each row's denominator once", "[cpu]") {
  // Sinks around the rows' LSEs, a head without one (-inf); rows with no visible key (a window
  // of 0 or less) get out 0 and lse = their head's sink.
  flexjit::PagedCheckConfig config;
  config.mask = GENERATE("causal", "sliding", "document");
  config.score = GENERATE("", "softcap");
  if (!config.score.empty()) config.defines.push_back({"cap", "2.5"});
  config.num_heads = 6;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.contiguous = GENERATE(false, true);
  config.query_lens = {1, 90, 33};
  config.context_lens =
      config.contiguous ? std::vector<int>{0, 0, 0} : std::vector<int>{300, 17, 0};
  config.params = params_with_window(GENERATE(50, -3));
  config.sinks = {0.5f, 3.0f, -std::numeric_limits<float>::infinity(), 6.0f, -2.0f, 1.0f};
  INFO(config.mask << " " << config.score << (config.contiguous ? " encoder" : " paged"));
  correct(config, check(config));
}

TEST_CASE("CPU: softmax scales other than 1/sqrt(d)", "[cpu]") {
  // Gemma-style scales, a negative one, and 0 (which the C API reads as 1 / sqrt(d)).
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.query_lens = {1, 90};
  config.context_lens = {200, 17};
  config.params = params_with_window(0);
  config.scale = GENERATE(0.0625f, 0.5f, -0.2f, 0.0f);
  INFO("scale " << config.scale);
  correct(config, check(config));
}

TEST_CASE("CPU: a window wider than the sequence sees every earlier key", "[cpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.num_heads = 8;
  config.num_kv_heads = 1;
  config.query_lens = {129, 64};
  config.context_lens = {1000, 3};
  config.params = params_with_window(1 << 30);
  const flexjit::PagedCheckReport report = check(config);
  CHECK(report.visible_pairs == 8 * ((129LL * 1000 + 129 * 130 / 2) + (64LL * 3 + 64 * 65 / 2)));
  correct(config, report);
}

TEST_CASE("CPU: check_bounds reports the first out-of-range array read", "[cpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "document";
  config.head_dim = 64;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.query_lens = {7, 300};
  config.context_lens = {50, 0};
  config.params = params_with_window(0);
  config.check_bounds = true;
  config.arrays = flexjit::random_arrays(standard().program->arrays, 2, 4, 300, 5);
  CHECK(check(config).bad_index[0] == 0);
  // Keep the first 100 positions of each request's document ids: reads past them yield 0.
  flexjit::HostArray& doc = config.arrays[2];
  std::vector<int32_t> kept;
  for (int r = 0; r < doc.rows; ++r)
    kept.insert(kept.end(), doc.bits.begin() + r * doc.cols, doc.bits.begin() + r * doc.cols + 100);
  doc.cols = 100;
  doc.bits = kept;
  const flexjit::PagedCheckReport report = check(config);
  correct(config, report);  // the reference reads 0 past the end too
  CHECK(report.bad_index[0] == 1);
  CHECK(report.bad_index[1] == 2);
  CHECK(report.bad_index[3] >= 100);
}

// The debug word's rule (fj_ops.cuh, flexjit.h's bad_index) as the host compiles it: the first
// report, of whichever kind, is kept whole; later ones change nothing.
TEST_CASE("the first report in the debug word wins, whatever its kind", "[cpu]") {
  int32_t word[4] = {0, 0, 0, 0};
  fj::ArrayParam array;
  array.slot = 5;
  array.bad_index = word;
  fj::report_debug(word, fj::DebugReport::BlockId, 3, 7, -1);
  fj::report_bad_index(array, 10, 20);
  fj::report_debug(word, fj::DebugReport::QueryLength, 1, 300, 100);
  CHECK(word[0] == 2);
  CHECK(word[1] == 3);
  CHECK(word[2] == 7);
  CHECK(word[3] == -1);
  std::fill(std::begin(word), std::end(word), 0);
  fj::report_bad_index(array, 10, 20);
  fj::report_debug(word, fj::DebugReport::BlockId, 3, 7, -1);
  CHECK(word[0] == 1);
  CHECK(word[1] == 5);
  CHECK(word[2] == 10);
  CHECK(word[3] == 20);
  fj::report_debug(nullptr, fj::DebugReport::QueryLength, 1, 2, 3);  // no buffer: nothing
}

// Keys at or past max_blocks_per_req * page_size are absent: the block-table entries past that
// hold huge garbage and the reference stops there too.
TEST_CASE("CPU: sequences longer than the block table see only its keys", "[cpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.head_dim = 64;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.page_size = 32;
  config.query_lens = {1, 40};
  config.context_lens = {300, 100};
  config.params = params_with_window(0);
  auto inputs = flexjit::make_paged_inputs(config);
  REQUIRE(inputs.ok());
  flexjit::HostPagedBatch& batch = inputs->batch;
  batch.max_blocks_per_req = 3;  // 96 keys
  for (int r = 0; r < batch.num_reqs(); ++r) {
    for (int64_t j = batch.max_blocks_per_req; j < batch.block_table_stride; ++j)
      batch.block_table[r * batch.block_table_stride + j] = 0x7fffff00;
  }
  auto outputs = flexjit::run_cpu_launch(standard().context, standard().program, config, *inputs);
  INFO((outputs ? std::string() : outputs.error().message));
  REQUIRE(outputs.ok());
  flexjit::VariantSelection selection;
  selection.name = "causal";
  auto variant = flexjit::program_variant(*standard().program, selection);
  REQUIRE(variant.ok());
  const flexjit::ReferenceOutput reference = flexjit::reference_paged_attention(*variant, batch);
  flexjit::PagedCheckReport report;
  flexjit::compare_paged_outputs(config, batch, reference, outputs->out_bits, outputs->lse, report);
  // The second request's queries sit at 100..139, past the 96 keys: their rows are empty.
  CHECK(reference.visible_pairs == 4 * (96 + 40 * 96));
  correct(config, report);
}

// The output depends on nothing but the inputs: pools of 1, 2 and 5 threads give the same bits.
TEST_CASE("CPU attention is deterministic whatever the thread count", "[cpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "document";
  config.score = "softcap";
  config.head_dim = 96;
  config.num_heads = 6;
  config.num_kv_heads = 3;
  config.page_size = 16;
  config.query_lens = {1, 77, 200, 5};
  config.context_lens = {400, 30, 0, 90};
  config.params = params_with_window(0);
  config.arrays = flexjit::random_arrays(standard().program->arrays, 4, 6, 400, 3);
  auto inputs = flexjit::make_paged_inputs(config);
  REQUIRE(inputs.ok());
  const flexjit::HostPagedBatch& batch = inputs->batch;
  std::vector<fj_define> defines;
  fj_kernel_desc desc = flexjit::kernel_desc(config, defines);
  desc.arch = "cpu";
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(standard().context, standard().program, &desc, &kernel) == FJ_SUCCESS);
  REQUIRE(kernel->entry->cpu != nullptr);
  const flexjit::cpu::CpuKernel& cpu_kernel = *kernel->entry->cpu;

  const flexjit::HostParams params(cpu_kernel.variant, batch.params, batch.arrays);
  fj::PagedPrefillArgs args{};
  args.q = inputs->q_bits.data();
  args.k_cache = inputs->k_bits.data();
  args.v_cache = inputs->v_bits.data();
  args.query_start_loc = batch.query_start_loc.data();
  args.seq_lens = batch.seq_lens.data();
  args.block_table = batch.block_table.data();
  args.q_stride_token = args.out_stride_token = int64_t{batch.num_heads} * batch.head_dim;
  args.q_stride_head = args.out_stride_head = batch.head_dim;
  args.k_stride_block = batch.k.stride_block;
  args.k_stride_slot = batch.k.stride_slot;
  args.k_stride_head = batch.k.stride_head;
  args.v_stride_block = batch.v.stride_block;
  args.v_stride_slot = batch.v.stride_slot;
  args.v_stride_head = batch.v.stride_head;
  args.block_table_stride = batch.block_table_stride;
  args.lse_stride_token = batch.num_heads;
  args.num_reqs = batch.num_reqs();
  args.num_heads = batch.num_heads;
  args.num_kv_heads = batch.num_kv_heads;
  args.max_blocks_per_req = batch.max_blocks_per_req;
  args.scale = batch.scale;
  args.params = params.params();
  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  std::vector<std::vector<uint16_t>> outs;
  std::vector<std::vector<float>> lses;
  for (const unsigned threads : {1u, 2u, 5u}) {
    flexjit::cpu::ThreadPool pool(threads);
    outs.emplace_back(rows * batch.head_dim, 0xffff);
    lses.emplace_back(rows, 0.0f);
    args.out = outs.back().data();
    args.lse = lses.back().data();
    flexjit::cpu::attention(cpu_kernel, args, nullptr, pool);
  }
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
  CHECK(std::memcmp(lses[0].data(), lses[1].data(), rows * sizeof(float)) == 0);
  CHECK(std::memcmp(lses[0].data(), lses[2].data(), rows * sizeof(float)) == 0);
  const flexjit::ReferenceOutput reference =
      flexjit::reference_paged_attention(cpu_kernel.variant, *cpu_kernel.code, batch);
  flexjit::PagedCheckReport report;
  flexjit::compare_paged_outputs(config, batch, reference, outs[0], lses[0], report);
  correct(config, report);
  fj_kernel_destroy(kernel);
}

// An fp8 (e4m3) cache: the CPU backend reads each byte as fj::e4m3_to_float times its kv head's
// k_scale or v_scale; the reference computes on the same dequantized values.
TEST_CASE("CPU: an fp8 cache matches the reference on its dequantized values", "[cpu][fp8]") {
  struct Case {
    const char* mask;
    const char* score;
    std::vector<std::pair<std::string, std::string>> defines;
    int head_dim;
  };
  // Causal and sliding (Full tiles and kv ranges), a score with a softcap that bends, and a mask
  // reading an array (document ids).
  const std::vector<Case> cases = {{"causal", "", {}, 128},
                                   {"sliding", "", {}, 64},
                                   {"causal", "softcap", {{"cap", "2.5"}}, 80},
                                   {"document", "", {}, 256}};
  const Case& c = cases[GENERATE(range(0, 4))];
  flexjit::PagedCheckConfig config;
  config.mask = c.mask;
  config.score = c.score;
  config.defines = c.defines;
  config.head_dim = c.head_dim;
  config.kv_fp8 = true;
  config.kv_scale = GENERATE(flexjit::KvScale::Tensor, flexjit::KvScale::Head);
  config.dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  config.page_size = GENERATE(16, 64);
  config.layout = GENERATE(flexjit::KvLayout::NHD, flexjit::KvLayout::HND);
  config.num_heads = 8;
  config.num_kv_heads = 2;
  config.query_lens = {1, 7, 130};
  config.context_lens = {300, 60, 0};
  config.params = params_with_window(100);
  config.seed = 21;
  const flexjit::PagedCheckReport report = check(config);
  CHECK(report.kernel_name.find("_kvfp8_page") != std::string::npos);
  CHECK(report.visible_pairs > 0);
  correct(config, report);
}

TEST_CASE("CPU: an fp8 cache in the joint layouts", "[cpu][fp8]") {
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.head_dim = 96;
  config.kv_fp8 = true;
  config.layout = GENERATE(flexjit::KvLayout::NHD_JOINT, flexjit::KvLayout::HND_JOINT,
                           flexjit::KvLayout::NHD_2D);
  config.num_heads = 6;
  config.num_kv_heads = 3;
  config.query_lens = {1, 70};
  config.context_lens = {200, 30};
  config.params = params_with_window(0);
  correct(config, check(config));
}

TEST_CASE("CPU: attention sinks over an fp8 cache", "[cpu][fp8]") {
  flexjit::PagedCheckConfig config;
  config.mask = GENERATE("causal", "sliding");
  config.kv_fp8 = true;
  config.kv_scale = GENERATE(flexjit::KvScale::Tensor, flexjit::KvScale::Head);
  config.num_heads = 6;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.query_lens = {1, 90, 33};
  config.context_lens = {300, 17, 0};
  config.params = params_with_window(GENERATE(50, -3));  // -3: rows see no key, only the sink
  config.sinks = {0.5f, 3.0f, -std::numeric_limits<float>::infinity(), 6.0f, -2.0f, 1.0f};
  INFO(describe(config));
  correct(config, check(config));
}

// The fp8 checks' inputs: every owned element a finite byte worth its dequantized value, bytes
// spread from subnormals (and zero) to 448 with none clipped, NaN in the slots no request owns.
TEST_CASE("fp8 check inputs span the e4m3 range", "[cpu][fp8]") {
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.kv_fp8 = true;
  config.kv_scale = GENERATE(flexjit::KvScale::Tensor, flexjit::KvScale::Head);
  config.num_heads = 4;
  config.num_kv_heads = 4;
  config.query_lens = {64, 1};
  config.context_lens = {500, 200};
  auto inputs = flexjit::make_paged_inputs(config);
  REQUIRE(inputs.ok());
  const bool per_head = config.kv_scale == flexjit::KvScale::Head;
  REQUIRE(inputs->kv_fp8());
  CHECK(inputs->k_bits.empty());
  CHECK(inputs->k_scale.size() == (per_head ? 4u : 1u));
  CHECK(inputs->v_scale.size() == inputs->k_scale.size());
  CHECK(inputs->kv_scale_stride == (per_head ? 1 : 0));
  for (const std::vector<float>* scales : {&inputs->k_scale, &inputs->v_scale})
    for (const float scale : *scales)
      CHECK((scale > 0.0f && std::isfinite(scale)));
  const flexjit::HostPagedBatch& batch = inputs->batch;
  const int64_t d = config.head_dim;
  int64_t owned = 0, zeros = 0, subnormals = 0, large = 0, wrong = 0, unowned_wrong = 0;
  std::vector<bool> seen(256, false);
  for (const auto& [bytes, cache, scales] :
       {std::tuple{&inputs->k_fp8, &batch.k, &inputs->k_scale},
        std::tuple{&inputs->v_fp8, &batch.v, &inputs->v_scale}}) {
    REQUIRE(bytes->size() == cache->values.size());
    for (size_t i = 0; i < bytes->size(); ++i) {
      const uint32_t byte = (*bytes)[i];
      if (std::isnan(cache->values[i])) {  // no request's
        unowned_wrong += byte != 0x7f;
        continue;
      }
      ++owned;
      seen[byte] = true;
      const uint32_t magnitude = byte & 0x7f;
      zeros += magnitude == 0;
      subnormals += magnitude > 0 && magnitude < 8;
      large += magnitude >= 0x78;                                             // 256 or more
      const int64_t head = static_cast<int64_t>(i) % cache->stride_slot / d;  // NHD
      const float want = fj::e4m3_to_float(byte) * (*scales)[head * inputs->kv_scale_stride];
      wrong += magnitude == 0x7f || cache->values[i] != want;
    }
  }
  CHECK(owned == 2 * (564 + 201) * 4 * d);
  CHECK(wrong == 0);
  CHECK(unowned_wrong == 0);
  CHECK(zeros > 0);
  CHECK(subnormals > 0);
  CHECK(large > 0);
  // Of the 254 finite bytes, those the normal part's far tail (200 to 240) hardly reaches may be
  // missing.
  CHECK(std::count(seen.begin(), seen.end(), true) >= 240);
}

namespace {

// The value of e4m3 bits by the format's definition (OCP 8-bit floating point, E4M3: bias 7,
// subnormals m/8 * 2^-6, S.1111.111 NaN, no infinities), written apart from fj::e4m3_to_float.
double e4m3_by_definition(uint32_t byte) {
  const double sign = (byte & 0x80) != 0 ? -1.0 : 1.0;
  const int exponent = (byte >> 3) & 15;
  const int mantissa = byte & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa / 8.0, -6);
  return sign * std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
}

// The byte e4m3_from_float must give for `x` (not NaN), by brute force: the nearest of the finite
// values, ties to the even byte (the even mantissa), magnitudes past 448 saturated to 448.
uint32_t e4m3_nearest(double x) {
  const double magnitude = std::min(std::abs(x), 448.0);
  uint32_t best = 0;
  for (uint32_t byte = 1; byte <= 0x7e; ++byte) {
    const double distance = std::abs(e4m3_by_definition(byte) - magnitude);
    const double best_distance = std::abs(e4m3_by_definition(best) - magnitude);
    if (distance < best_distance || (distance == best_distance && byte % 2 == 0)) best = byte;
  }
  return (std::signbit(x) ? 0x80u : 0u) | best;
}

float float_of_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

TEST_CASE("e4m3_to_float gives every byte its value by the format's definition", "[fp8]") {
  for (uint32_t byte = 0; byte < 256; ++byte) {
    INFO("byte " << byte);
    const double want = e4m3_by_definition(byte);
    const float got = fj::e4m3_to_float(byte);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      continue;
    }
    CHECK(got == want);
    CHECK(std::signbit(got) == std::signbit(want));  // 0x80 is -0
  }
  CHECK(fj::e4m3_to_float(0x7e) == fj::kE4m3Max);
  CHECK(fj::e4m3_to_float(0x38) == 1.0f);
  CHECK(fj::e4m3_to_float(0x01) == 0x1p-9f);
  CHECK(fj::e4m3_to_float(0x08) == 0x1p-6f);
  CHECK(fj::e4m3_to_float(0xfe) == -448.0f);
}

TEST_CASE("every finite e4m3 byte round-trips through float", "[fp8]") {
  for (uint32_t byte = 0; byte < 256; ++byte) {
    if ((byte & 0x7f) == 0x7f) continue;  // NaN
    INFO("byte " << byte);
    CHECK(fj::e4m3_from_float(fj::e4m3_to_float(byte)) == byte);
  }
}

TEST_CASE("e4m3_from_float rounds to nearest, ties to even", "[fp8]") {
  // Halfway between two neighbours goes to the even byte; a float step either side, to the
  // nearer one (also across an exponent, 0x07/0x08 and 0x0f/0x10, and between 0 and 2^-9).
  for (const uint32_t sign : {0u, 0x80u}) {
    for (uint32_t byte = sign; byte < sign + 0x7e; ++byte) {
      INFO("between bytes " << byte << " and " << byte + 1);
      const float low = fj::e4m3_to_float(byte);
      const float high = fj::e4m3_to_float(byte + 1);
      const float tie = 0.5f * (low + high);
      CHECK(fj::e4m3_from_float(tie) == (byte % 2 == 0 ? byte : byte + 1));
      CHECK(fj::e4m3_from_float(std::nextafter(tie, low)) == byte);
      CHECK(fj::e4m3_from_float(std::nextafter(tie, high)) == byte + 1);
    }
  }
  CHECK(fj::e4m3_from_float(17.0f) == 0x58);  // 16 and 18: to 16
  CHECK(fj::e4m3_from_float(19.0f) == 0x5a);  // 18 and 20: to 20
  CHECK(fj::e4m3_from_float(-1.0625f) == 0xb8);
}

TEST_CASE("e4m3_from_float matches the nearest e4m3 for every bf16 and fp16 value", "[fp8]") {
  int64_t checked = 0, wrong = 0;
  const auto check_value = [&](float x) {
    ++checked;
    const uint32_t got = fj::e4m3_from_float(x);
    if (std::isnan(x)) {
      wrong += (got & 0x7f) != 0x7f || (got >> 7) != (std::signbit(x) ? 1u : 0u);
    } else if (got != e4m3_nearest(x)) {
      if (wrong++ < 10)
        UNSCOPED_INFO(fmt::format("{:a} gives {:#x}, want {:#x}", x, got, e4m3_nearest(x)));
    }
  };
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    check_value(float_of_bits(bits << 16));  // bf16
    check_value(flexjit::from_bits(static_cast<uint16_t>(bits), FJ_DTYPE_FP16));
  }
  // float32s of every exponent with random mantissas: rounding just off the halfway points.
  std::mt19937_64 rng(8);
  for (int i = 0; i < 1000000; ++i)
    check_value(float_of_bits(static_cast<uint32_t>(rng())));
  CHECK(checked == 2 * 65536 + 1000000);
  CHECK(wrong == 0);
}

TEST_CASE("e4m3_from_float saturates to 448 and keeps NaN", "[fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x : {448.0f, 448.001f, 464.0f, 480.0f, 1e6f, 3.4e38f, inf}) {
    INFO(x);
    CHECK(fj::e4m3_from_float(x) == 0x7e);
    CHECK(fj::e4m3_from_float(-x) == 0xfe);
  }
  CHECK(fj::e4m3_from_float(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(fj::e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()) == 0xff);
  CHECK(fj::e4m3_from_float(float_of_bits(0x7f800001u)) == 0x7f);  // signalling
  CHECK(std::isnan(fj::e4m3_to_float(0x7f)));
  CHECK(std::isnan(fj::e4m3_to_float(0xff)));
}

TEST_CASE("e4m3_from_float rounds into the subnormals in steps of 2^-9", "[fp8]") {
  CHECK(fj::e4m3_from_float(0x1p-9f) == 0x01);
  CHECK(fj::e4m3_from_float(0x3p-9f) == 0x03);
  CHECK(fj::e4m3_from_float(0x7p-9f) == 0x07);
  CHECK(fj::e4m3_from_float(0x1p-6f) == 0x08);   // the smallest normal
  CHECK(fj::e4m3_from_float(0x1p-10f) == 0x00);  // halfway to 2^-9: to 0
  CHECK(fj::e4m3_from_float(0x3p-10f) == 0x02);  // halfway between 1 and 2 steps: to 2
  CHECK(fj::e4m3_from_float(0xfp-10f) == 0x08);  // halfway between 7 steps and 2^-6: to 2^-6
  CHECK(fj::e4m3_from_float(0x1.2p-10f) == 0x01);
  CHECK(fj::e4m3_from_float(0x1p-12f) == 0x00);
  CHECK(fj::e4m3_from_float(-0x1p-12f) == 0x80);
  CHECK(fj::e4m3_from_float(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(fj::e4m3_from_float(-0.0f) == 0x80);
}

TEST_CASE("the CPU thread pool runs every index once and passes exceptions on", "[cpu]") {
  for (const unsigned threads : {1u, 3u, 8u}) {
    flexjit::cpu::ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (const int64_t count : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> seen(count);
      pool.run(count, [&](int64_t i) { ++seen[i]; });
      CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& n) { return n == 1; }));
    }
    CHECK_THROWS_AS(pool.run(100,
                             [](int64_t i) {
                               if (i == 42) throw std::runtime_error("42");
                             }),
                    std::runtime_error);
    std::atomic<int64_t> sum{0};
    pool.run(10, [&](int64_t i) { sum += i; });  // usable after an exception
    CHECK(sum == 45);
  }
}
