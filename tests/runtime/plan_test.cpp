// The planner (runtime/launch/plan.h) without a GPU: capacities, which requests decode, splits
// that fill one wave and cover every key tile once, prefill order, rejected batches; and NVRTC
// compiles of the split-KV decode kernel of every standard variant.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/flexjit.h"
#include "jit/kernel_source.h"
#include "launch/plan.h"
#include "runtime/ptxas_report.h"
#include "standard_masks.h"

using flexjit::PlanShape;
using flexjit::WorkPlan;
using flexjit::testing::compile_with_report;
using flexjit::testing::kStandardVariants;
using flexjit::testing::PtxasReport;
using flexjit::testing::standard_masks;
using flexjit::testing::Warnings;

namespace {

PlanShape shape_of(int reqs, int tokens, int max_query_len, int heads, int kv_heads, int wave) {
  PlanShape shape;
  shape.max_num_reqs = reqs;
  shape.max_num_tokens = tokens;
  shape.max_query_len = max_query_len;
  shape.num_heads = heads;
  shape.num_kv_heads = kv_heads;
  shape.page_size = 16;
  shape.decode_wave = wave;
  return shape;
}

struct Batch {
  std::vector<int32_t> qsl{0};
  std::vector<int32_t> seq_lens;
  void add(int query_len, int seq_len) {
    qsl.push_back(qsl.back() + query_len);
    seq_lens.push_back(seq_len);
  }
};

WorkPlan plan_of(const PlanShape& shape, const Batch& batch, int64_t max_blocks = 1 << 20) {
  WorkPlan plan;
  auto built = flexjit::build_plan(shape, batch.qsl, batch.seq_lens, max_blocks, plan);
  INFO((built ? std::string() : built.error().message));
  REQUIRE(built.ok());
  return plan;
}

std::string plan_error(const PlanShape& shape, const Batch& batch, int64_t max_blocks = 1 << 20) {
  WorkPlan plan;
  auto built = flexjit::build_plan(shape, batch.qsl, batch.seq_lens, max_blocks, plan);
  return built ? std::string() : built.error().message;
}

// Every (request, kv head, row block) of the decode list: its splits are 0..n-1 exactly once,
// share n, slots partial..partial+n-1 and one merge counter, and no two groups share either.
void check_decode_cover(const WorkPlan& plan, const PlanShape& shape) {
  std::map<std::tuple<int, int, int>, std::vector<fj::DecodeWorkItem>> groups;
  for (const fj::DecodeWorkItem& item : plan.decode)
    groups[{item.request, item.kv_head, item.row0}].push_back(item);
  std::vector<int> slot_owner;
  std::vector<int> merge_owner;
  int index = 0;
  for (auto& [key, items] : groups) {
    const int n = items.front().num_splits;
    REQUIRE(static_cast<int>(items.size()) == n);
    std::sort(items.begin(), items.end(),
              [](const auto& a, const auto& b) { return a.split < b.split; });
    for (int s = 0; s < n; ++s) {
      CHECK(items[s].split == s);
      CHECK(items[s].num_splits == n);
      CHECK(items[s].partial == items[0].partial);
      CHECK(items[s].merge == items[0].merge);
    }
    if (n > 1) {
      for (int s = 0; s < n; ++s) {
        const int slot = items[0].partial + s;
        if (slot >= static_cast<int>(slot_owner.size())) slot_owner.resize(slot + 1, -1);
        CHECK(slot_owner[slot] == -1);
        slot_owner[slot] = index;
      }
      const int merge = items[0].merge;
      if (merge >= static_cast<int>(merge_owner.size())) merge_owner.resize(merge + 1, -1);
      CHECK(merge_owner[merge] == -1);
      merge_owner[merge] = index;
    }
    ++index;
  }
  auto capacity = flexjit::plan_capacity(shape);
  REQUIRE(capacity.ok());
  CHECK(static_cast<int64_t>(slot_owner.size()) <= capacity->partial_slots);
  CHECK(static_cast<int64_t>(merge_owner.size()) <= capacity->merge_counters);
  CHECK(static_cast<int64_t>(plan.decode.size()) <= capacity->decode_items);
  CHECK(static_cast<int64_t>(plan.prefill.size()) <= capacity->prefill_items);
}

}  // namespace

TEST_CASE("a decode batch that fills the device is not split", "[plan]") {
  const PlanShape shape = shape_of(64, 64, 1, 32, 8, 264);
  Batch batch;
  for (int r = 0; r < 64; ++r)
    batch.add(1, 4096);
  const WorkPlan plan = plan_of(shape, batch);
  CHECK(plan.counts.prefill == 0);
  CHECK(plan.counts.decode == 64 * 8);  // 4 packed rows per request: one row block
  for (const fj::DecodeWorkItem& item : plan.decode) {
    CHECK(item.num_splits == 1);
    CHECK(item.row0 == 0);
  }
  check_decode_cover(plan, shape);
}

TEST_CASE("few long requests are split to fill one wave", "[plan]") {
  const PlanShape shape = shape_of(4, 4, 1, 32, 8, 264);
  for (int reqs : {1, 2, 4}) {
    Batch batch;
    for (int r = 0; r < reqs; ++r)
      batch.add(1, 131072);
    const WorkPlan plan = plan_of(shape, batch);
    CHECK(plan.counts.decode <= 264);
    CHECK(plan.counts.decode > 264 - reqs * 8);  // one split fewer per group would not fill it
    const int splits = plan.decode.front().num_splits;
    CHECK(splits == 264 / (reqs * 8));
    check_decode_cover(plan, shape);
  }
}

TEST_CASE("splits never go below the minimum chunk", "[plan]") {
  const PlanShape shape = shape_of(1, 1, 1, 8, 8, 10000);
  Batch batch;
  batch.add(1, 64 * 40);  // 40 tiles: at most 10 splits of 4 tiles
  const WorkPlan plan = plan_of(shape, batch);
  CHECK(plan.decode.front().num_splits == 10);
  check_decode_cover(plan, shape);
  Batch tiny;
  tiny.add(1, 100);
  CHECK(plan_of(shape, tiny).decode.front().num_splits == 1);
}

TEST_CASE("large GQA groups and speculative tokens take several row blocks", "[plan]") {
  // MQA with 32 query heads: 32 packed rows, two row blocks reading the same keys.
  const PlanShape mqa = shape_of(8, 8, 1, 32, 1, 264);
  Batch batch;
  for (int r = 0; r < 8; ++r)
    batch.add(1, 2000 + r);
  const WorkPlan plan = plan_of(mqa, batch);
  CHECK(plan.counts.prefill == 0);
  check_decode_cover(plan, mqa);
  std::set<int> rows;
  for (const auto& item : plan.decode)
    rows.insert(item.row0);
  CHECK(rows == std::set<int>{0, 16});
  // Adjacent items of one (request, head, split) are its row blocks.
  CHECK(plan.decode[0].request == plan.decode[1].request);
  CHECK(plan.decode[0].split == plan.decode[1].split);
  CHECK(plan.decode[0].row0 != plan.decode[1].row0);

  // Group 8 and 4 speculative tokens: 32 rows still decode; 5 tokens (40 rows) prefill.
  const PlanShape spec = shape_of(2, 16, 5, 64, 8, 264);
  Batch spec_batch;
  spec_batch.add(4, 1000);
  spec_batch.add(5, 1000);
  const WorkPlan spec_plan = plan_of(spec, spec_batch);
  CHECK(spec_plan.counts.decode > 0);
  CHECK(spec_plan.counts.prefill == 8);
  for (const auto& item : spec_plan.decode)
    CHECK(item.request == 0);
  for (const auto& item : spec_plan.prefill)
    CHECK(item.request == 1);
}

TEST_CASE("a mixed batch: prefill tiles longest first, decodes split only to fill", "[plan]") {
  const PlanShape shape = shape_of(64, 8192, 2048, 32, 8, 264);
  Batch batch;
  batch.add(2048, 2048);        // fresh prompt
  batch.add(2048, 6000);        // chunk with history
  for (int r = 0; r < 60; ++r)  // decodes
    batch.add(1, 1000 + 37 * r);
  const WorkPlan plan = plan_of(shape, batch);
  const int block_m = shape.prefill_block_m;
  CHECK(plan.counts.prefill == (2 * 2048 * 4 / block_m) * 8);
  CHECK(plan.counts.decode == 60 * 8);
  check_decode_cover(plan, shape);
  // Costs never increase along the prefill list.
  const auto cost = [&](const fj::PrefillWorkItem& item) {
    const int r = item.request;
    const int q_len = batch.qsl[r + 1] - batch.qsl[r];
    const int last = std::min(item.row0 + block_m, q_len * 4) - 1;
    return batch.seq_lens[r] - q_len + last / 4 + 1;
  };
  for (size_t i = 1; i < plan.prefill.size(); ++i)
    CHECK(cost(plan.prefill[i - 1]) >= cost(plan.prefill[i]));
  // Every (request, row tile, kv head) exactly once.
  std::set<std::tuple<int, int, int>> seen;
  for (const auto& item : plan.prefill)
    CHECK(seen.insert({item.request, item.row0, item.kv_head}).second);
  // Decode items longest first (in tiles of keys).
  const auto tiles = [&](const fj::DecodeWorkItem& item) {
    return (batch.seq_lens[item.request] + fj::kDecodeBlockN - 1) / fj::kDecodeBlockN;
  };
  for (size_t i = 1; i < plan.decode.size(); ++i)
    CHECK(tiles(plan.decode[i - 1]) >= tiles(plan.decode[i]));
}

TEST_CASE("random batches stay within the plan's capacity", "[plan]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int kv_heads = std::array{1, 2, 8}[rng() % 3];
    const int group = std::array{1, 2, 4, 8, 32}[rng() % 5];
    const int reqs = 1 + static_cast<int>(rng() % 40);
    const int max_query = 1 + static_cast<int>(rng() % 300);
    const int tokens = reqs * max_query;
    PlanShape shape =
        shape_of(reqs, tokens, max_query, kv_heads * group, kv_heads, 1 + rng() % 600);
    shape.prefill_block_m = std::array{64, 128}[rng() % 2];  // the two prefill kernels' rows
    Batch batch;
    const int n = 1 + static_cast<int>(rng() % reqs);
    for (int r = 0; r < n; ++r) {
      const int q = rng() % 3 == 0 ? 1 + static_cast<int>(rng() % max_query) : 1;
      batch.add(q, q + static_cast<int>(rng() % 20000));
    }
    const WorkPlan plan = plan_of(shape, batch);
    check_decode_cover(plan, shape);
  }
}

TEST_CASE("the planner rejects batches that do not fit", "[plan]") {
  const PlanShape shape = shape_of(4, 64, 16, 8, 2, 100);
  Batch ok;
  ok.add(4, 100);
  CHECK(plan_error(shape, ok).empty());

  Batch too_many;
  for (int r = 0; r < 5; ++r)
    too_many.add(1, 10);
  CHECK(plan_error(shape, too_many).find("max_num_reqs") != std::string::npos);

  Batch too_long;
  too_long.add(17, 100);
  CHECK(plan_error(shape, too_long).find("max_query_len") != std::string::npos);

  Batch too_many_tokens;
  for (int r = 0; r < 4; ++r)
    too_many_tokens.add(16, 100);
  too_many_tokens.qsl.back() = 65;  // a last request of 17 tokens would also be too long
  CHECK(!plan_error(shape, too_many_tokens).empty());

  Batch decreasing;
  decreasing.add(4, 100);
  decreasing.add(4, 100);
  decreasing.qsl[1] = 10;  // request 1 would own [10, 8)
  CHECK(plan_error(shape, decreasing).find("decreases") != std::string::npos);

  // Fewer keys than query tokens: a shard's (context parallelism), planned and recorded for
  // run_plan, which refuses it to a run that holds every key.
  Batch short_seq;
  short_seq.add(1, 100);
  short_seq.add(8, 4);
  short_seq.add(3, 0);
  const WorkPlan short_plan = plan_of(shape, short_seq);
  CHECK(short_plan.short_request == 1);
  CHECK(short_plan.short_seq_len == 4);
  CHECK(short_plan.short_query_len == 8);
  Batch whole;
  whole.add(2, 100);
  CHECK(plan_of(shape, whole).short_request == -1);
  Batch negative_seq;
  negative_seq.add(1, -1);
  CHECK(plan_error(shape, negative_seq).find("negative") != std::string::npos);

  Batch beyond_table;
  beyond_table.add(1, 16 * 10 + 1);
  CHECK(plan_error(shape, beyond_table, 10).find("block table") != std::string::npos);
  CHECK(plan_error(shape, beyond_table, 11).empty());

  Batch not_at_zero;
  not_at_zero.add(1, 10);
  not_at_zero.qsl = {3, 4};
  CHECK(plan_error(shape, not_at_zero).find("query_start_loc[0]") != std::string::npos);

  WorkPlan plan;
  CHECK_FALSE(
      flexjit::build_plan(shape, std::vector<int32_t>{0}, std::vector<int32_t>{5}, 10, plan).ok());

  CHECK_FALSE(flexjit::plan_capacity(shape_of(4, 64, 16, 8, 3, 100)).ok());
  CHECK_FALSE(flexjit::plan_capacity(shape_of(-1, 64, 16, 8, 2, 100)).ok());
  CHECK_FALSE(flexjit::plan_capacity(shape_of(4, 64, 16, 8, 2, 0)).ok());
  CHECK_FALSE(flexjit::plan_capacity(shape_of(1 << 30, 1 << 30, 1 << 30, 64, 1, 100)).ok());
}

TEST_CASE("a decode-only shape has no prefill capacity", "[plan]") {
  auto decode_only = flexjit::plan_capacity(shape_of(256, 256, 1, 32, 8, 264));
  REQUIRE(decode_only.ok());
  CHECK(decode_only->prefill_items == 0);
  CHECK(decode_only->decode_items == 256 * 8);
  auto mixed = flexjit::plan_capacity(shape_of(256, 8192, 2048, 32, 8, 264));
  REQUIRE(mixed.ok());
  CHECK(mixed->prefill_items > 0);
}

TEST_CASE("the decode kernel of every standard variant compiles without spills", "[plan]") {
  const flexjit::dsl::Module& module = standard_masks(Warnings::Refused);
  // Every variant at head dim 128 for Hopper; causal at every head dim and for sm_80.
  std::vector<std::tuple<std::string, int, std::string>> cases;
  for (const char* name : kStandardVariants)
    cases.emplace_back(name, 128, "sm_90a");
  for (int head_dim : {64, 80, 96, 256})
    cases.emplace_back("causal", head_dim, "sm_90a");
  cases.emplace_back("causal", 128, "sm_80");
  for (const auto& [name, head_dim, arch] : cases) {
    auto variant = flexjit::lower_mask(module, name);
    REQUIRE(variant.ok());
    flexjit::PrefillKernelConfig config;
    config.head_dim = head_dim;
    config.page_size = 16;
    config.arch = arch;
    const flexjit::KernelSpec spec = flexjit::decode_kernel_spec(*variant, config);
    const PtxasReport report = compile_with_report(spec);
    INFO(spec.name << "\n" << report.log);
    CHECK(report.resources.spill_store_bytes == 0);
    CHECK(report.resources.spill_load_bytes == 0);
    WARN(spec.name << ": " << report.resources.registers << " registers");
  }
}

TEST_CASE("fj_plan_create refuses CPU kernels and needs a CUDA device", "[plan]") {
  fj_context* context = nullptr;
  REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
  fj_program* program = nullptr;
  REQUIRE(fj_program_create_from_file(context, FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask",
                                      &program) == FJ_SUCCESS);
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = "causal";
  desc.head_dim = 64;
  desc.dtype = FJ_DTYPE_BF16;
  desc.page_size = 16;
  desc.arch = "cpu";
  fj_kernel* cpu = nullptr;
  REQUIRE(fj_kernel_create(context, program, &desc, &cpu) == FJ_SUCCESS);
  fj_plan_shape shape{sizeof(fj_plan_shape), 4, 64, 16, 8, 2};
  fj_plan* plan = nullptr;
  CHECK(fj_plan_create(cpu, &shape, &plan) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fj_context_last_error(context)).find("CUDA kernels") != std::string::npos);
  CHECK(plan == nullptr);
  CHECK(fj_plan_destroy(nullptr) == FJ_SUCCESS);
  fj_kernel_destroy(cpu);
  fj_program_destroy(program);
  fj_context_destroy(context);
}
