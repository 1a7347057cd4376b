// The checks fj_merge_states passes on either device (tests/runtime's CPU case, tests/gpu's CUDA
// case): tools/check/ops_check.h's run against the float64 merge, within a 16-bit rounding of
// the output and float32's of the LSE.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "check/ops_check.h"
#include "flexjit/flexjit.h"

namespace flexjit::testing {

inline void require_merge_states_correct(fj_context* context,
                                         const flexjit::MergeStatesCheckConfig& config) {
  auto report = flexjit::run_merge_states_check(context, config);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  CHECK(report->bad_outputs == 0);
  CHECK(report->empty_rows_wrong == 0);
  CHECK(report->max_abs_error <= (config.dtype == FJ_DTYPE_BF16 ? 2e-2 : 3e-3));
  CHECK(report->lse_max_abs_error <= 1e-5);
}

}  // namespace flexjit::testing
