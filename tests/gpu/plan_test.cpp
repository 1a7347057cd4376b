// [gpu] tests of planned launches (fj_plan_*): the split-KV decode kernel and the persistent
// prefill grid against the float64 reference, CUDA-graph capture and replay with new lengths,
// and the checks a plan makes on the host.
// Run on a machine with a CUDA GPU: build/bin/flexjit_tests_gpu "[plan]"
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "check/paged_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"

namespace {

using flexjit::PagedLaunch;
using flexjit::testing::fixture;

std::vector<int32_t> params_with(const char* name, int32_t value) {
  int32_t count = 0;
  REQUIRE(fj_program_param_count(fixture().program, &count) == FJ_SUCCESS);
  std::vector<int32_t> params(count, 0);
  if (name != nullptr) {
    int32_t slot = -1;
    REQUIRE(fj_program_param_slot(fixture().program, name, &slot) == FJ_SUCCESS);
    params[slot] = value;
  }
  return params;
}

void require_correct(const flexjit::PagedCheckConfig& config,
                     const flexjit::PagedCheckReport& report) {
  INFO(fmt::format("{} heads {}/{}: rel err {:.3e}, bad {}, empty rows wrong {}, lse err {:.3e}",
                   report.kernel_name, config.num_heads, config.num_kv_heads, report.relative_error,
                   report.bad_outputs, report.empty_rows_wrong, report.lse_max_abs_error));
  CHECK(report.bad_outputs == 0);
  CHECK(report.empty_rows_wrong == 0);
  CHECK(report.relative_error <= flexjit::relative_error_tolerance(config.dtype));
  CHECK(report.lse_max_abs_error <= 2e-2);
}

flexjit::PagedCheckConfig decode_config(const std::string& mask, int heads, int kv_heads) {
  flexjit::PagedCheckConfig config;
  config.mask = mask;
  config.num_heads = heads;
  config.num_kv_heads = kv_heads;
  config.params = params_with(nullptr, 0);
  return config;
}

}  // namespace

TEST_CASE("planned decode matches the reference, split or not", "[gpu][plan]") {
  const PagedLaunch launch = GENERATE(PagedLaunch::Planned, PagedLaunch::Graph);
  struct Case {
    const char* what;
    flexjit::PagedCheckConfig config;
  };
  std::vector<Case> cases;
  {
    auto c = decode_config("causal", 32, 8);  // one long request: many splits
    c.query_lens = {1};
    c.context_lens = {20000};
    cases.push_back({"one request, 20k keys", c});
  }
  {
    auto c = decode_config("causal", 16, 1);  // MQA: 16 rows, one row block
    c.dtype = FJ_DTYPE_FP16;
    c.head_dim = 64;
    c.page_size = 64;
    c.query_lens = {1, 1, 1};
    c.context_lens = {5000, 17, 3000};
    cases.push_back({"MQA 16/1, fp16, hd64, page 64", c});
  }
  {
    // MQA, one long request: 79 splits of 4 tiles on an H100 (two row blocks of 16 rows in 264
    // decode CTAs), so the merge weighs them in two chunks of at most 64.
    auto c = decode_config("causal", 32, 1);
    c.query_lens = {1};
    c.context_lens = {20000};
    cases.push_back({"MQA 32/1, one request, 20k keys", c});
  }
  {
    auto c = decode_config("causal", 32, 1);  // 32 rows: two row blocks sharing each split
    c.layout = flexjit::KvLayout::HND;
    c.query_lens = {1, 1};
    c.context_lens = {3000, 1500};
    cases.push_back({"MQA 32/1, HND", c});
  }
  {
    auto c = decode_config("causal", 32, 4);  // speculative tokens: 4 tokens x group 8
    c.query_lens = {4, 3, 1};
    c.context_lens = {2500, 900, 4000};
    c.layout = flexjit::KvLayout::NHD_JOINT;
    cases.push_back({"4 speculative tokens, group 8, joint NHD", c});
  }
  {
    auto c = decode_config("sliding", 8, 2);  // the split covers the window only
    c.params = params_with("window", 300);
    c.query_lens = {1, 2};
    c.context_lens = {9000, 4000};
    c.page_size = 256;
    cases.push_back({"sliding 300, page 256", c});
  }
  {
    auto c = decode_config("document", 8, 2);  // arrays over positions, summarised
    c.query_lens = {1, 1};
    c.context_lens = {4000, 2500};
    cases.push_back({"document", c});
  }
  {
    auto c = decode_config("causal_softcap", 8, 8);
    c.head_dim = 256;
    c.query_lens = {1};
    c.context_lens = {3000};
    cases.push_back({"softcap, hd256, MHA", c});
  }
  {
    auto c = decode_config("causal_alibi", 12, 4);
    c.head_dim = 80;
    c.dtype = FJ_DTYPE_FP16;
    c.page_size = 32;
    c.layout = flexjit::KvLayout::NHD_2D;
    c.query_lens = {1, 1, 1, 1};
    c.context_lens = {1000, 2000, 0, 3000};
    cases.push_back({"alibi, hd80, page 32, NHD_2D, a first token", c});
  }
  {
    auto c = decode_config("rswa", 8, 2);
    c.head_dim = 96;
    c.params = params_with("window", 200);
    c.query_lens = {1, 1};
    c.context_lens = {3000, 600};
    c.layout = flexjit::KvLayout::HND_JOINT;
    cases.push_back({"rswa, hd96, joint HND", c});
  }
  {
    // Chunked prefill and decodes in one plan, a request with no new token among them.
    auto c = decode_config("causal", 8, 2);
    c.query_lens = {300, 1, 1, 0, 1, 150, 1};
    c.context_lens = {0, 2000, 100, 50, 3000, 700, 1};
    cases.push_back({"mixed batch", c});
  }
  for (Case& test : cases) {
    test.config.launch = launch;
    INFO(test.what << (launch == PagedLaunch::Graph ? " (graph)" : " (planned)"));
    auto report = flexjit::run_paged_check(fixture().context, fixture().program, test.config);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    CHECK(report->visible_pairs > 0);
    require_correct(test.config, *report);
  }
}

TEST_CASE("planned rows with no visible key give 0 and lse -inf", "[gpu][plan]") {
  auto config = decode_config("sliding", 4, 2);
  config.params = params_with("window", GENERATE(0, -3));
  config.query_lens = {1, 1, 70};
  config.context_lens = {5000, 10, 0};
  config.launch = PagedLaunch::Planned;
  auto report = flexjit::run_paged_check(fixture().context, fixture().program, config);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  CHECK(report->visible_pairs == 0);
  require_correct(config, *report);
}

TEST_CASE("a captured plan replays new lengths and block tables", "[gpu][plan]") {
  const std::string mask = GENERATE("causal", "document");
  std::vector<flexjit::PagedCheckConfig> steps;
  const auto step = [&](std::vector<int> query_lens, std::vector<int> context_lens) {
    auto c = decode_config(mask, 16, 4);
    c.query_lens = std::move(query_lens);
    c.context_lens = std::move(context_lens);
    c.seed = 100 + steps.size();
    steps.push_back(std::move(c));
  };
  step({1, 1, 1, 1}, {1000, 2000, 300, 4000});                // decodes, split
  step({200, 1, 1}, {0, 5000, 10});                           // a prompt among decodes
  step({1}, {12000});                                         // one long decode: the most splits
  step({1, 1, 1, 1, 1, 1, 1, 1}, {5, 7, 9, 11, 3, 1, 2, 4});  // short decodes, no split
  step({64, 1, 2}, {3000, 0, 2500});  // a chunk after history, a first token
  auto reports = flexjit::run_graph_replay_check(fixture().context, fixture().program, steps);
  INFO((reports ? std::string() : reports.error().message));
  REQUIRE(reports.ok());
  REQUIRE(reports->size() == steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    INFO("step " << i);
    CHECK((*reports)[i].visible_pairs > 0);
    require_correct(steps[i], (*reports)[i]);
  }
}

TEST_CASE("plans reject what does not fit, without touching the device state", "[gpu][plan]") {
  fj_context* context = fixture().context;
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = "causal";
  desc.head_dim = 128;
  desc.dtype = FJ_DTYPE_BF16;
  desc.page_size = 16;
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(context, fixture().program, &desc, &kernel) == FJ_SUCCESS);
  fj_plan_shape shape{sizeof(fj_plan_shape), 4, 64, 32, 8, 2};
  fj_plan* plan = nullptr;
  CHECK(fj_plan_create(nullptr, &shape, &plan) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_create(kernel, nullptr, &plan) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_create(kernel, &shape, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  fj_plan_shape bad = shape;
  bad.num_kv_heads = 3;
  CHECK(fj_plan_create(kernel, &bad, &plan) == FJ_ERROR_INVALID_ARGUMENT);
  bad = shape;
  bad.struct_size = 8;
  CHECK(fj_plan_create(kernel, &bad, &plan) == FJ_ERROR_INVALID_ARGUMENT);
  REQUIRE(fj_plan_create(kernel, &shape, &plan) == FJ_SUCCESS);

  const int32_t qsl[] = {0, 1, 2};
  const int32_t lens[] = {100, 33};
  CHECK(fj_plan_update(plan, qsl, lens, 2, 10, nullptr) == FJ_SUCCESS);
  CHECK(fj_plan_update(nullptr, qsl, lens, 2, 10, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_update(plan, nullptr, lens, 2, 10, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_update(plan, qsl, lens, 5, 10, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_update(plan, qsl, lens, -1, 10, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  // seq_len 100 needs 7 blocks of 16.
  CHECK(fj_plan_update(plan, qsl, lens, 2, 6, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fj_context_last_error(context)).find("block table") != std::string::npos);
  const int32_t decreasing[] = {0, 2, 1};
  CHECK(fj_plan_update(plan, decreasing, lens, 2, 10, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  const int32_t too_long[] = {0, 33, 34};
  const int32_t long_lens[] = {100, 100};
  CHECK(fj_plan_update(plan, too_long, long_lens, 2, 10, nullptr) == FJ_ERROR_INVALID_ARGUMENT);

  fj_paged_attention_args args{};
  args.struct_size = sizeof(args);
  CHECK(fj_plan_run(nullptr, &args, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_run(plan, nullptr, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_plan_run(plan, &args, nullptr) == FJ_ERROR_INVALID_ARGUMENT);  // null buffers
  fj_plan_destroy(plan);

  desc.page_size = 0;  // an encoder kernel has no plan
  fj_kernel* encoder = nullptr;
  REQUIRE(fj_kernel_create(context, fixture().program, &desc, &encoder) == FJ_SUCCESS);
  CHECK(fj_plan_create(encoder, &shape, &plan) == FJ_ERROR_INVALID_ARGUMENT);
  fj_kernel_destroy(encoder);
  fj_kernel_destroy(kernel);
}
