// The kernels of an fp8 (e4m3) K/V cache (kv_dtype FJ_DTYPE_FP8_E4M3) without a GPU: NVRTC
// compiles of the prefill (wgmma and mma.sync), decode and cache-write kernels, read through
// ptxas's report (no spills, no serialized wgmma), and their names and launch shapes.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "jit/kernel_source.h"
#include "kernel_args.cuh"
#include "runtime/ptxas_report.h"
#include "standard_masks.h"

namespace {

using flexjit::testing::check_clean;
using flexjit::testing::standard_masks;
using flexjit::testing::Warnings;

flexjit::PrefillKernelConfig fp8_config(int head_dim, const std::string& arch, bool bf16 = true,
                                        int page_size = 16) {
  flexjit::PrefillKernelConfig config;
  config.head_dim = head_dim;
  config.bf16 = bf16;
  config.page_size = page_size;
  config.arch = arch;
  config.kv_fp8 = true;
  return config;
}

}  // namespace

TEST_CASE("fp8-cache kernels are named apart and sized for their e4m3 tiles", "[fp8]") {
  auto variant = flexjit::lower_mask(standard_masks(Warnings::Refused), "causal");
  REQUIRE(variant.ok());
  const flexjit::PrefillKernelConfig config = fp8_config(128, "sm_90a");
  CHECK(flexjit::prefill_kernel_spec(*variant, config).name ==
        "prefill_causal_hd128_bf16_kvfp8_page16_sm90a");
  CHECK(flexjit::decode_kernel_spec(*variant, config).name ==
        "decode_causal_hd128_bf16_kvfp8_page16_sm90a");
  CHECK(flexjit::prefill_kernel_spec(*variant, config).source.find(", 16, true>(args)") !=
        std::string::npos);
  flexjit::PrefillKernelConfig bf16_cache = config;
  bf16_cache.kv_fp8 = false;
  // A 16-bit cache's kernel instantiates the template as before 0.8 (its source and cache key
  // unchanged): without the trailing kKvFp8 argument.
  const std::string bf16_source = flexjit::prefill_kernel_spec(*variant, bf16_cache).source;
  CHECK(bf16_source.find(", 16>(args)") != std::string::npos);
  CHECK(bf16_source.find(", 16, true>(args)") == std::string::npos);
  for (const int head_dim : {64, 80, 96, 128, 256}) {
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const flexjit::PrefillLaunchShape fp8 =
          flexjit::prefill_launch_shape(fp8_config(head_dim, arch));
      bf16_cache = fp8_config(head_dim, arch);
      bf16_cache.kv_fp8 = false;
      const flexjit::PrefillLaunchShape bf16 = flexjit::prefill_launch_shape(bf16_cache);
      INFO(head_dim << " " << arch);
      CHECK(fp8.smem_bytes > bf16.smem_bytes);
      CHECK(fp8.smem_bytes + 8 * 1024 <= 227 * 1024);  // and the static tile list
      CHECK(fj::paged_decode_smem_bytes(head_dim, true) <= 227 * 1024);
    }
  }
}

TEST_CASE("fp8-cache prefill and decode kernels compile without spills or serialized wgmma",
          "[fp8]") {
  const flexjit::dsl::Module& module = standard_masks(Warnings::Refused);
  std::vector<std::pair<std::string, flexjit::PrefillKernelConfig>> prefill = {
      {"causal", fp8_config(128, "sm_90a")},
      {"causal", fp8_config(64, "sm_90a", true, 64)},
      {"causal", fp8_config(256, "sm_90a")},
      {"document", fp8_config(128, "sm_90a", false)},  // key terms staged by the producer
      {"gemma2_local", fp8_config(128, "sm_90a")},
      {"causal", fp8_config(128, "sm_80")},
      {"causal", fp8_config(96, "sm_90a")},  // the mma.sync kernel on Hopper
      {"causal", fp8_config(80, "sm_80", false)},
  };
  for (const auto& [name, config] : prefill) {
    auto variant = flexjit::lower_mask(module, name);
    REQUIRE(variant.ok());
    check_clean(flexjit::prefill_kernel_spec(*variant, config));
  }
  std::vector<std::pair<std::string, flexjit::PrefillKernelConfig>> decode = {
      {"causal", fp8_config(128, "sm_90a")}, {"causal", fp8_config(64, "sm_90a", true, 64)},
      {"causal", fp8_config(256, "sm_90a")}, {"sliding", fp8_config(128, "sm_80", false)},
      {"causal", fp8_config(80, "sm_90a")},
  };
  for (const auto& [name, config] : decode) {
    auto variant = flexjit::lower_mask(module, name);
    REQUIRE(variant.ok());
    check_clean(flexjit::decode_kernel_spec(*variant, config));
  }
  for (const bool bf16 : {true, false}) {
    for (const char* arch : {"sm_80", "sm_90a"})
      check_clean(flexjit::kv_cache_write_fp8_spec(bf16, arch));
  }
}
