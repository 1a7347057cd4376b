// Random launches for the tests that compare two implementations of a mask's hooks over the
// same inputs (host_code_analysis_test.cpp: LLVM's host code against MaskAnalysis;
// emitted_hooks_test.cpp: the CUDA hooks compiled for the host against the evaluator and
// MaskAnalysis): parameters with their summaries, and tiles near 0, at negative positions and
// near the int32 ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"
#include "random_ir.h"

namespace flexjit::testing {

// A small value, or one of the int32 values where arithmetic turns (0, -1, the ends).
int32_t random_int(RandomExpr& random);

// Values along an array's lines: runs of rising ids (documents, ranges), small values, int32
// extremes; float arrays hold the same values halved, or special floats.
HostArray random_array(RandomExpr& random, ir::Type type, const std::vector<std::string>& dims);

// A launch's parameters for `variant`: through HostParams, which summarises the arrays with a
// position dimension.
HostParams random_params(RandomExpr& random, const Variant& variant);

// The standard masks' parameters as they are meant: rising ranges, runs of document ids, a
// prefix length, slopes; or, when not `meant`, random ones.
HostParams standard_params(RandomExpr& random, const Variant& variant, bool meant);

// A position: mostly small and near 0 (where the arrays are), often 0, sometimes negative,
// near INT_MAX or near INT_MIN.
int32_t random_start(RandomExpr& random);

// A random tile: [q0, q1) and [k0, k1), mostly non-empty, q1 and k1 up to INT_MAX, now and then
// empty or reversed.
Tile random_tile(RandomExpr& random);

std::string tile_text(const Tile& tile);

}  // namespace flexjit::testing
