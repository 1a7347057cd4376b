// [gpu] tests of attention sinks (fj_paged_attention_args.sinks, since 0.7): each head's sink
// logit joins its rows' softmax denominators once, in the wgmma and mma.sync prefill kernels,
// the split-KV decode kernel (a plan that splits a row's keys adds it once, in the merge), CUDA
// graphs and the encoder call; each case against the float64 reference and the CPU backend.
// Run on a machine with a CUDA GPU: build/bin/flexjit_tests_gpu "[sinks]"
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
using flexjit::testing::params_with_window;

void check_with_sinks(flexjit::PagedCheckConfig config, const std::string& what) {
  config.sinks = flexjit::random_sinks(config.num_heads, config.seed);
  config.compare_cpu = true;
  for (const PagedLaunch launch : {PagedLaunch::Direct, PagedLaunch::Planned, PagedLaunch::Graph}) {
    if (config.contiguous && launch != PagedLaunch::Direct) continue;
    config.launch = launch;
    INFO(what << (launch == PagedLaunch::Direct    ? " (direct)"
                  : launch == PagedLaunch::Planned ? " (planned)"
                                                   : " (graph)"));
    auto report = flexjit::run_paged_check(fixture().context, fixture().program, config);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    flexjit::testing::require_correct(config, *report);
  }
}

}  // namespace

TEST_CASE("gpt-oss-shaped layers: sliding 128 and causal, with sinks", "[gpu][sinks]") {
  // gpt-oss: head dim 64, 8 query heads per kv head, sliding-window layers of 128 keys
  // alternating with full causal ones, a sink per head. Fewer heads than its 64, to keep the
  // reference fast; prompts, chunked prefill and decodes in one batch.
  const bool sliding = GENERATE(true, false);
  flexjit::PagedCheckConfig config;
  config.mask = sliding ? "sliding" : "causal";
  config.params = params_with_window(128);
  config.head_dim = 64;
  config.num_heads = 16;
  config.num_kv_heads = 2;
  config.query_lens = {300, 1, 1, 129, 40};
  config.context_lens = {0, 2000, 700, 64, 500};
  config.seed = 31;
  check_with_sinks(config, sliding ? "sliding 128" : "causal");
}

TEST_CASE("sinks in every prefill kernel, decode and the encoder call", "[gpu][sinks]") {
  struct Case {
    const char* what;
    int head_dim;
    fj_dtype dtype;
    const char* mask;
    const char* score;
    bool contiguous;
  };
  // Head dims 128 and 256 take the wgmma kernel's two epilogues, 80 the mma.sync kernel.
  const std::vector<Case> cases = {
      {"hd128 bf16 causal", 128, FJ_DTYPE_BF16, "causal", "", false},
      {"hd256 fp16 sliding softcap", 256, FJ_DTYPE_FP16, "sliding", "softcap", false},
      {"hd80 bf16 document alibi", 80, FJ_DTYPE_BF16, "document", "alibi", false},
      {"hd128 encoder bidirectional", 128, FJ_DTYPE_BF16, "bidirectional", "", true},
      {"hd64 encoder sliding_sym", 64, FJ_DTYPE_FP16, "sliding_sym", "", true},
  };
  for (const Case& c : cases) {
    flexjit::PagedCheckConfig config;
    config.mask = c.mask;
    config.score = c.score;
    if (config.score == "softcap") config.defines.push_back({"cap", "2.5"});
    config.head_dim = c.head_dim;
    config.dtype = c.dtype;
    config.contiguous = c.contiguous;
    config.num_heads = 8;
    config.num_kv_heads = 2;
    config.params = params_with_window(100);
    config.query_lens = c.contiguous ? std::vector<int>{200, 1, 77} : std::vector<int>{1, 200, 3};
    config.context_lens = c.contiguous ? std::vector<int>{0, 0, 0} : std::vector<int>{900, 0, 300};
    config.seed = 47;
    check_with_sinks(config, c.what);
  }
}

TEST_CASE("a plan that splits a row's keys counts its sink once", "[gpu][sinks]") {
  // One request of 20k keys: the plan splits it into many parts, each computed without the
  // sink, which the merge adds once. MQA too, where the merge weighs the splits in chunks.
  const int kv_heads = GENERATE(8, 1);
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.params = params_with_window(0);
  config.num_heads = 32;
  config.num_kv_heads = kv_heads;
  config.query_lens = {1};
  config.context_lens = {20000};
  config.seed = 5;
  check_with_sinks(config, fmt::format("20k keys, {} kv heads", kv_heads));
}

TEST_CASE("rows with no visible key and a sink get out 0 and lse the sink", "[gpu][sinks]") {
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.params = params_with_window(GENERATE(0, -3));
  config.num_heads = 10;
  config.num_kv_heads = 2;
  config.head_dim = GENERATE(64, 96);
  config.query_lens = {1, 70, 1};
  config.context_lens = {5000, 0, 10};
  config.seed = 9;
  check_with_sinks(config, fmt::format("hd{}", config.head_dim));
}
