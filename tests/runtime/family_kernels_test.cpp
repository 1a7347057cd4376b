// The benchmark's element-wise family (tools/bench/family.mask) without a GPU: NVRTC compiles of
// every mask and variant's prefill kernel for sm_90a and sm_80 at head dims 64, 128 and 256,
// read through ptxas's report. None may serialize its wgmma or hold an array in local memory (a
// stack frame beyond its spills' slots: S indexed by a loop nvcc did not unroll, which cost the
// T5 kernel its speed and random_bits' and bigbird's head-dim-64 kernels 256-272 bytes of
// frame); spills only where listed (issue 29). On the GPU, tests/gpu/family_test.cpp checks what
// they compute.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"
#include "jit/kernel_source.h"
#include "runtime/ptxas_report.h"
#include "standard_masks.h"

namespace {

using flexjit::testing::compile_with_report;
using flexjit::testing::PtxasReport;

// Kernels of the family that spill (issue 29): each must still spill, so that the list shrinks.
// (bigbird's and random_bits' sm_90a kernels at head dims 64 and 256 stopped spilling when their
// tables' interval reads took the form without a summary, kArraySummaryAxes.)
const std::vector<std::string> kKnownSpills = {
    "prefill_image2d_hd256_bf16_page16_sm80",
    "prefill_longformer_hd256_bf16_page16_sm80",
};

}  // namespace

TEST_CASE("the element-wise family's kernels hold no local arrays and spill only where listed",
          "[family-compile]") {
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  const flexjit::dsl::Module module =
      flexjit::testing::parse_source_file("tools/bench/family.mask", diagnostics);
  INFO(flexjit::dsl::format_diagnostics(module.source, diagnostics));
  REQUIRE_FALSE(flexjit::dsl::has_errors(diagnostics));
  std::vector<std::string> names;
  for (const flexjit::dsl::Decl& decl : module.decls) {
    if (decl.kind == flexjit::dsl::DeclKind::Mask || decl.kind == flexjit::dsl::DeclKind::Variant)
      names.push_back(decl.name);
  }
  REQUIRE(names.size() >= 12);
  int spilling = 0;
  for (const std::string& name : names) {
    flexjit::VariantSelection selection;
    selection.name = name;
    auto variant = flexjit::lower_variant(module, selection);
    REQUIRE(variant.ok());
    for (const char* arch : {"sm_90a", "sm_80"}) {
      for (const int head_dim : {64, 128, 256}) {
        flexjit::PrefillKernelConfig config;
        config.head_dim = head_dim;
        config.arch = arch;
        const flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(*variant, config);
        const PtxasReport report = compile_with_report(spec);
        INFO(spec.name << "\n" << report.log);
        const flexjit::PtxasResources& r = report.resources;
        CHECK_FALSE(r.wgmma_serialized);
        CHECK_FALSE(flexjit::testing::holds_local_array(r));
        const bool spills = r.spill_store_bytes > 0 || r.spill_load_bytes > 0;
        const bool known =
            std::find(kKnownSpills.begin(), kKnownSpills.end(), spec.name) != kKnownSpills.end();
        CHECK(spills == known);  // a listed kernel that no longer spills: take it off the list
        spilling += spills;
      }
    }
  }
  CHECK(spilling == static_cast<int>(kKnownSpills.size()));
}

// Context parallelism's sharded kernels of the key-uniform score (causal + t5): ShardedVariant
// forwards score_kv_uniform over the hull of a tile's positions, and the kernels stay clean.
TEST_CASE("the sharded causal + t5 kernels take the key-uniform score and compile clean",
          "[family-compile][shard]") {
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  const flexjit::dsl::Module module =
      flexjit::testing::parse_source_file("tools/bench/family.mask", diagnostics);
  REQUIRE_FALSE(flexjit::dsl::has_errors(diagnostics));
  flexjit::VariantSelection selection;
  selection.name = "causal_t5";
  auto variant = flexjit::lower_variant(module, selection);
  REQUIRE(variant.ok());
  for (const int head_dim : {64, 128}) {
    flexjit::PrefillKernelConfig config;
    config.head_dim = head_dim;
    config.arch = "sm_90a";
    config.kv_sharded = true;
    const flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(*variant, config);
    CHECK(spec.source.find("static constexpr bool kScoreKvUniform = true;") != std::string::npos);
    CHECK(spec.source.find("fj::ShardedVariant<") != std::string::npos);
    const PtxasReport report = compile_with_report(spec);
    INFO(spec.name << "\n" << report.log);
    CHECK_FALSE(report.resources.wgmma_serialized);
    CHECK_FALSE(flexjit::testing::holds_local_array(report.resources));
    CHECK(report.resources.spill_store_bytes == 0);
  }
}
