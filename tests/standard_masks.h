// dsl/lib/standard.mask for the tests: parsed and checked once per test binary; other mask files
// of the source tree parsed the same way.
#pragma once

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/dsl/frontend.h"

namespace flexjit::testing {

enum class Warnings { Allowed, Refused };

// The mask file at `path` in the source tree, parsed and checked, its diagnostics in
// `diagnostics`.
inline dsl::Module parse_source_file(const std::string& path,
                                     std::vector<dsl::Diagnostic>& diagnostics) {
  std::ifstream in(FLEXJIT_SOURCE_DIR "/" + path);
  std::ostringstream text;
  text << in.rdbuf();
  return dsl::parse_and_check({path.substr(path.rfind('/') + 1), text.str()}, diagnostics);
}

// The module; a check fails, with the diagnostics, on an error (and on a warning when refused).
inline const dsl::Module& standard_masks(Warnings warnings = Warnings::Allowed) {
  static std::vector<dsl::Diagnostic> diagnostics;
  static const dsl::Module module = parse_source_file("dsl/lib/standard.mask", diagnostics);
  INFO(dsl::format_diagnostics(module.source, diagnostics));
  if (warnings == Warnings::Refused) {
    REQUIRE(diagnostics.empty());
  } else {
    REQUIRE_FALSE(dsl::has_errors(diagnostics));
  }
  return module;
}

}  // namespace flexjit::testing
