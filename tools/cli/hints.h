// `flexjit hints`: the tile map of a mask for one request and head
// (docs/architecture.md#tile-analysis) as ASCII, SVG or JSON, with its exactness against brute
// force, and FlexAttention's BlockMask tensors. docs/hints.md documents the command.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/result.h"

namespace flexjit::cli {

struct HintOptions {
  int32_t q_len = 1024;
  int32_t kv_len = 1024;
  std::string tile = "64x64";
  std::vector<std::string> settings;  // --set NAME=VALUE, scalars and arrays
  int32_t b = 0;                      // the request and head of the map
  int32_t h = 0;
  bool exact = false;      // brute-force exactness whatever the matrix size
  bool json = false;       // the map as JSON on stdout instead of text
  std::string svg;         // write an SVG picture of the map here
  std::string block_mask;  // write FlexAttention's BlockMask tensors (JSON) here
};

// Matrices of at most this many (query, key) pairs (2048 x 2048) get the brute-force exactness
// check without --exact. It evaluates the mask through HostCode (count_visible_pairs): a few
// milliseconds with LLVM-compiled code, 0.1 to 5 s of one core with the evaluator (a build
// without LLVM), by the mask's size, split over all cores.
inline constexpr int64_t kExactPairsLimit = int64_t{1} << 22;
// Maps of more tiles are refused.
inline constexpr int64_t kMaxHintTiles = 4'000'000;

// The `--set` options that name array parameters of `variant`, parsed (parse_array_values, for
// requests up to b and heads up to h) into host arrays by slot, and which slots were given.
// The other options are appended to `scalar_settings`. Fails on unknown names and bad values.
struct SetArrays {
  std::vector<HostArray> arrays;  // empty where not given
  std::vector<bool> given;
};
Result<SetArrays> set_arrays(const Variant& variant, const std::vector<std::string>& settings,
                             int32_t b, int32_t h, std::vector<std::string>& scalar_settings);

// set_arrays for `flexjit hints`, which also fails on an array the mask reads that is not
// given.
Result<std::vector<HostArray>> hint_arrays(const Variant& variant,
                                           const std::vector<std::string>& settings, int32_t b,
                                           int32_t h, std::vector<std::string>& scalar_settings);

// Builds and prints the tile map of `variant` (shown as `label`) with runtime parameters
// `params`, and writes the files asked for. Returns the exit code: 0, 1 on an error (bad
// shape, an unwritable file, an unsound tile found by the brute-force check).
int print_hints(const Variant& variant, const std::string& label, const HostParams& params,
                const HintOptions& options);

}  // namespace flexjit::cli
