// The variants whose CUDA hooks emitted_hooks_test.cpp compiles for the host. The generator
// (emit_hooks_main.cpp, run by the build) writes their emit_cuda_variant() structs into one
// header; the test lowers the same list again and checks each struct against the variant.
#pragma once

#include <vector>

#include "flexjit/compiler/mask.h"

namespace flexjit::testing {

// Every kEmittedHookStride-th variant of issue 29's generated set (generated_variant).
inline constexpr int kEmittedHookStride = 6;
inline constexpr int kEmittedHookGenerated = 240;

// In order: every mask and variant of dsl/lib/standard.mask, prefix_ranges with 16 and 64
// ranges (chains the hooks write as loops), those of tools/bench/family.mask, then the
// generated sample. Aborts with the
// diagnostics if standard.mask does not lower.
std::vector<Variant> emitted_hook_variants();

}  // namespace flexjit::testing
