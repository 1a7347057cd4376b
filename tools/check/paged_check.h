// Runs one paged (or contiguous-KV encoder) attention call on random inputs (paged_inputs.h)
// and checks it against the double-precision reference: what `flexjit run` does and what the
// GPU tests assert on. Outputs are poisoned before the launch.
#pragma once

#include <vector>

#include "check/paged_inputs.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"

namespace flexjit {

// Requires a CUDA device. `program` must come from `context`.
Result<PagedCheckReport> run_paged_check(fj_context* context, const fj_program* program,
                                         const PagedCheckConfig& config);

// The CUDA-graph contract of fj_plan (flexjit.h): one plan and one graph, captured once, then
// for each step its batch written into the same device buffers, the plan updated from the
// step's lengths and the graph replayed; each step's output is checked as run_paged_check
// does. The steps share mask, dtype, K/V cache dtype and scale mode, head dim, page size, heads
// and layout (each step's fp8 scales are written with its cache); their arrays must
// have one shape (give them explicitly, or none to get random ones shaped for the largest
// step). Requires a CUDA device.
Result<std::vector<PagedCheckReport>> run_graph_replay_check(
    fj_context* context, const fj_program* program, const std::vector<PagedCheckConfig>& steps);

}  // namespace flexjit
