// Shared by the runtime tests that compile kernels of the standard masks with NVRTC: the parsed
// dsl/lib/standard.mask and the kernel templates as NVRTC headers.
#pragma once

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <vector>

#include "embedded_templates.h"
#include "flexjit/dsl/frontend.h"
#include "nvrtc_compiler.h"

inline flexjit::dsl::Module standard_masks() {
  std::ifstream in(FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask");
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  flexjit::dsl::Module module =
      flexjit::dsl::parse_and_check({"standard.mask", text.str()}, diagnostics);
  REQUIRE(diagnostics.empty());
  return module;
}

inline std::vector<flexjit::NvrtcHeader> template_headers() {
  std::vector<flexjit::NvrtcHeader> headers;
  for (const flexjit::EmbeddedFile& file : flexjit::embedded_templates())
    headers.push_back({file.name, file.text});
  return headers;
}
