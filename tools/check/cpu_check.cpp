#include "check/cpu_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "check/check_support.h"
#include "check/reference.h"
#include "cpu/cpu_attention.h"
#include "launch/handles.h"

namespace flexjit {

Result<KernelOwner> create_cpu_kernel(fj_context* context, const fj_program* program,
                                      const PagedCheckConfig& config) {
  std::vector<fj_define> defines;
  fj_kernel_desc desc = kernel_desc(config, defines);
  const std::string arch(cpu::kArch);
  desc.arch = arch.c_str();
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  return KernelOwner(kernel, fj_kernel_destroy);
}

HostArrays host_arrays(const HostPagedBatch& batch) {
  HostArrays host;
  for (const HostArray& array : batch.arrays) {
    host.buffers.push_back(copy_of(array.bits));
    host.arrays.push_back({array.bits.empty() ? nullptr : host.buffers.back().get(), array.rows,
                           array.cols, array.cols});
  }
  return host;
}

Result<CpuLaunchOutputs> run_cpu_launch(fj_context* context, const fj_program* program,
                                        const PagedCheckConfig& config, const PagedInputs& inputs) {
  const HostPagedBatch& batch = inputs.batch;
  auto kernel_owner = create_cpu_kernel(context, program, config);
  if (!kernel_owner) return kernel_owner.error();
  fj_kernel* kernel = kernel_owner->get();
  CpuLaunchOutputs outputs;
  const char* name = nullptr;
  fj_kernel_name(kernel, &name);
  outputs.kernel_name = name;

  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const HostBuffer q = copy_of(inputs.q_bits), k(inputs.k_cache(), inputs.k_cache_bytes()),
                   v(inputs.v_cache(), inputs.v_cache_bytes()),
                   qsl = copy_of(batch.query_start_loc), seq_lens = copy_of(batch.seq_lens),
                   table = copy_of(batch.block_table);
  const HostBuffer out(rows * batch.head_dim * 2, 0xff), lse(rows * sizeof(float), 0xff);
  const HostArrays arrays = host_arrays(batch);
  fj_paged_attention_args paged =
      paged_args(batch, inputs, q.get(), out.get(), k.get(), v.get(), lse.get(), qsl.get(),
                 seq_lens.get(), table.get(), arrays.arrays);
  paged.bad_index = config.check_bounds ? outputs.bad_index : nullptr;
  paged.sinks = batch.sinks.empty() ? nullptr : batch.sinks.data();
  paged.k_scale = inputs.k_scale.empty() ? nullptr : inputs.k_scale.data();
  paged.v_scale = inputs.v_scale.empty() ? nullptr : inputs.v_scale.data();
  // The encoder call: K/V rows are the reference's one-token blocks (make_paged_inputs).
  fj_varlen_attention_args varlen = varlen_args(paged, batch);

  const auto launch = [&] {
    return config.contiguous ? fj_varlen_attention(kernel, &varlen, nullptr)
                             : fj_paged_attention(kernel, &paged, nullptr);
  };
  if (launch() != FJ_SUCCESS) return Error{fj_context_last_error(context)};
  outputs.out_bits.resize(rows * batch.head_dim);
  outputs.lse.resize(rows);
  // std::copy_n rather than memcpy: with no query rows the vectors' data() is null, which memcpy
  // may not be given.
  std::copy_n(static_cast<const uint16_t*>(out.get()), outputs.out_bits.size(),
              outputs.out_bits.data());
  std::copy_n(static_cast<const float*>(lse.get()), outputs.lse.size(), outputs.lse.data());
  if (config.timing_iterations > 0) {
    paged.bad_index = varlen.bad_index = nullptr;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < config.timing_iterations; ++i) {
      if (launch() != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    }
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    outputs.ms = elapsed.count() / config.timing_iterations;
  }
  return outputs;
}

Result<PagedCheckReport> run_cpu_paged_check(fj_context* context, const fj_program* program,
                                             const PagedCheckConfig& config_in) {
  PagedCheckConfig config = config_in;
  auto variant = config_variant(*program, config);
  if (!variant) return variant.error();
  fill_random_arrays(config, program->arrays);
  auto inputs = make_paged_inputs(config);
  if (!inputs) return inputs.error();
  auto outputs = run_cpu_launch(context, program, config, *inputs);
  if (!outputs) return outputs.error();
  PagedCheckReport report;
  report.kernel_name = outputs->kernel_name;
  report.num_tokens = inputs->batch.num_tokens();
  report.kernel_ms = outputs->ms;
  std::copy(std::begin(outputs->bad_index), std::end(outputs->bad_index), report.bad_index);
  const ReferenceOutput reference = reference_paged_attention(*variant, inputs->batch);
  report.visible_pairs = reference.visible_pairs;
  compare_paged_outputs(config, inputs->batch, reference, outputs->out_bits, outputs->lse, report);
  return report;
}

OutputDifference output_difference(fj_dtype dtype, const std::vector<uint16_t>& a_bits,
                                   const std::vector<float>& a_lse,
                                   const std::vector<uint16_t>& b_bits,
                                   const std::vector<float>& b_lse) {
  OutputDifference result;
  double diff_sq = 0.0, norm_sq = 0.0;
  for (size_t i = 0; i < std::min(a_bits.size(), b_bits.size()); ++i) {
    const double a = from_bits(a_bits[i], dtype);
    const double b = from_bits(b_bits[i], dtype);
    if (!std::isfinite(a) || !std::isfinite(b)) {
      result.mismatched_non_finite += std::isfinite(a) != std::isfinite(b);
      continue;
    }
    diff_sq += (a - b) * (a - b);
    norm_sq += b * b;
    result.max_abs = std::max(result.max_abs, std::abs(a - b));
  }
  for (size_t i = 0; i < std::min(a_lse.size(), b_lse.size()); ++i) {
    if (std::isfinite(a_lse[i]) != std::isfinite(b_lse[i])) {
      result.mismatched_non_finite += a_lse[i] != b_lse[i];
      continue;
    }
    if (std::isfinite(a_lse[i])) {
      result.lse_max_abs =
          std::max(result.lse_max_abs, std::abs(double{a_lse[i]} - double{b_lse[i]}));
    }
  }
  result.relative = norm_sq > 0.0 ? std::sqrt(diff_sq / norm_sq) : std::sqrt(diff_sq);
  return result;
}

}  // namespace flexjit
