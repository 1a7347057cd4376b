// Parses the output of dsl::format_diagnostics_json.
#pragma once

#include <cstddef>
#include <string>

inline constexpr size_t kNotJsonDiagnostics = static_cast<size_t>(-1);

// The length of the "diagnostics" array of the JSON document `text`, or kNotJsonDiagnostics
// when `text` is not a JSON object with such an array.
size_t json_diagnostic_count(const std::string& text);
