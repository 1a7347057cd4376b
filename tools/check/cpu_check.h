// The CPU backend checked on paged_check's random inputs: what `flexjit run --device cpu`, the
// CPU tests and the [gpu] tests' CPU comparison run. Launches go through the C API (a kernel
// created with arch "cpu", host buffers), so its checks and dispatch are exercised too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "check/host_buffer.h"
#include "check/paged_inputs.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"

namespace flexjit {

// What one CPU launch over a check's inputs produced.
struct CpuLaunchOutputs {
  std::string kernel_name;
  std::vector<uint16_t> out_bits;  // [tokens][heads][head_dim]
  std::vector<float> lse;          // [tokens][heads]
  int32_t bad_index[4] = {0, 0, 0, 0};
  double ms = 0;  // mean time per launch with config.timing_iterations > 0
};

// The CPU kernel (arch "cpu") of `config`, destroyed with its owner.
using KernelOwner = std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)>;
Result<KernelOwner> create_cpu_kernel(fj_context* context, const fj_program* program,
                                      const PagedCheckConfig& config);

// The batch's array parameters copied to host buffers, and their descriptors (by slot).
struct HostArrays {
  std::vector<HostBuffer> buffers;
  std::vector<fj_array> arrays;
};
HostArrays host_arrays(const HostPagedBatch& batch);

// Runs the CPU kernel of `config` (its arch ignored) over `inputs` (make_paged_inputs of the
// same config, arrays given), outputs poisoned beforehand.
Result<CpuLaunchOutputs> run_cpu_launch(fj_context* context, const fj_program* program,
                                        const PagedCheckConfig& config, const PagedInputs& inputs);

// run_paged_check on the CPU backend: random inputs (arrays random where the config has none),
// one launch (plus timing_iterations timed ones), compared with the reference.
Result<PagedCheckReport> run_cpu_paged_check(fj_context* context, const fj_program* program,
                                             const PagedCheckConfig& config);

// How far apart two launches' outputs are: ||a - b|| / ||b|| over finite pairs, the largest
// |a - b| and LSE difference (rows where both are -inf agree), and the pairs where exactly one
// side is not finite.
struct OutputDifference {
  double relative = 0;
  double max_abs = 0;
  double lse_max_abs = 0;
  int64_t mismatched_non_finite = 0;
};
OutputDifference output_difference(fj_dtype dtype, const std::vector<uint16_t>& a_bits,
                                   const std::vector<float>& a_lse,
                                   const std::vector<uint16_t>& b_bits,
                                   const std::vector<float>& b_lse);

}  // namespace flexjit
