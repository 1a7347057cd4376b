// The kernels of sharded calls (context parallelism, fj::ShardedVariant) without a GPU: NVRTC
// compiles of the standard masks' prefill (wgmma and mma.sync) and decode kernel in the
// sharded form, read through ptxas's report (no spills, no serialized wgmma), and their names.
// On the GPU, tests/gpu/shard_test.cpp checks what they compute.
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "jit/kernel_source.h"
#include "runtime/ptxas_report.h"
#include "standard_masks.h"

namespace {

using flexjit::testing::check_clean;
using flexjit::testing::standard_masks;
using flexjit::testing::Warnings;

flexjit::PrefillKernelConfig sharded_config(int head_dim, const std::string& arch,
                                            bool kv_fp8 = false) {
  flexjit::PrefillKernelConfig config;
  config.head_dim = head_dim;
  config.arch = arch;
  config.kv_fp8 = kv_fp8;
  config.kv_sharded = true;
  return config;
}

}  // namespace

TEST_CASE("sharded kernels are named apart and wrap the mask's variant", "[shard]") {
  auto variant = flexjit::lower_mask(standard_masks(Warnings::Refused), "causal");
  REQUIRE(variant.ok());
  flexjit::PrefillKernelConfig config = sharded_config(128, "sm_90a");
  const flexjit::KernelSpec prefill = flexjit::prefill_kernel_spec(*variant, config);
  CHECK(prefill.name == "prefill_causal_hd128_bf16_kvshard_page16_sm90a");
  CHECK(prefill.source.find("fj::ShardedVariant<Variant_causal>") != std::string::npos);
  const flexjit::KernelSpec decode = flexjit::decode_kernel_spec(*variant, config);
  CHECK(decode.name == "decode_causal_hd128_bf16_kvshard_page16_sm90a");
  CHECK(decode.source.find("fj::ShardedVariant<Variant_causal>") != std::string::npos);
  config.kv_fp8 = true;
  CHECK(flexjit::prefill_kernel_spec(*variant, config).name ==
        "prefill_causal_hd128_bf16_kvfp8_kvshard_page16_sm90a");
  // The whole-request kernels are unchanged: no wrapper, no suffix.
  config.kv_sharded = false;
  const flexjit::KernelSpec whole = flexjit::prefill_kernel_spec(*variant, config);
  CHECK(whole.name == "prefill_causal_hd128_bf16_kvfp8_page16_sm90a");
  CHECK(whole.source.find("ShardedVariant") == std::string::npos);
}

TEST_CASE("sharded kernels compile without spills or serialized wgmma", "[shard]") {
  const flexjit::dsl::Module& module = standard_masks(Warnings::Refused);
  std::vector<std::pair<std::string, flexjit::PrefillKernelConfig>> kernels;
  // The variants whose hooks differ in kind: none, key terms read from an array (document,
  // staged by the wgmma producer), a loop (prefix_ranges), divisions (chunked), scores.
  for (const char* name : {"causal", "sliding", "prefix_ranges", "document", "chunked",
                           "causal_alibi", "gemma2_local"}) {
    kernels.emplace_back(name, sharded_config(128, "sm_90a"));
  }
  kernels.emplace_back("causal", sharded_config(64, "sm_90a"));
  kernels.emplace_back("document", sharded_config(256, "sm_90a"));
  kernels.emplace_back("causal_alibi", sharded_config(128, "sm_80"));
  kernels.emplace_back("sliding", sharded_config(96, "sm_90a"));  // mma.sync on Hopper
  kernels.emplace_back("causal", sharded_config(128, "sm_90a", true));
  for (const auto& [name, config] : kernels) {
    auto variant = flexjit::lower_mask(module, name);
    REQUIRE(variant.ok());
    check_clean(flexjit::prefill_kernel_spec(*variant, config));
    check_clean(flexjit::decode_kernel_spec(*variant, config));
  }
}

TEST_CASE("fj_merge_states_n's CUDA kernels compile without spills", "[shard]") {
  CHECK(flexjit::merge_states_n_spec(false, 64, "sm_80").name == "merge_states_n_hd64_fp16_sm80");
  for (const auto& [head_dim, bf16, arch] :
       {std::tuple{8, true, "sm_90a"}, std::tuple{128, true, "sm_90a"},
        std::tuple{256, true, "sm_90a"}, std::tuple{64, false, "sm_80"}}) {
    check_clean(flexjit::merge_states_n_spec(bf16, head_dim, arch));
  }
}
