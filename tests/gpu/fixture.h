// What the [gpu] suites share: one context for the whole binary (so each kernel is compiled
// once, whichever test asks first) and the standard library's program.
#pragma once

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "check/paged_check.h"
#include "flexjit/flexjit.h"

namespace flexjit::testing {

// A file of the source tree. The binary may run from a copy of the tree elsewhere (the GPU
// machine): the environment variable FLEXJIT_SOURCE_DIR overrides the build's source path.
inline std::string source_path(const std::string& relative) {
  const char* root = std::getenv("FLEXJIT_SOURCE_DIR");
  return std::string(root != nullptr ? root : FLEXJIT_SOURCE_DIR) + "/" + relative;
}

struct GpuFixture {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  std::string mask_file;  // dsl/lib/standard.mask

  GpuFixture() {
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    mask_file = source_path("dsl/lib/standard.mask");
    REQUIRE(fj_program_create_from_file(context, mask_file.c_str(), &program) == FJ_SUCCESS);
  }
  ~GpuFixture() {
    fj_program_destroy(program);
    fj_context_destroy(context);
  }
};

inline GpuFixture& fixture() {
  static GpuFixture instance;
  return instance;
}

// The checks every paged report passes: no NaN or unwritten output, empty rows 0 and lse -inf,
// the relative and lse errors within the dtype's tolerance, and the CPU backend's output as
// close (run with compare_cpu).
// The fixture program's scalar parameters: all 0 but `window`.
inline std::vector<int32_t> params_with_window(int32_t window) {
  int32_t count = 0;
  int32_t slot = -1;
  REQUIRE(fj_program_param_count(fixture().program, &count) == FJ_SUCCESS);
  REQUIRE(fj_program_param_slot(fixture().program, "window", &slot) == FJ_SUCCESS);
  std::vector<int32_t> params(count, 0);
  params[slot] = window;
  return params;
}

inline void require_correct(const flexjit::PagedCheckConfig& config,
                            const flexjit::PagedCheckReport& report) {
  INFO(
      fmt::format("{} gqa {} layout {}: rel err {:.3e}, bad {}, empty rows wrong {}, lse err "
                  "{:.3e}",
                  report.kernel_name, config.num_heads / config.num_kv_heads,
                  config.layout == flexjit::KvLayout::NHD ? "NHD" : "HND", report.relative_error,
                  report.bad_outputs, report.empty_rows_wrong, report.lse_max_abs_error));
  CHECK(report.bad_outputs == 0);
  CHECK(report.empty_rows_wrong == 0);
  CHECK(report.relative_error <= flexjit::relative_error_tolerance(config.dtype));
  CHECK(report.lse_max_abs_error <= 2e-2);
  INFO(fmt::format("GPU vs CPU backend: rel diff {:.3e}, lse diff {:.3e}, finite on one only {}",
                   report.cpu_relative_error, report.cpu_lse_max_abs_error,
                   report.cpu_mismatched_non_finite));
  CHECK(report.cpu_relative_error >= 0);
  CHECK(report.cpu_relative_error <= flexjit::relative_error_tolerance(config.dtype));
  CHECK(report.cpu_lse_max_abs_error <= 2e-2);
  CHECK(report.cpu_mismatched_non_finite == 0);
}

}  // namespace flexjit::testing
