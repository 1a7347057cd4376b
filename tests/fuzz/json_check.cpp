// Kept out of the coverage instrumentation (tests/fuzz/CMakeLists.txt): the fuzzer should
// explore the front end, not nlohmann's parser.
#include "json_check.h"

#include <nlohmann/json.hpp>

size_t json_diagnostic_count(const std::string& text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("diagnostics") || !json["diagnostics"].is_array())
    return kNotJsonDiagnostics;
  return json["diagnostics"].size();
}
