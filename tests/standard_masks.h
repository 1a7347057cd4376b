// dsl/lib/standard.mask for the tests: parsed and checked once per test binary.
#pragma once

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <vector>

#include "flexjit/dsl/frontend.h"

namespace flexjit::testing {

enum class Warnings { Allowed, Refused };

// The module; a check fails, with the diagnostics, on an error (and on a warning when refused).
inline const dsl::Module& standard_masks(Warnings warnings = Warnings::Allowed) {
  static std::vector<dsl::Diagnostic> diagnostics;
  static const dsl::Module module = [] {
    std::ifstream in(FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask");
    std::ostringstream text;
    text << in.rdbuf();
    return dsl::parse_and_check({"standard.mask", text.str()}, diagnostics);
  }();
  INFO(dsl::format_diagnostics(module.source, diagnostics));
  if (warnings == Warnings::Refused) {
    REQUIRE(diagnostics.empty());
  } else {
    REQUIRE_FALSE(dsl::has_errors(diagnostics));
  }
  return module;
}

}  // namespace flexjit::testing
