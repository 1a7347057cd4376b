// [gpu] tests of an fp8 (e4m3) K/V cache (fj_kernel_desc::kv_dtype FJ_DTYPE_FP8_E4M3, since
// 0.8): the wgmma and mma.sync prefill kernels and the split-KV decode kernel read e4m3 K/V with
// per-tensor and per-kv-head scales, for masks and scores of every kind, through direct launches,
// plans (with forced splits) and CUDA graphs; each case against the float64 reference on the
// dequantized K/V and the CPU backend; and the KV-cache write into an fp8 cache, bit for bit.
// Run on a machine with a CUDA GPU: build/bin/flexjit_tests_gpu "[fp8]"
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "check/ops_check.h"
#include "check/paged_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"

namespace {

using flexjit::KvScale;
using flexjit::PagedLaunch;
using flexjit::testing::fixture;
using flexjit::testing::params_with_window;

void check_fp8(flexjit::PagedCheckConfig config, const std::string& what) {
  config.kv_fp8 = true;
  config.compare_cpu = true;
  for (const PagedLaunch launch : {PagedLaunch::Direct, PagedLaunch::Planned, PagedLaunch::Graph}) {
    config.launch = launch;
    INFO(what << (config.kv_scale == KvScale::Head ? ", scale per kv head" : ", scale per tensor")
              << (launch == PagedLaunch::Direct    ? " (direct)"
                  : launch == PagedLaunch::Planned ? " (planned)"
                                                   : " (graph)"));
    auto report = flexjit::run_paged_check(fixture().context, fixture().program, config);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    flexjit::testing::require_correct(config, *report);
  }
}

}  // namespace

TEST_CASE("an fp8 cache in every prefill kernel and in decode", "[gpu][fp8]") {
  struct Case {
    const char* what;
    int head_dim;
    fj_dtype dtype;
    const char* mask;
    const char* score;
    int page_size;
    KvScale kv_scale;
    flexjit::KvLayout layout;
  };
  // Head dims 64, 128 and 256 take the wgmma kernel (on sm_90a) with its two epilogues, 80 and
  // 96 the mma.sync kernel; every case also decodes (the planned launches' one-token rows).
  const std::vector<Case> cases = {
      {"hd128 bf16 causal", 128, FJ_DTYPE_BF16, "causal", "", 16, KvScale::Head,
       flexjit::KvLayout::NHD},
      {"hd128 fp16 sliding", 128, FJ_DTYPE_FP16, "sliding", "", 64, KvScale::Tensor,
       flexjit::KvLayout::HND},
      {"hd64 bf16 prefix_lm", 64, FJ_DTYPE_BF16, "prefix_lm", "", 16, KvScale::Tensor,
       flexjit::KvLayout::NHD},
      {"hd256 bf16 sliding softcap", 256, FJ_DTYPE_BF16, "sliding", "softcap", 16, KvScale::Head,
       flexjit::KvLayout::NHD},
      {"hd80 bf16 document alibi", 80, FJ_DTYPE_BF16, "document", "alibi", 16, KvScale::Head,
       flexjit::KvLayout::HND},
      {"hd96 fp16 chunked", 96, FJ_DTYPE_FP16, "chunked", "", 32, KvScale::Tensor,
       flexjit::KvLayout::NHD},
      {"hd128 bf16 document (staged key terms)", 128, FJ_DTYPE_BF16, "document", "", 16,
       KvScale::Head, flexjit::KvLayout::NHD_JOINT},
  };
  for (const Case& c : cases) {
    flexjit::PagedCheckConfig config;
    config.mask = c.mask;
    config.score = c.score;
    if (config.score == "softcap") config.defines.push_back({"cap", "2.5"});
    config.head_dim = c.head_dim;
    config.dtype = c.dtype;
    config.page_size = c.page_size;
    config.kv_scale = c.kv_scale;
    config.layout = c.layout;
    config.num_heads = 8;
    config.num_kv_heads = 2;
    config.params = params_with_window(100);
    config.query_lens = {1, 300, 3, 1};
    config.context_lens = {900, 0, 300, 2000};
    config.seed = 61;
    check_fp8(config, c.what);
  }
}

TEST_CASE("a plan that splits an fp8 row's keys, with sinks", "[gpu][fp8]") {
  // One request of 20k keys: many splits, each reading e4m3 tiles, merged once with the sink.
  const int kv_heads = GENERATE(8, 1);
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.params = params_with_window(0);
  config.num_heads = 32;
  config.num_kv_heads = kv_heads;
  config.query_lens = {1};
  config.context_lens = {20000};
  config.sinks = flexjit::random_sinks(config.num_heads, 3);
  config.kv_scale = kv_heads == 8 ? KvScale::Head : KvScale::Tensor;
  config.seed = 5;
  check_fp8(config, fmt::format("20k keys, {} kv heads", kv_heads));
}

TEST_CASE("fp8 rows with no visible key give 0 and lse -inf", "[gpu][fp8]") {
  flexjit::PagedCheckConfig config;
  config.mask = "sliding";
  config.params = params_with_window(GENERATE(0, -3));
  config.num_heads = 10;
  config.num_kv_heads = 2;
  config.head_dim = GENERATE(64, 96);
  config.query_lens = {1, 70, 1};
  config.context_lens = {5000, 0, 10};
  config.seed = 9;
  check_fp8(config, fmt::format("hd{}", config.head_dim));
}

TEST_CASE("the KV-cache write quantizes into an fp8 cache as the host does, bit for bit",
          "[gpu][fp8]") {
  flexjit::KvCacheWriteCheckConfig config;
  config.fp8 = true;
  config.layout = GENERATE(flexjit::KvLayout::NHD, flexjit::KvLayout::HND);
  config.dtype = GENERATE(FJ_DTYPE_BF16, FJ_DTYPE_FP16);
  config.kv_scale = GENERATE(KvScale::Tensor, KvScale::Head);
  config.head_dim = GENERATE(64, 80, 128);
  auto report = flexjit::run_kv_cache_write_check(fixture().context, config);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  CHECK(report->written_rows > 0);
  CHECK(report->skipped_tokens > 0);
  CHECK(report->wrong_elements == 0);
}
