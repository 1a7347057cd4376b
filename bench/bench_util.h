// Helpers the host benchmarks share: CPU time, the median of runs, the mask file.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/dsl/frontend.h"

namespace flexjit::bench {

// The calling thread's CPU time, in seconds.
inline double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The mask file, read, parsed and checked; what went wrong goes to stderr and gives nothing.
inline std::optional<dsl::Module> load_masks(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    fmt::print(stderr, "cannot open {}\n", path);
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<dsl::Diagnostic> diagnostics;
  dsl::Module module = dsl::parse_and_check({path, text.str()}, diagnostics);
  if (dsl::has_errors(diagnostics)) {
    fmt::print(stderr, "{}", dsl::format_diagnostics(module.source, diagnostics));
    return std::nullopt;
  }
  return module;
}

}  // namespace flexjit::bench
