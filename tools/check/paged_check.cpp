#include "check/paged_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <type_traits>

#include <fmt/format.h>

#include "check/check_support.h"
#include "check/cpu_check.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"

namespace flexjit {

namespace {

// Device copies of array parameters and their descriptors (an empty array gets a null pointer).
Result<bool> upload_arrays(const cuda::DriverApi& api, const std::vector<HostArray>& host,
                           std::deque<DeviceBuffer>& buffers, std::vector<fj_array>& arrays) {
  for (const HostArray& array : host) {
    DeviceBuffer& buffer = buffers.emplace_back(api);
    if (!array.bits.empty()) {
      if (auto status = buffer.upload(array.bits.data(), array.bits.size() * 4); !status) {
        return status;
      }
    }
    arrays.push_back(
        {array.bits.empty() ? nullptr : buffer.get(), array.rows, array.cols, array.cols});
  }
  return true;
}

// A CUDA graph of one fj_plan_run captured on `stream` (the plan's work list is read when the
// graph runs, so the capture's batch does not matter).
class CapturedRun {
 public:
  explicit CapturedRun(const cuda::DriverApi& api) : api_(api) {}
  CapturedRun(const CapturedRun&) = delete;
  CapturedRun& operator=(const CapturedRun&) = delete;
  ~CapturedRun() {
    if (exec_ != nullptr) api_.cuGraphExecDestroy(exec_);
    if (graph_ != nullptr) api_.cuGraphDestroy(graph_);
  }

  Result<bool> capture(fj_context* context, fj_plan* plan, const fj_paged_attention_args& args,
                       CUstream stream) {
    CUresult status = api_.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuStreamBeginCapture", status);
    const fj_status run = fj_plan_run(plan, &args, stream);
    status = api_.cuStreamEndCapture(stream, &graph_);
    if (run != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuStreamEndCapture", status);
    status = api_.cuGraphInstantiate(&exec_, graph_, 0);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuGraphInstantiate", status);
    return true;
  }

  Result<bool> launch(CUstream stream) const {
    const CUresult status = api_.cuGraphLaunch(exec_, stream);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuGraphLaunch", status);
    return true;
  }

 private:
  const cuda::DriverApi& api_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

struct StreamDeleter {
  const cuda::DriverApi* api;
  void operator()(CUstream stream) const { api->cuStreamDestroy(stream); }
};
using StreamPtr = std::unique_ptr<std::remove_pointer_t<CUstream>, StreamDeleter>;

Result<StreamPtr> make_stream(const cuda::DriverApi& api) {
  CUstream stream = nullptr;
  const CUresult status = api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (status != CUDA_SUCCESS) return cuda::driver_error(api, "cuStreamCreate", status);
  return StreamPtr(stream, StreamDeleter{&api});
}

}  // namespace

Result<PagedCheckReport> run_paged_check(fj_context* context, const fj_program* program,
                                         const PagedCheckConfig& config_in) {
  PagedCheckConfig config = config_in;
  auto variant = config_variant(*program, config);
  if (!variant) return variant.error();
  if (config.params.size() != program->scalars.size()) {
    return Error{fmt::format("{} scalar runtime parameters given, the program declares {}",
                             config.params.size(), program->scalars.size())};
  }
  fill_random_arrays(config, program->arrays);
  if (config.arrays.size() != program->arrays.size()) {
    return Error{fmt::format("{} array runtime parameters given, the program declares {}",
                             config.arrays.size(), program->arrays.size())};
  }
  for (const HostArray& array : config.arrays) {
    if (array.rows < 0 || array.cols < 0 ||
        int64_t{array.rows} * array.cols != static_cast<int64_t>(array.bits.size())) {
      return Error{"an array's bits must hold rows * cols elements"};
    }
  }
  auto inputs = make_paged_inputs(config);
  if (!inputs) return inputs.error();
  const HostPagedBatch& batch = inputs->batch;

  std::vector<fj_define> defines;
  const fj_kernel_desc desc = kernel_desc(config, defines);
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)> kernel_owner(kernel, fj_kernel_destroy);
  PagedCheckReport report;
  report.kernel_name = kernel->compiled->name();
  report.num_tokens = batch.num_tokens();

  auto api_result = cuda::driver_api();
  if (!api_result) return api_result.error();
  const cuda::DriverApi& api = **api_result;
  if (auto cu_context = cuda::current_or_primary_context(); !cu_context) {
    return cu_context.error();
  }

  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const size_t out_bytes = rows * batch.head_dim * 2;
  DeviceBuffer q(api), k(api), v(api), out(api), lse(api), qsl(api), seq_lens(api), table(api),
      bad_index(api), sinks(api), k_scale(api), v_scale(api);
  for (auto status : {
           q.upload(inputs->q_bits.data(), inputs->q_bits.size() * 2),
           k.upload(inputs->k_cache(), inputs->k_cache_bytes()),
           inputs->v_offset >= 0 ? Result<bool>(true)
                                 : v.upload(inputs->v_cache(), inputs->v_cache_bytes()),
           out.fill(out_bytes, 0xff),
           lse.fill(rows * sizeof(float), 0xff),
           qsl.upload(batch.query_start_loc.data(), batch.query_start_loc.size() * 4),
           seq_lens.upload(batch.seq_lens.data(), batch.seq_lens.size() * 4),
           table.upload(batch.block_table.data(), batch.block_table.size() * 4),
           bad_index.fill(4 * sizeof(int32_t), 0),
       }) {
    if (!status) return status.error();
  }
  std::deque<DeviceBuffer> array_buffers;  // a deque: buffers neither copy nor move
  std::vector<fj_array> arrays;
  if (auto status = upload_arrays(api, batch.arrays, array_buffers, arrays); !status) {
    return status.error();
  }

  fj_paged_attention_args paged =
      paged_args(batch, *inputs, q.get(), out.get(), k.get(), v.get(), lse.get(), qsl.get(),
                 seq_lens.get(), table.get(), arrays);
  paged.bad_index = config.check_bounds ? static_cast<int32_t*>(bad_index.get()) : nullptr;
  auto device_sinks = upload_optional(sinks, batch.sinks);
  if (!device_sinks) return device_sinks.error();
  paged.sinks = *device_sinks;
  auto device_k_scale = upload_optional(k_scale, inputs->k_scale);
  if (!device_k_scale) return device_k_scale.error();
  paged.k_scale = *device_k_scale;
  auto device_v_scale = upload_optional(v_scale, inputs->v_scale);
  if (!device_v_scale) return device_v_scale.error();
  paged.v_scale = *device_v_scale;

  // The encoder call: K/V rows are the cache's one-token blocks (see make_inputs).
  const fj_varlen_attention_args varlen = varlen_args(paged, batch);

  // Planned launches: a plan that holds exactly this batch, on a stream of its own (a legacy
  // default stream cannot be captured).
  PlanPtr plan;
  auto stream_result = make_stream(api);
  if (!stream_result) return stream_result.error();
  CUstream stream = config.launch == PagedLaunch::Direct ? nullptr : stream_result->get();
  CapturedRun graph(api);
  DeviceBuffer workspace(api);
  if (config.launch != PagedLaunch::Direct) {
    if (config.contiguous) return Error{"planned launches are for paged kernels"};
    const fj_plan_shape shape = plan_shape_of(paged);
    fj_plan* created = nullptr;
    if (fj_plan_create(kernel, &shape, &created) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    plan.reset(created);
    if (fj_plan_update(plan.get(), batch.query_start_loc.data(), batch.seq_lens.data(),
                       batch.num_reqs(), batch.max_blocks_per_req, stream) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    // A caller's workspace: the kernel's own buffer cannot be allocated while capturing.
    uint64_t workspace_bytes = 0;
    if (fj_attention_workspace_size(kernel, paged.arrays, paged.num_arrays, &workspace_bytes) !=
        FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (workspace_bytes > 0) {
      if (auto status = workspace.fill(workspace_bytes, 0); !status) return status.error();
      paged.workspace = workspace.get();
      paged.workspace_bytes = workspace_bytes;
    }
    if (config.launch == PagedLaunch::Graph) {
      if (auto status = graph.capture(context, plan.get(), paged, stream); !status) {
        return status.error();
      }
    }
  }
  auto launch = [&]() -> Result<bool> {
    fj_status status = FJ_SUCCESS;
    switch (config.launch) {
      case PagedLaunch::Direct:
        status = config.contiguous ? fj_varlen_attention(kernel, &varlen, nullptr)
                                   : fj_paged_attention(kernel, &paged, nullptr);
        break;
      case PagedLaunch::Planned:
        status = fj_plan_run(plan.get(), &paged, stream);
        break;
      case PagedLaunch::Graph:
        return graph.launch(stream);
    }
    if (status != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    return true;
  };
  if (auto launched = launch(); !launched) return launched.error();
  if (const CUresult status = api.cuCtxSynchronize(); status != CUDA_SUCCESS) {
    return cuda::driver_error(api, "kernel execution", status);
  }
  std::vector<uint16_t> out_bits(rows * batch.head_dim);
  std::vector<float> lse_values(rows);
  if (auto status = out.download(out_bits.data(), out_bytes); !status) return status.error();
  if (auto status = lse.download(lse_values.data(), rows * sizeof(float)); !status) {
    return status.error();
  }
  if (auto status = bad_index.download(report.bad_index, sizeof report.bad_index); !status) {
    return status.error();
  }

  if (config.timing_iterations > 0) {
    CUevent start, stop;
    api.cuEventCreate(&start, CU_EVENT_DEFAULT);
    api.cuEventCreate(&stop, CU_EVENT_DEFAULT);
    api.cuEventRecord(start, stream);
    for (int i = 0; i < config.timing_iterations; ++i) {
      if (auto launched = launch(); !launched) return launched.error();
    }
    api.cuEventRecord(stop, stream);
    api.cuEventSynchronize(stop);
    float ms = 0.0f;
    api.cuEventElapsedTime(&ms, start, stop);
    report.kernel_ms = ms / config.timing_iterations;
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
  }

  const ReferenceOutput reference = reference_paged_attention(*variant, batch);
  report.visible_pairs = reference.visible_pairs;
  compare_paged_outputs(config, batch, reference, out_bits, lse_values, report);
  if (config.compare_cpu) {
    PagedCheckConfig untimed = config;
    untimed.timing_iterations = 0;
    untimed.check_bounds = false;
    auto cpu = run_cpu_launch(context, program, untimed, *inputs);
    if (!cpu) return cpu.error();
    const OutputDifference difference =
        output_difference(config.dtype, out_bits, lse_values, cpu->out_bits, cpu->lse);
    report.cpu_relative_error = difference.relative;
    report.cpu_lse_max_abs_error = difference.lse_max_abs;
    report.cpu_mismatched_non_finite = difference.mismatched_non_finite;
  }
  return report;
}

}  // namespace flexjit

namespace flexjit {

Result<std::vector<PagedCheckReport>> run_graph_replay_check(
    fj_context* context, const fj_program* program, const std::vector<PagedCheckConfig>& steps_in) {
  if (steps_in.empty()) return Error{"no steps"};
  std::vector<PagedCheckConfig> steps = steps_in;
  for (const PagedCheckConfig& step : steps) {
    if (step.contiguous) return Error{"graph replays are for paged kernels"};
    if (step.kv_fp8 != steps_in[0].kv_fp8 || step.kv_scale != steps_in[0].kv_scale) {
      return Error{"the steps of a graph replay share the K/V cache's dtype and scales"};
    }
    if (step.query_lens.size() != step.context_lens.size()) {
      return Error{"query_lens and context_lens must be of equal length"};
    }
  }
  // One array shape for every step: random arrays shaped for the largest.
  if (steps[0].arrays.empty() && !program->arrays.empty()) {
    int max_reqs = 0;
    int max_seq_len = 0;
    for (const PagedCheckConfig& step : steps) {
      max_reqs = std::max(max_reqs, static_cast<int>(step.query_lens.size()));
      for (size_t r = 0; r < step.query_lens.size(); ++r)
        max_seq_len = std::max(max_seq_len, step.query_lens[r] + step.context_lens[r]);
    }
    const std::vector<HostArray> arrays =
        random_arrays(program->arrays, max_reqs, steps[0].num_heads, max_seq_len, steps[0].seed);
    for (PagedCheckConfig& step : steps)
      step.arrays = arrays;
  }
  const PagedCheckConfig& first = steps[0];
  auto variant = config_variant(*program, first);
  if (!variant) return variant.error();

  // Every step's inputs, then one table stride and block count that fit them all.
  std::vector<PagedInputs> inputs;
  int max_blocks = 1;
  int64_t table_stride = 1;
  size_t q_bytes = 16, k_bytes = 16, v_bytes = 16, rows = 1, table_bytes = 16, reqs = 1;
  for (const PagedCheckConfig& step : steps) {
    auto made = make_paged_inputs(step);
    if (!made) return made.error();
    inputs.push_back(std::move(*made));
    const HostPagedBatch& batch = inputs.back().batch;
    max_blocks = std::max(max_blocks, batch.max_blocks_per_req);
    table_stride = std::max(table_stride, batch.block_table_stride);
    q_bytes = std::max(q_bytes, inputs.back().q_bits.size() * 2);
    k_bytes = std::max(k_bytes, inputs.back().k_cache_bytes());
    v_bytes = std::max(v_bytes, inputs.back().v_cache_bytes());
    rows = std::max(rows, static_cast<size_t>(batch.num_tokens()) * batch.num_heads);
    reqs = std::max(reqs, static_cast<size_t>(batch.num_reqs()));
  }
  for (PagedInputs& in : inputs) {
    // Re-lay each table at the common stride; the new columns hold garbage too.
    HostPagedBatch& batch = in.batch;
    std::vector<int32_t> table(batch.num_reqs() * table_stride, 0x7fffff00);
    for (int r = 0; r < batch.num_reqs(); ++r) {
      std::copy_n(batch.block_table.begin() + r * batch.block_table_stride,
                  batch.block_table_stride, table.begin() + r * table_stride);
    }
    batch.block_table = std::move(table);
    batch.block_table_stride = table_stride;
    batch.max_blocks_per_req = max_blocks;
    table_bytes = std::max(table_bytes, batch.block_table.size() * 4);
  }

  std::vector<fj_define> defines;
  const fj_kernel_desc desc = kernel_desc(first, defines);
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)> kernel_owner(kernel, fj_kernel_destroy);
  auto api_result = cuda::driver_api();
  if (!api_result) return api_result.error();
  const cuda::DriverApi& api = **api_result;
  if (auto cu_context = cuda::current_or_primary_context(); !cu_context) {
    return cu_context.error();
  }
  const size_t head_dim = first.head_dim;
  // The steps share the fp8 scales' count (one, or one per kv head); each writes its own.
  const size_t scale_bytes = inputs[0].k_scale.size() * sizeof(float);
  DeviceBuffer q(api), k(api), v(api), out(api), lse(api), qsl(api), seq_lens(api), table(api),
      workspace(api), sinks(api), k_scale(api), v_scale(api);
  for (auto status :
       {q.fill(q_bytes, 0), k.fill(k_bytes, 0), v.fill(v_bytes, 0),
        out.fill(rows * head_dim * 2, 0xff), lse.fill(rows * 4, 0xff), qsl.fill((reqs + 1) * 4, 0),
        seq_lens.fill(reqs * 4, 0), table.fill(table_bytes, 0), k_scale.fill(scale_bytes, 0),
        v_scale.fill(scale_bytes, 0)}) {
    if (!status) return status.error();
  }
  std::deque<DeviceBuffer> array_buffers;  // a deque: buffers neither copy nor move
  std::vector<fj_array> arrays;
  if (auto status = upload_arrays(api, inputs[0].batch.arrays, array_buffers, arrays); !status) {
    return status.error();
  }

  // The captured arguments: the largest batch's counts over the shared buffers.
  fj_paged_attention_args paged =
      paged_args(inputs[0].batch, inputs[0], q.get(), out.get(), k.get(), v.get(), lse.get(),
                 qsl.get(), seq_lens.get(), table.get(), arrays);
  auto device_sinks = upload_optional(sinks, inputs[0].batch.sinks);  // the steps share heads
  if (!device_sinks) return device_sinks.error();
  paged.sinks = *device_sinks;
  if (inputs[0].kv_fp8()) {
    paged.k_scale = static_cast<const float*>(k_scale.get());
    paged.v_scale = static_cast<const float*>(v_scale.get());
  }
  fj_plan_shape shape{};
  shape.struct_size = sizeof(shape);
  for (const PagedInputs& in : inputs) {
    const fj_paged_attention_args step =
        paged_args(in.batch, in, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                   nullptr, arrays);
    shape.max_num_reqs = std::max(shape.max_num_reqs, step.num_reqs);
    shape.max_num_tokens = std::max(shape.max_num_tokens, step.num_tokens);
    shape.max_query_len = std::max(shape.max_query_len, step.max_query_len);
  }
  shape.num_heads = paged.num_heads;
  shape.num_kv_heads = paged.num_kv_heads;
  paged.num_reqs = shape.max_num_reqs;
  paged.num_tokens = shape.max_num_tokens;
  paged.max_query_len = shape.max_query_len;
  uint64_t workspace_bytes = 0;
  if (fj_attention_workspace_size(kernel, paged.arrays, paged.num_arrays, &workspace_bytes) !=
      FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  if (workspace_bytes > 0) {
    if (auto status = workspace.fill(workspace_bytes, 0); !status) return status.error();
    paged.workspace = workspace.get();
    paged.workspace_bytes = workspace_bytes;
  }

  fj_plan* created = nullptr;
  if (fj_plan_create(kernel, &shape, &created) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  PlanPtr plan(created);
  auto stream = make_stream(api);
  if (!stream) return stream.error();
  CapturedRun graph(api);
  if (auto status = graph.capture(context, plan.get(), paged, stream->get()); !status) {
    return status.error();
  }

  std::vector<PagedCheckReport> reports;
  for (size_t i = 0; i < steps.size(); ++i) {
    const PagedInputs& in = inputs[i];
    const HostPagedBatch& batch = in.batch;
    const size_t step_rows = static_cast<size_t>(batch.num_tokens()) * batch.num_heads;
    const std::vector<uint8_t> poison(rows * head_dim * 2, 0xff);
    for (auto status :
         {q.write(in.q_bits.data(), in.q_bits.size() * 2),
          k.write(in.k_cache(), in.k_cache_bytes()), v.write(in.v_cache(), in.v_cache_bytes()),
          k_scale.write(in.k_scale.data(), in.k_scale.size() * sizeof(float)),
          v_scale.write(in.v_scale.data(), in.v_scale.size() * sizeof(float)),
          out.write(poison.data(), poison.size()), lse.write(poison.data(), rows * 4),
          qsl.write(batch.query_start_loc.data(), batch.query_start_loc.size() * 4),
          seq_lens.write(batch.seq_lens.data(), batch.seq_lens.size() * 4),
          table.write(batch.block_table.data(), batch.block_table.size() * 4)}) {
      if (!status) return status.error();
    }
    if (fj_plan_update(plan.get(), batch.query_start_loc.data(), batch.seq_lens.data(),
                       batch.num_reqs(), max_blocks, stream->get()) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (auto status = graph.launch(stream->get()); !status) return status.error();
    if (const CUresult status = api.cuStreamSynchronize(stream->get()); status != CUDA_SUCCESS) {
      return cuda::driver_error(api, "graph replay", status);
    }
    std::vector<uint16_t> out_bits(step_rows * head_dim);
    std::vector<float> lse_values(step_rows);
    if (auto status = out.download(out_bits.data(), out_bits.size() * 2); !status) {
      return status.error();
    }
    if (auto status = lse.download(lse_values.data(), lse_values.size() * 4); !status) {
      return status.error();
    }
    PagedCheckReport report;
    report.kernel_name = kernel->compiled->name();
    report.num_tokens = batch.num_tokens();
    const ReferenceOutput reference = reference_paged_attention(*variant, batch);
    report.visible_pairs = reference.visible_pairs;
    compare_paged_outputs(steps[i], batch, reference, out_bits, lse_values, report);
    reports.push_back(report);
  }
  return reports;
}

}  // namespace flexjit
