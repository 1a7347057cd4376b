// [gpu] tests: the paged prefill kernel against the float64 reference on random inputs, with
// poisoned outputs, shuffled block tables and garbage past each sequence (tools/check/paged_check).
// Run on a machine with a CUDA GPU: build/bin/flexjit_tests_gpu
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "check/ops_check.h"
#include "check/paged_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"
#include "merge_states_check.h"

namespace {

using flexjit::testing::fixture;

int32_t slot_of(const char* name) {
  int32_t slot = -1;
  REQUIRE(fj_program_param_slot(fixture().program, name, &slot) == FJ_SUCCESS);
  return slot;
}

// Also runs the CPU backend on the same inputs (require_correct compares the two outputs).
flexjit::PagedCheckReport check(const flexjit::PagedCheckConfig& config) {
  flexjit::PagedCheckConfig with_cpu = config;
  with_cpu.compare_cpu = true;
  auto report = flexjit::run_paged_check(fixture().context, fixture().program, with_cpu);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  return *report;
}

}  // namespace

using flexjit::testing::require_correct;

TEST_CASE("paged prefill matches the float64 reference", "[gpu]") {
  const std::string mask = GENERATE("causal", "sliding");
  const int page_size = GENERATE(16, 64);
  const int group = GENERATE(1, 4);
  const fj_dtype dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  const int head_dim = GENERATE(64, 128);

  flexjit::PagedCheckConfig config;
  config.mask = mask;
  config.dtype = dtype;
  config.head_dim = head_dim;
  config.page_size = page_size;
  config.num_kv_heads = 2;
  config.num_heads = 2 * group;
  // Query lengths 1 (decode), 7 and 300 in one batch, with cached context before them.
  config.query_lens = {1, 7, 300, 1};
  config.context_lens = {700, 50, 0, 33};
  config.layout = page_size == 16 ? flexjit::KvLayout::NHD : flexjit::KvLayout::HND;
  config.params.assign(1, 0);
  config.params[slot_of("window")] = 100;
  config.seed = 1000 + page_size + group + head_dim;
  require_correct(config, check(config));
}

// The masks and scores of the full language: arrays (prefix lengths, document ids, ALiBi
// slopes), float scores, compile-time constants overridden so that chunk boundaries fall
// inside the batch. Arrays are random but shaped by their dimension names (random_arrays).
TEST_CASE("the standard library's masks and scores match the reference", "[gpu]") {
  struct Case {
    const char* mask;
    const char* score;
    std::vector<std::pair<std::string, std::string>> defines;
  };
  const std::vector<Case> cases = {
      {"prefix_lm", "", {}},
      {"rswa", "", {}},
      {"chunked", "", {{"chunk", "96"}}},
      {"document", "", {}},
      {"prefix_ranges", "", {}},
      {"causal_softcap", "", {{"cap", "2.5"}}},  // a small cap so the tanh really bends
      {"causal_alibi", "", {}},
      {"gemma2_local", "", {}},
      {"sliding", "alibi", {}},
      {"document", "softcap", {{"cap", "4"}}},
  };
  for (const Case& c : cases) {
    for (const fj_dtype dtype : {FJ_DTYPE_BF16, FJ_DTYPE_FP16}) {
      flexjit::PagedCheckConfig config;
      config.mask = c.mask;
      config.score = c.score;
      config.defines = c.defines;
      config.dtype = dtype;
      config.head_dim = 128;
      config.page_size = 16;
      config.num_kv_heads = 2;
      config.num_heads = 8;
      config.query_lens = {1, 7, 300, 129};
      config.context_lens = {700, 50, 0, 200};
      config.params.assign(1, 0);
      config.params[slot_of("window")] = 100;
      config.seed = 77 + static_cast<int>(dtype);
      const flexjit::PagedCheckReport report = check(config);
      INFO(c.mask << " " << c.score);
      require_correct(config, report);
      CHECK(report.visible_pairs > 0);
    }
  }
}

// The debug launch flag: a document-id array shorter than the sequences reads 0 past its end
// (never out of bounds) and the first such read is reported; in-range arrays report nothing.
TEST_CASE("check_bounds reports the first out-of-range array read", "[gpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "document";
  config.head_dim = 64;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.query_lens = {7, 300};
  config.context_lens = {50, 0};
  config.params.assign(1, 0);
  config.check_bounds = true;
  const auto arrays = flexjit::random_arrays({{"prefix_len", flexjit::dsl::Type::Int, 0, {"b"}},
                                              {"ranges", flexjit::dsl::Type::Int, 1, {"b", "r"}},
                                              {"doc", flexjit::dsl::Type::Int, 2, {"b", "kv"}},
                                              {"slopes", flexjit::dsl::Type::Float, 3, {"h"}}},
                                             2, 4, 300, 5);
  config.arrays = arrays;
  flexjit::PagedCheckReport report = check(config);
  require_correct(config, report);
  CHECK(report.bad_index[0] == 0);

  // Keep the first 100 positions of each request's document ids.
  flexjit::HostArray& doc = config.arrays[2];
  std::vector<int32_t> kept;
  for (int r = 0; r < doc.rows; ++r) {
    kept.insert(kept.end(), doc.bits.begin() + r * doc.cols, doc.bits.begin() + r * doc.cols + 100);
  }
  doc.cols = 100;
  doc.bits = kept;
  report = check(config);
  require_correct(config, report);  // the reference reads 0 past the end too
  CHECK(report.bad_index[0] == 1);
  CHECK(report.bad_index[1] == 2);
  CHECK(report.bad_index[3] >= 100);
}

// The encoder path with array-driven masks: documents in packed encoder batches.
TEST_CASE("encoder path runs document and softcap variants", "[gpu]") {
  for (const char* mask : {"document", "gemma2_global"}) {
    flexjit::PagedCheckConfig config;
    config.mask = mask;
    config.contiguous = true;
    config.head_dim = 64;
    config.num_heads = 4;
    config.num_kv_heads = 4;
    config.query_lens = {300, 77};
    config.context_lens = {0, 0};
    config.params.assign(1, 0);
    config.seed = 9;
    INFO(mask);
    require_correct(config, check(config));
  }
}

TEST_CASE("rows with no visible key give 0 and lse -inf", "[gpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 64;
  config.query_lens = {5, 70};
  config.context_lens = {10, 0};
  config.params.assign(1, 0);
  const int window = GENERATE(0, -3);
  config.params[slot_of("window")] = window;
  const auto report = check(config);
  CHECK(report.visible_pairs == 0);
  require_correct(config, report);
}

TEST_CASE("a window wider than the sequence equals causal", "[gpu]") {
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.num_heads = 8;
  config.num_kv_heads = 1;  // MQA
  config.query_lens = {129, 64};
  config.context_lens = {1000, 3};
  config.params.assign(1, 0);
  config.params[slot_of("window")] = 1 << 30;
  const auto report = check(config);
  // Every request's rows see every key up to their own position.
  CHECK(report.visible_pairs == 8 * ((129LL * 1000 + 129 * 130 / 2) + (64LL * 3 + 64 * 65 / 2)));
  require_correct(config, report);
}

TEST_CASE("every head dim, both layouts", "[gpu]") {
  const int head_dim = GENERATE(80, 96, 256);
  const auto layout = GENERATE(flexjit::KvLayout::NHD, flexjit::KvLayout::HND);
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.head_dim = head_dim;
  config.layout = layout;
  config.page_size = 32;
  config.num_heads = 8;
  config.num_kv_heads = 4;
  config.query_lens = {1, 77, 200};
  config.context_lens = {300, 20, 0};
  config.params.assign(1, 0);
  config.params[slot_of("window")] = 150;
  config.seed = head_dim;
  require_correct(config, check(config));
}

TEST_CASE("negative and positive softmax scales", "[gpu]") {
  // Without a score hook the kernels fold a positive scale into exp2's argument; a negative
  // scale (legal: score = scale * q.k) takes the multiply. Prefill rows and decode. (A scale of
  // 0 means 1 / sqrt(head_dim) in the C API.)
  const float scale = GENERATE(-0.3f, 0.2f);
  const int head_dim = GENERATE(64, 128, 256);
  const std::string mask = GENERATE("causal", "document");
  flexjit::PagedCheckConfig config;
  config.mask = mask;
  config.scale = scale;
  config.head_dim = head_dim;
  config.num_heads = 8;
  config.num_kv_heads = 2;
  config.query_lens = {1, 150, 70};
  config.context_lens = {400, 30, 0};
  config.params.assign(1, 0);
  config.seed = head_dim + static_cast<int>(scale * 10.0f);
  INFO(mask << " hd" << head_dim << " scale " << scale);
  require_correct(config, check(config));
}

TEST_CASE("page sizes up to 256", "[gpu]") {
  const int page_size = GENERATE(32, 128, 256);
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.head_dim = 64;
  config.page_size = page_size;
  config.num_heads = 4;
  config.num_kv_heads = 4;
  config.query_lens = {3, 130};
  config.context_lens = {600, 257};
  config.params.assign(1, 0);
  require_correct(config, check(config));
}

TEST_CASE("encoder path: contiguous K/V with cu_seqlens", "[gpu]") {
  const std::string mask = GENERATE("bidirectional", "sliding_sym", "causal");
  const fj_dtype dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  flexjit::PagedCheckConfig config;
  config.contiguous = true;
  config.mask = mask;
  config.dtype = dtype;
  config.head_dim = 64;
  config.num_heads = 6;
  config.num_kv_heads = 2;
  config.query_lens = {1, 100, 257, 0, 64};
  config.context_lens = {0, 0, 0, 0, 0};
  config.params.assign(1, 0);
  config.params[slot_of("window")] = 40;
  const auto report = check(config);
  if (mask == "bidirectional") {
    CHECK(report.visible_pairs == 6 * (1LL + 100 * 100 + 257 * 257 + 64 * 64));
  }
  require_correct(config, report);
}

TEST_CASE("KV-cache write skips padding and out-of-range slots", "[gpu]") {
  flexjit::KvCacheWriteCheckConfig config;
  config.layout = GENERATE(flexjit::KvLayout::NHD, flexjit::KvLayout::HND);
  config.head_dim = GENERATE(64, 128);
  auto report = flexjit::run_kv_cache_write_check(fixture().context, config);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  CHECK(report->written_rows > 0);
  CHECK(report->skipped_tokens > 0);
  CHECK(report->wrong_elements == 0);
}

TEST_CASE("merge_states merges by LSE and keeps empty rows empty", "[gpu]") {
  flexjit::MergeStatesCheckConfig config;
  config.dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  config.in_place = GENERATE(false, true);
  config.sinks = GENERATE(false, true);
  flexjit::testing::require_merge_states_correct(fixture().context, config);
}
