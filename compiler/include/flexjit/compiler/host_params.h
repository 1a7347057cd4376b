// Runtime parameters in host memory, as a kernel launch sees them: the scalar slots, the
// arrays, and the min/max summaries of position-indexed arrays (templates/fj_ops.cuh,
// "Summaries") that make data-dependent masks analysable per tile. The CLI, the benchmarks,
// the tests and the double-precision reference classify and evaluate through this.
#pragma once

#include <cstdint>
#include <vector>

#include "fj_ops.cuh"
#include "flexjit/compiler/mask.h"

namespace flexjit {

// A runtime array parameter on the host: rows x cols elements, dense row-major, each the int32
// value or the float32 bits (by the parameter's element type). A 1-D array has one column.
struct HostArray {
  int32_t rows = 0;
  int32_t cols = 1;
  std::vector<int32_t> bits;
};

// The axis an array is summarised along: its dimension named `q` or `kv` (the last such),
// fj::kSummaryNone when it has none. A 1-D array runs along its rows.
fj::SummaryAxis summary_axis(const RuntimeParam& array);

// Writes the summary of `array` (host memory; summary_axis set, summary ignored) to `out`,
// fj::summary_words(rows, cols, axis) int32. The host twin of the GPU summary kernel.
void build_summary(const fj::ArrayParam& array, bool is_float, int32_t* out);

// Scalars and arrays of one launch on the host, with the summaries the variant's analysis can
// use. Owns its storage: params() points into it, and stays valid across moves (not copies).
class HostParams {
 public:
  HostParams() = default;
  // `scalars` by slot (a float's bits), `arrays` by slot (missing or mis-sized arrays read as
  // empty). Summaries are built for the arrays `variant` declares with a position dimension.
  HostParams(const Variant& variant, std::vector<int32_t> scalars, std::vector<HostArray> arrays);
  HostParams(HostParams&&) = default;
  HostParams& operator=(HostParams&&) = default;
  HostParams(const HostParams&) = delete;
  HostParams& operator=(const HostParams&) = delete;

  const fj::MaskParams& params() const { return params_; }
  const std::vector<HostArray>& arrays() const { return arrays_; }

 private:
  std::vector<int32_t> scalars_;
  std::vector<HostArray> arrays_;
  std::vector<std::vector<int32_t>> summaries_;
  fj::MaskParams params_{};
};

}  // namespace flexjit
