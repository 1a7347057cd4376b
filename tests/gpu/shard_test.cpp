// [gpu] tests of context parallelism on CUDA (since 0.10, docs/context_parallel.md): a batch's
// keys dealt into 2-8 shards (vLLM's interleaved layout in runs of 1 to 100 keys, or contiguous
// ranges cut at random, uneven, at times empty), each shard run as one sharded call (the prefill
// kernels directly, or a plan per shard so that decode rows take the split-KV decode kernel),
// the states merged by fj_merge_states_n on the device, against the float64 reference and the
// CPU backend's unsharded call; and fj_merge_states_n's CUDA kernel against the float64 merge.
// Run on a machine with a CUDA GPU: build/bin/flexjit_tests_gpu "[shard]"
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "check/paged_check.h"
#include "check/shard_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"
#include "merge_states_check.h"
#include "shard_check_asserts.h"

namespace {

using flexjit::PagedLaunch;
using flexjit::ShardLayout;
using flexjit::testing::fixture;
using flexjit::testing::params_with_window;

struct Batch {
  const char* what;
  std::vector<int> query_lens;
  std::vector<int> context_lens;
};

// Decode steps (long, short and a request shorter than one run of a shard), a mixed batch of
// decodes and prefill chunks, a prompt, and requests of a few keys (later shards hold none).
const std::vector<Batch>& batches() {
  static const std::vector<Batch> all = {
      {"decode", {1, 1, 1, 1, 2}, {3000, 700, 64, 5, 1500}},
      {"mixed", {1, 300, 1, 40, 3}, {5000, 0, 100, 2000, 900}},
      {"prompt", {700}, {300}},
      {"few keys", {1, 2, 1}, {3, 0, 1}},
  };
  return all;
}

}  // namespace

TEST_CASE("sharded calls on CUDA merge into the unsharded result (context parallelism)",
          "[gpu][shard]") {
  const std::vector<const char*> masks = {
      "causal", "sliding", "prefix_lm",     "document",     "causal_alibi", "causal_softcap",
      "rswa",   "chunked", "prefix_ranges", "gemma2_local", "sliding_sym",  "bidirectional"};
  const std::vector<int> head_dims = {128, 64, 256, 96};  // wgmma, and mma.sync at 96
  const std::vector<int> interleaves = {1, 3, 16, 64, 100};
  std::mt19937 rng(3601);
  const auto below = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  flexjit::testing::ShardSweepReach reach;
  constexpr int kCases = 36;
  for (int i = 0; i < kCases; ++i) {
    flexjit::PagedCheckConfig config;
    config.mask = masks[i % masks.size()];
    config.dtype = i % 5 == 4 ? FJ_DTYPE_FP16 : FJ_DTYPE_BF16;
    config.head_dim = head_dims[below(static_cast<int>(head_dims.size()))];
    config.page_size = i % 4 == 3 ? 64 : 16;
    config.num_heads = 8;
    config.num_kv_heads = i % 3 == 0 ? 8 : 2;
    config.layout = i % 7 == 6 ? flexjit::KvLayout::HND : flexjit::KvLayout::NHD;
    config.params = params_with_window(i % 2 == 0 ? 100 : 1024);
    if (std::string(config.mask) == "chunked") config.defines = {{"chunk", "256"}};
    // Each mask meets three batches and both launches over the three rounds of the masks.
    const int round = i / static_cast<int>(masks.size());
    const Batch& batch = batches()[(i + round) % batches().size()];
    config.query_lens = batch.query_lens;
    config.context_lens = batch.context_lens;
    config.seed = 3601 + i;
    if (i % 6 == 5) config.kv_fp8 = true;
    if (i % 9 == 8) config.sinks = flexjit::random_sinks(config.num_heads, config.seed);
    config.launch = (i + round) % 2 == 0 ? PagedLaunch::Planned : PagedLaunch::Direct;
    flexjit::ShardCheckConfig shards;
    shards.count = 2 + below(7);
    shards.layout = i % 3 == 2 ? ShardLayout::Contiguous : ShardLayout::Interleaved;
    shards.interleave = interleaves[below(static_cast<int>(interleaves.size()))];
    shards.seed = config.seed;
    INFO(fmt::format("case #{}: {} hd{} {} page {} {}/{} heads{}{}, {} ({}); {} shards, {}", i,
                     config.mask, config.head_dim, config.dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16",
                     config.page_size, config.num_heads, config.num_kv_heads,
                     config.kv_fp8 ? ", fp8 cache" : "", config.sinks.empty() ? "" : ", sinks",
                     batch.what, config.launch == PagedLaunch::Planned ? "planned" : "direct",
                     shards.count,
                     shards.layout == ShardLayout::Contiguous
                         ? std::string("contiguous")
                         : fmt::format("interleave {}", shards.interleave)));
    auto report = flexjit::run_shard_check(fixture().context, fixture().program, config, shards);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    flexjit::testing::require_correct(config, report->merged);
    flexjit::testing::check_against_unsharded(config, *report);
    reach.add(*report);
  }
  reach.check();
}

TEST_CASE("fj_merge_states_n on CUDA matches the float64 merge", "[gpu][shard]") {
  struct Case {
    int states;
    int head_dim;
    fj_dtype dtype;
    bool in_place;
    bool sinks;
  };
  // 100 states take two of the merge's chunks of 64.
  for (const Case& c :
       {Case{1, 128, FJ_DTYPE_BF16, false, false}, Case{2, 64, FJ_DTYPE_FP16, false, true},
        Case{3, 128, FJ_DTYPE_BF16, true, false}, Case{8, 256, FJ_DTYPE_BF16, false, true},
        Case{8, 8, FJ_DTYPE_FP16, true, true}, Case{100, 128, FJ_DTYPE_BF16, false, false},
        Case{5, 80, FJ_DTYPE_BF16, false, false}}) {
    flexjit::MergeStatesCheckConfig config;
    config.dtype = c.dtype;
    config.num_states = c.states;
    config.head_dim = c.head_dim;
    config.num_tokens = 37;  // rows not a multiple of a CTA's 16
    config.num_heads = 6;
    config.in_place = c.in_place;
    config.sinks = c.sinks;
    config.device = FJ_DEVICE_CUDA;
    config.seed = 77 + c.states;
    INFO(fmt::format("{} states, head dim {}, {}{}{}", c.states, c.head_dim,
                     c.dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16", c.in_place ? ", in place" : "",
                     c.sinks ? ", sinks" : ""));
    flexjit::testing::require_merge_states_correct(fixture().context, config);
  }
}
