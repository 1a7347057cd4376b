// The Hopper prefill kernel (templates/paged_prefill_sm90.cuh) without a GPU: which configs get
// it and with what launch shape, and NVRTC compiles of it for every standard variant, read
// through ptxas's report: no spills, and no wgmma serialized by the compiler.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "compiler/random_ir.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"
#include "jit/kernel_source.h"
#include "jit/nvrtc_compiler.h"
#include "kernel_args.cuh"
#include "runtime/ptxas_report.h"
#include "standard_masks.h"

namespace {

using flexjit::testing::compile_with_report;
using flexjit::testing::kStandardVariants;
using flexjit::testing::PtxasReport;
using flexjit::testing::standard_masks;
using flexjit::testing::Warnings;

flexjit::PrefillKernelConfig config_of(int head_dim, const std::string& arch, int page_size = 16) {
  flexjit::PrefillKernelConfig config;
  config.head_dim = head_dim;
  config.page_size = page_size;
  config.arch = arch;
  return config;
}

// Longformer (a window of 256 keys and global tokens both ways), and the variant whose global
// queries see only earlier keys.
flexjit::dsl::Module longformer_module() {
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  flexjit::dsl::Module module = flexjit::dsl::parse_and_check(
      {"longformer.mask",
       "const radius: int = 256\n"
       "param global_token: int[kv]\n"
       "mask longformer = abs(q - kv) <= radius || global_token[kv] != 0 || "
       "global_token[q] != 0\n"
       "mask causal_global = abs(q - kv) <= radius || global_token[kv] != 0 || "
       "(global_token[q] != 0 && kv <= q)\n"},
      diagnostics);
  REQUIRE(diagnostics.empty());
  return module;
}

}  // namespace

TEST_CASE("sm_90a at head dims 64, 128 and 256 gets the warp-specialized wgmma kernel",
          "[hopper]") {
  for (int head_dim : {64, 128, 256}) {
    const flexjit::PrefillLaunchShape shape =
        flexjit::prefill_launch_shape(config_of(head_dim, "sm_90a"));
    INFO("hd" << head_dim);
    CHECK(shape.wgmma);
    CHECK(shape.block_m == fj::kWgmmaBlockM);
    CHECK(shape.threads == fj::kWgmmaThreads);
    // Q and 128 KiB of K/V stages: four of 128 keys at head dim 64, two of 128 keys at 128,
    // two of 64 keys at 256; unpadded, plus the swizzle alignment; within the H100's 227 KiB.
    const int keys = head_dim == 256 ? 64 : 128;
    const int stages = head_dim == 64 ? 4 : 2;
    CHECK(fj::wgmma_block_n(head_dim) == keys);
    CHECK(fj::wgmma_stages(head_dim, keys) == stages);
    CHECK(shape.smem_bytes == 1024 + (128 + stages * 2 * keys) * head_dim * 2);
    CHECK(shape.smem_bytes <= 227 * 1024);
    // Budgets of the producer and the consumers fill the register file of one CTA of 384
    // threads at the 168 registers per thread that __launch_bounds__(384, 1) leaves.
    const int producer = fj::wgmma_producer_registers(head_dim, keys);
    const int consumer = fj::wgmma_consumer_registers(head_dim, keys);
    CHECK(128 * producer + 256 * consumer == 384 * 168);
    CHECK(producer % 8 == 0);
    CHECK(consumer % 8 == 0);
    CHECK(producer >= 24);
    CHECK(consumer <= 256);
  }

  // A variant with many operations per element keeps 64-key tiles (in the shared memory sized
  // for 128), with as many stages as fit.
  CHECK(fj::wgmma_block_n(64, 3) == 128);
  CHECK(fj::wgmma_block_n(64, 35) == 64);
  CHECK(fj::wgmma_block_n(128, 35) == 64);
  CHECK(fj::wgmma_stages(128, 64) == 4);
  // An fp8 cache keeps 64-key tiles at head dim 128: its converted parts fit beside four stages
  // of 64 keys, not two of 128.
  CHECK(fj::wgmma_block_n(128, 0, true) == 64);
  CHECK(fj::wgmma_block_n(64, 0, true) == 128);
  for (const int head_dim : {64, 128, 256})
    CHECK(fj::paged_prefill_smem_bytes(head_dim, true, true) + 8 * 1024 <= 227 * 1024);
  CHECK(fj::wgmma_stages(64, 64) == 4);

  // Everything else keeps the mma.sync kernel.
  for (const auto& [head_dim, arch] : std::vector<std::pair<int, std::string>>{
           {80, "sm_90a"}, {96, "sm_90a"}, {128, "sm_80"}, {256, "sm_80"}, {128, "sm_90"}}) {
    const flexjit::PrefillLaunchShape shape =
        flexjit::prefill_launch_shape(config_of(head_dim, arch));
    INFO(arch << " hd" << head_dim);
    CHECK_FALSE(shape.wgmma);
    CHECK(shape.block_m == fj::kPrefillBlockM);
    CHECK(shape.threads == fj::kPrefillThreads);
  }
}

TEST_CASE("the generated source instantiates the kernel the launch shape describes", "[hopper]") {
  const flexjit::dsl::Module& module = standard_masks(Warnings::Refused);
  auto variant = flexjit::lower_mask(module, "causal");
  REQUIRE(variant.ok());
  const std::string hopper =
      flexjit::prefill_kernel_spec(*variant, config_of(128, "sm_90a")).source;
  CHECK(hopper.find("paged_prefill_sm90<") != std::string::npos);
  CHECK(hopper.find("__launch_bounds__(384, 1)") != std::string::npos);
  const std::string ampere = flexjit::prefill_kernel_spec(*variant, config_of(128, "sm_80")).source;
  CHECK(ampere.find("paged_prefill<") != std::string::npos);
  CHECK(ampere.find("__launch_bounds__(128)") != std::string::npos);
}

TEST_CASE(
    "the Hopper prefill kernel of every standard variant compiles without spills or "
    "serialized wgmma",
    "[hopper]") {
  const flexjit::dsl::Module& module = standard_masks(Warnings::Refused);
  // Every variant at head dim 128, paged; causal and document at 64 and 256, prefix_ranges
  // at 64; the encoder
  // layout. (prefix_ranges at 256 spills its sixteen range bounds on Partial tiles.)
  std::vector<std::pair<std::string, flexjit::PrefillKernelConfig>> cases;
  for (const char* name : kStandardVariants)
    cases.emplace_back(name, config_of(128, "sm_90a"));
  cases.emplace_back("causal", config_of(64, "sm_90a"));
  cases.emplace_back("document", config_of(64, "sm_90a", 64));
  cases.emplace_back("prefix_ranges", config_of(64, "sm_90a"));  // 64-key tiles at hd64
  cases.emplace_back("causal", config_of(256, "sm_90a"));
  cases.emplace_back("document", config_of(256, "sm_90a"));
  cases.emplace_back("causal_softcap", config_of(256, "sm_90a", 64));
  cases.emplace_back("sliding_sym", config_of(128, "sm_90a", 0));
  for (const auto& [name, config] : cases) {
    auto variant = flexjit::lower_mask(module, name);
    REQUIRE(variant.ok());
    flexjit::testing::check_clean(flexjit::prefill_kernel_spec(*variant, config));
  }
}

// A Longformer mask whose global queries see only earlier keys spills more at head dim 256
// with the consumers computing the kv range (the plain Longformer mask did, issue 29, until its
// range folded to a constant: below). The runtime's second build, the producer computing it
// (KernelSpec::fallbacks), is what compile_spec keeps for it. (At head dim 128 it did too until
// the producer copied page by page beside its staged key terms: now its first build is clean.)
TEST_CASE("a kernel whose first build serializes wgmma or spills more gets its second build",
          "[hopper]") {
  const flexjit::dsl::Module module = longformer_module();
  auto variant = flexjit::lower_mask(module, "causal_global");
  REQUIRE(variant.ok());
  {
    const flexjit::KernelSpec spec =
        flexjit::prefill_kernel_spec(*variant, config_of(128, "sm_90a"));
    auto compiled = flexjit::compile_spec(spec, true);
    REQUIRE(compiled.ok());
    CHECK(compiled->options.size() == spec.options.size());
  }
  {
    flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(*variant, config_of(256, "sm_90a"));
    INFO("hd256");
    REQUIRE_FALSE(spec.fallbacks.empty());
    auto compiled = flexjit::compile_spec(spec, true);
    REQUIRE(compiled.ok());
    auto kept = flexjit::parse_ptxas_resources(compiled->output.log, spec.name);
    REQUIRE(kept.ok());
    CHECK_FALSE(kept->wgmma_serialized);
    CHECK(compiled->options.size() == spec.options.size() + spec.fallbacks[0].size());
    // `flexjit compile --resources` says which build it reports.
    auto inspected = flexjit::inspect::ptxas_resources(spec);
    REQUIRE(inspected.ok());
    CHECK(inspected->fallback_build());
    // The first build alone, as the cache compiled it before the fallback existed.
    spec.fallbacks.clear();
    const PtxasReport first = compile_with_report(spec);
    INFO("first build: serialized " << first.resources.wgmma_serialized << ", spills "
                                    << first.resources.spill_store_bytes << " bytes; kept "
                                    << kept->spill_store_bytes);
    CHECK((first.resources.wgmma_serialized ||
           first.resources.spill_store_bytes > kept->spill_store_bytes));
  }
  // The plain Longformer mask: its kv range is every key (the global keys bound nothing), a
  // constant hook, and its first build is clean at every head dim, so it is built once.
  auto plain = flexjit::lower_mask(module, "longformer");
  REQUIRE(plain.ok());
  for (const int head_dim : {64, 128, 256}) {
    const flexjit::KernelSpec spec =
        flexjit::prefill_kernel_spec(*plain, config_of(head_dim, "sm_90a"));
    INFO("longformer hd" << head_dim);
    auto compiled = flexjit::compile_spec(spec, true);
    REQUIRE(compiled.ok());
    CHECK(compiled->options.size() == spec.options.size());
    auto kept = flexjit::parse_ptxas_resources(compiled->output.log, spec.name);
    REQUIRE(kept.ok());
    CHECK_FALSE(kept->wgmma_serialized);
    CHECK(kept->spill_store_bytes == 0);
  }
}

// A variant whose mask's structure takes 128-key tiles at head dim 128 (kWideKeyTiles) but
// whose 128-key build spills: the runtime's fallbacks take 64-key tiles
// (FJ_WGMMA_NARROW_KEY_TILES), then also the producer's kv range, and the clean one is kept.
// (Every key visible, a softcap with an ALiBi bias; issue 29's first example, a constant score
// from [cliffs-full], stopped spilling with the block-id checks of issue 31.)
TEST_CASE("a variant whose 128-key tiles spill gets 64-key tiles", "[hopper]") {
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  const flexjit::dsl::Module module = flexjit::dsl::parse_and_check(
      {"capped.mask",
       "param slopes: float[h]\n"
       "mask everything = true\n"
       "score capped = 30.0 * tanh(score / 30.0) + slopes[h] * (kv - q)\n"},
      diagnostics);
  REQUIRE(diagnostics.empty());
  flexjit::VariantSelection selection;
  selection.name = "everything";
  selection.score = "capped";
  auto variant = flexjit::lower_variant(module, selection);
  REQUIRE(variant.ok());
  flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(*variant, config_of(128, "sm_90a"));
  CHECK(spec.source.find("kWideKeyTiles = true;") != std::string::npos);
  REQUIRE(spec.fallbacks.size() == 2);
  auto compiled = flexjit::compile_spec(spec, true);
  REQUIRE(compiled.ok());
  auto kept = flexjit::parse_ptxas_resources(compiled->output.log, spec.name);
  REQUIRE(kept.ok());
  CHECK_FALSE(kept->wgmma_serialized);
  CHECK(kept->spill_store_bytes == 0);
  CHECK(std::find(compiled->options.begin(), compiled->options.end(),
                  "-DFJ_WGMMA_NARROW_KEY_TILES=1") != compiled->options.end());
  spec.fallbacks.clear();
  const PtxasReport first = compile_with_report(spec);
  CHECK(first.resources.spill_store_bytes > 0);

  // Head dims 64 and 256, an fp8 cache and the sharded kernel have no 128-key choice to undo.
  CHECK(flexjit::prefill_kernel_spec(*variant, config_of(64, "sm_90a")).fallbacks.size() == 1);
  CHECK(flexjit::prefill_kernel_spec(*variant, config_of(256, "sm_90a")).fallbacks.size() == 1);
  flexjit::PrefillKernelConfig fp8 = config_of(128, "sm_90a");
  fp8.kv_fp8 = true;
  CHECK(flexjit::prefill_kernel_spec(*variant, fp8).fallbacks.size() == 1);
  flexjit::PrefillKernelConfig sharded = config_of(128, "sm_90a");
  sharded.kv_sharded = true;
  CHECK(flexjit::prefill_kernel_spec(*variant, sharded).fallbacks.size() == 1);
}

// The mma.sync kernels' fallback: ptxas at register usage level 0. At the default level ptxas
// holds some kernels to fewer registers than they need and spills: a plain Longformer mask's
// sm_80 head-dim-64 kernel (to 168 registers, three CTAs of 128 threads per SM) until the
// block-id checks of issue 31, since then generated mask 11's (52 bytes). Level 0 lets them
// take the registers they need (issue 29).
TEST_CASE("an mma.sync kernel that spills at the default register level falls back on level 0",
          "[hopper]") {
  const flexjit::Variant variant = flexjit::testing::generated_variant(11);
  flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(variant, config_of(64, "sm_80"));
  REQUIRE(spec.fallbacks.size() == 1);
  CHECK(spec.fallbacks[0] == std::vector<std::string>{"--ptxas-options=--register-usage-level=0"});
  auto compiled = flexjit::compile_spec(spec, true);
  REQUIRE(compiled.ok());
  auto kept = flexjit::parse_ptxas_resources(compiled->output.log, spec.name);
  REQUIRE(kept.ok());
  CHECK(kept->spill_store_bytes == 0);
  CHECK(kept->spill_load_bytes == 0);
  spec.fallbacks.clear();
  const PtxasReport first = compile_with_report(spec);
  INFO("the first build: " << first.resources.registers << " registers");
  CHECK(first.resources.spill_store_bytes > 0);
  CHECK(std::find(compiled->options.begin(), compiled->options.end(),
                  "--ptxas-options=--register-usage-level=0") != compiled->options.end());
}

TEST_CASE("ptxas's note that wgmma is serialized is read for its function", "[hopper]") {
  const std::string log =
      "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are "
      "serialized due to non wgmma instructions reading accumulator registers of a wgmma "
      "between start and end of the pipeline stage in the function 'slow'\n"
      "ptxas info    : Compiling entry function 'fast' for 'sm_90a'\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 4192 bytes smem\n"
      "ptxas info    : Compiling entry function 'slow' for 'sm_90a'\n"
      "ptxas info    : Function properties for slow\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 4192 bytes smem\n";
  auto fast = flexjit::parse_ptxas_resources(log, "fast");
  auto slow = flexjit::parse_ptxas_resources(log, "slow");
  REQUIRE(fast.ok());
  REQUIRE(slow.ok());
  CHECK_FALSE(fast->wgmma_serialized);
  CHECK(slow->wgmma_serialized);
  CHECK(slow->registers == 168);
}
