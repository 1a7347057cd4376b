// The CLI's `--set NAME=TEXT` array values (settings.h).
#include "settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace flexjit {

namespace {

std::string_view trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// One value's slot bits: an int32, or a float's bits.
Result<int32_t> element_bits(const RuntimeParam& param, std::string_view text) {
  const char* end = text.data() + text.size();
  if (param.type == dsl::Type::Float) {
    float value = 0.0f;
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc() && stop == end && std::isfinite(value)) {
      return fj::float_to_bits(value);
    }
  } else {
    int32_t value = 0;
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc() && stop == end) return value;
  }
  return Error{fmt::format("{}: '{}' is not {} value", param.name, text,
                           param.type == dsl::Type::Float ? "a finite float" : "an int32")};
}

// The values of one row: `V` or `V*N` items separated by `,`, appended to `out`.
Result<int64_t> parse_row(const RuntimeParam& param, std::string_view row,
                          std::vector<int32_t>& out) {
  const size_t start = out.size();
  while (true) {
    const size_t comma = row.find(',');
    const std::string_view item = trim(row.substr(0, comma));
    if (item.empty()) return Error{fmt::format("{}: empty value in '{}'", param.name, row)};
    const size_t star = item.find('*');
    auto bits = element_bits(param, trim(item.substr(0, star)));
    if (!bits) return bits.error();
    int64_t repeat = 1;
    if (star != std::string_view::npos) {
      const std::string_view count = trim(item.substr(star + 1));
      const auto [stop, error] = std::from_chars(count.data(), count.data() + count.size(), repeat);
      if (error == std::errc::result_out_of_range) repeat = kMaxArrayValues + 1;
      if ((error != std::errc() && error != std::errc::result_out_of_range) ||
          stop != count.data() + count.size()) {
        return Error{fmt::format("{}: '{}': the repeat count after '*' must be an integer",
                                 param.name, item)};
      }
      if (repeat < 0) {
        return Error{fmt::format("{}: '{}': negative repeat count", param.name, item)};
      }
    }
    if (static_cast<int64_t>(out.size()) + repeat > kMaxArrayValues) {
      return Error{fmt::format("{}: more than {} values", param.name, kMaxArrayValues)};
    }
    out.insert(out.end(), static_cast<size_t>(repeat), *bits);
    if (comma == std::string_view::npos) break;
    row.remove_prefix(comma + 1);
  }
  return static_cast<int64_t>(out.size() - start);
}

// The index request b or head h reads along a dimension, -1 for other dimensions.
int32_t selected_index(const std::string& dim, int32_t b, int32_t h) {
  return dim == "b" ? b : dim == "h" ? h : -1;
}

}  // namespace

Result<HostArray> parse_array_values(const RuntimeParam& param, std::string_view text, int32_t b,
                                     int32_t h) {
  if (!param.is_array()) return Error{fmt::format("{} is not an array parameter", param.name)};
  if (trim(text).empty()) return Error{fmt::format("{}: no values", param.name)};
  std::vector<int32_t> values;
  std::vector<int64_t> row_lengths;
  for (std::string_view rest = text;;) {
    const size_t semicolon = rest.find(';');
    auto length = parse_row(param, rest.substr(0, semicolon), values);
    if (!length) return length.error();
    row_lengths.push_back(*length);
    if (semicolon == std::string_view::npos) break;
    rest.remove_prefix(semicolon + 1);
  }
  const bool one_dimensional = param.dims.size() == 1;
  if (one_dimensional && row_lengths.size() > 1) {
    return Error{
        fmt::format("{} has one dimension: separate its values with ',' only", param.name)};
  }
  if (std::any_of(row_lengths.begin(), row_lengths.end(),
                  [&](int64_t length) { return length != row_lengths.front(); })) {
    return Error{fmt::format("{}: every row needs the same number of values", param.name)};
  }
  if (values.empty()) return Error{fmt::format("{}: no values", param.name)};

  HostArray array;
  const int32_t index = selected_index(param.dims.front(), b, h);
  const auto fill_to = [&](size_t elements, int64_t copies) -> Result<bool> {
    if (copies * static_cast<int64_t>(elements) > kMaxArrayValues) {
      return Error{fmt::format("{}: more than {} values to fill {} rows up to index {}", param.name,
                               kMaxArrayValues, param.dims.front(), copies - 1)};
    }
    // The first `elements` values, repeated: each pass doubles what is filled (one insert per
    // copy took seconds for a 2^25-row fill of one value).
    const size_t total = static_cast<size_t>(copies) * elements;
    values.resize(total);
    for (size_t filled = elements; filled < total; filled *= 2)
      std::copy_n(values.begin(), std::min(filled, total - filled),
                  values.begin() + static_cast<ptrdiff_t>(filled));
    return true;
  };
  if (one_dimensional) {
    array.rows = static_cast<int32_t>(values.size());
    array.cols = 1;
    if (values.size() == 1 && index > 0) {
      auto filled = fill_to(1, int64_t{index} + 1);
      if (!filled) return filled.error();
      array.rows = index + 1;
    }
  } else {
    array.rows = static_cast<int32_t>(row_lengths.size());
    array.cols = static_cast<int32_t>(row_lengths.front());
    if (row_lengths.size() == 1 && index > 0) {
      auto filled = fill_to(values.size(), int64_t{index} + 1);
      if (!filled) return filled.error();
      array.rows = index + 1;
    }
  }
  array.bits = std::move(values);
  return array;
}

}  // namespace flexjit
