// Kernel names and sources: the readable names the cache, CLI and profilers show, and NVRTC
// compiles of the mask-independent kernels (KV-cache write, merge_states) for both targets.
#include <catch2/catch.hpp>

#include <string>

#include "flexjit/internal/supported.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_source.h"

using flexjit::PrefillKernelConfig;

TEST_CASE("kernel names spell out their specialisation") {
  PrefillKernelConfig config;
  config.head_dim = 128;
  config.bf16 = true;
  config.page_size = 16;
  config.arch = "sm_90a";
  CHECK(flexjit::prefill_kernel_name("sliding", config) ==
        "prefill_sliding_hd128_bf16_page16_sm90a");
  config.page_size = 0;
  config.bf16 = false;
  config.head_dim = 64;
  config.arch = "sm_80";
  CHECK(flexjit::prefill_kernel_name("sliding_sym", config) ==
        "encoder_sliding_sym_hd64_fp16_sm80");
  CHECK(flexjit::kv_cache_write_spec("sm_90a").name == "kv_cache_write_sm90a");
  CHECK(flexjit::merge_states_spec(true, "sm_80").name == "merge_states_bf16_sm80");
}

TEST_CASE("supported head dims and page sizes") {
  for (int d : {64, 80, 96, 128, 256})
    CHECK(flexjit::supported::head_dim(d));
  for (int d : {0, 32, 72, 112, 192, 512})
    CHECK_FALSE(flexjit::supported::head_dim(d));
  for (int p : {0, 16, 32, 48, 256, 1024})
    CHECK(flexjit::supported::page_size(p));
  for (int p : {-16, 8, 24, 1040})
    CHECK_FALSE(flexjit::supported::page_size(p));
}

TEST_CASE("the mask-independent kernels compile for sm_80 and sm_90a") {
  flexjit::KernelCache cache;
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    for (const auto& spec :
         {flexjit::kv_cache_write_spec(arch), flexjit::merge_states_spec(true, arch),
          flexjit::merge_states_spec(false, arch)}) {
      auto kernel = cache.get(spec);
      INFO(spec.name << (kernel ? std::string() : ": " + kernel.error().log));
      REQUIRE(kernel.ok());
      CHECK((*kernel)->cubin().substr(0, 4) ==
            "\x7f"
            "ELF");
    }
  }
}
