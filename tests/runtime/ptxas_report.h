// Runtime tests that compile kernels with NVRTC and read ptxas's report on them.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flexjit/internal/inspect.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc_compiler.h"

namespace flexjit::testing {

// Every mask and variant of dsl/lib/standard.mask that a kernel is made for.
inline constexpr std::array<const char*, 14> kStandardVariants = {
    "causal",        "bidirectional", "sliding",       "sliding_sym", "prefix_lm",
    "prefix_ranges", "rswa",          "chunked",       "document",    "causal_softcap",
    "causal_alibi",  "gemma2_local",  "gemma2_global", "llama4_local"};

// NVRTC's log and ptxas's report of `spec` compiled with ptxas -v. The checks fail, with the
// log, when the compile or the report fails; callers print the log with their own checks.
struct PtxasReport {
  std::string log;
  PtxasResources resources;
};
// The build the kernel cache keeps (compile_spec: a spec with fallback options may take them).
inline PtxasReport compile_with_report(const KernelSpec& spec) {
  auto compiled = compile_spec(spec, true);
  INFO(spec.name << (compiled ? "\n" + compiled->output.log : ": " + compiled.error().log));
  REQUIRE(compiled.ok());
  auto resources = parse_ptxas_resources(compiled->output.log, spec.name);
  REQUIRE(resources.ok());
  return {compiled->output.log, *resources};
}

// Whether a kernel holds an array in local memory: a stack frame beyond its spills' slots
// (rounded up to 16 bytes) and beyond `allowed` (a baseline's frame). Such a frame is an array
// nvcc could not keep in registers, such as S indexed by a loop it did not unroll.
inline bool holds_local_array(const PtxasResources& r, int64_t allowed = 0) {
  return r.stack_frame_bytes > std::max<int64_t>((r.spill_store_bytes + 15) / 16 * 16, allowed);
}

// `spec` compiles clean: no spills, no stack frame (without spills, one is an array that
// nvcc could not keep in registers, such as S indexed by a loop it did not unroll), no
// serialized wgmma (ptxas's C7514/C7520 note, which costs most of the tensor cores' overlap: a
// cp.async or an accumulator read inside an MMA's flight does it) and no other performance
// warning.
inline void check_clean(const KernelSpec& spec) {
  const PtxasReport report = compile_with_report(spec);
  INFO(spec.name << "\n" << report.log);
  CHECK(report.resources.spill_store_bytes == 0);
  CHECK(report.resources.spill_load_bytes == 0);
  CHECK(report.resources.stack_frame_bytes == 0);
  CHECK_FALSE(report.resources.wgmma_serialized);
  CHECK(report.log.find("Potential Performance Loss") == std::string::npos);
}

}  // namespace flexjit::testing
