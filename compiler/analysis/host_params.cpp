// Host runtime parameters and the host twin of the GPU array-summary kernel.
#include "flexjit/compiler/host_params.h"

#include <algorithm>

namespace flexjit {

fj::SummaryAxis summary_axis(const RuntimeParam& array) {
  const auto is_position = [](const std::string& dim) { return dim == "q" || dim == "kv"; };
  if (array.dims.size() == 2 && is_position(array.dims[1])) return fj::kSummaryCols;
  if (!array.dims.empty() && is_position(array.dims[0])) return fj::kSummaryRows;
  return fj::kSummaryNone;
}

void build_summary(const fj::ArrayParam& array, bool is_float, int32_t* out) {
  const int64_t length = fj::summary_length(array);
  const int64_t lines = fj::summary_lines(array);
  const int levels = fj::summary_levels(length);
  const int64_t line_pairs = fj::summary_line_pairs(length);
  for (int64_t line = 0; line < lines; ++line) {
    int32_t* pairs = out + 2 * line * line_pairs;
    // Level 1 from the elements, each higher level from the one below.
    const int32_t* below = nullptr;
    int64_t below_count = length;
    for (int level = 1; level <= levels; ++level) {
      int32_t* entries = pairs + 2 * fj::summary_level_offset(length, level);
      const int64_t count = fj::summary_level_pairs(length, level);
      for (int64_t i = 0; i < count; ++i) {
        int32_t lo = fj::kInt32Max, hi = fj::kInt32Min;
        const int64_t end = std::min(below_count, (i + 1) * fj::kSummaryFanout);
        for (int64_t j = i * fj::kSummaryFanout; j < end; ++j) {
          const int32_t min_key =
              below ? below[2 * j] : fj::summary_element_key(array, is_float, line, j);
          const int32_t max_key =
              below ? below[2 * j + 1] : fj::summary_element_key(array, is_float, line, j);
          lo = std::min(lo, min_key);
          hi = std::max(hi, max_key);
        }
        entries[2 * i] = lo;
        entries[2 * i + 1] = hi;
      }
      below = entries;
      below_count = count;
    }
  }
}

HostParams::HostParams(const Variant& variant, std::vector<int32_t> scalars,
                       std::vector<HostArray> arrays)
    : scalars_(std::move(scalars)), arrays_(std::move(arrays)) {
  for (size_t i = 0; i < scalars_.size() && i < size_t{fj::kMaxScalarParams}; ++i)
    params_.scalar[i] = scalars_[i];
  summaries_.resize(arrays_.size());
  for (size_t i = 0; i < arrays_.size() && i < size_t{fj::kMaxArrayParams}; ++i) {
    const HostArray& array = arrays_[i];
    fj::ArrayParam& param = params_.array[i];
    param.slot = static_cast<int32_t>(i);
    const int64_t elements = int64_t{array.rows} * array.cols;
    if (array.rows <= 0 || array.cols <= 0 || elements != static_cast<int64_t>(array.bits.size()))
      continue;  // reads as empty: every read yields 0
    param.data = array.bits.data();
    param.rows = array.rows;
    param.cols = array.cols;
    param.row_stride = array.cols;
    if (i >= variant.arrays.size()) continue;
    param.summary_axis = summary_axis(variant.arrays[i]);
    if (param.summary_axis == fj::kSummaryNone) continue;
    summaries_[i].resize(fj::summary_words(param.rows, param.cols, param.summary_axis));
    build_summary(param, variant.arrays[i].type == dsl::Type::Float, summaries_[i].data());
    param.summary = summaries_[i].data();
  }
}

}  // namespace flexjit
