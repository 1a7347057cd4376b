// What the [gpu] suites share: one context for the whole binary (so each kernel is compiled
// once, whichever test asks first) and the standard library's program.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "flexjit/flexjit.h"

namespace flexjit::testing {

struct GpuFixture {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  std::string mask_file;  // dsl/lib/standard.mask

  GpuFixture() {
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    // The binary may run from a copy of the tree elsewhere (the GPU machine): the environment
    // variable FLEXJIT_SOURCE_DIR overrides the build's source path.
    const char* root = std::getenv("FLEXJIT_SOURCE_DIR");
    mask_file = std::string(root != nullptr ? root : FLEXJIT_SOURCE_DIR) + "/dsl/lib/standard.mask";
    REQUIRE(fj_program_create_from_file(context, mask_file.c_str(), &program) == FJ_SUCCESS);
  }
  ~GpuFixture() {
    fj_program_destroy(program);
    fj_context_destroy(context);
  }
};

inline GpuFixture& fixture() {
  static GpuFixture instance;
  return instance;
}

}  // namespace flexjit::testing
