// The C API's planned launches (fj_plan_*, flexjit.h): device memory of the work lists and
// split results, the host-to-device copies of each update, and the launches of a run.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "jit/kernel_source.h"
#include "launch/capi_internal.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"
#include "launch/plan.h"

namespace flexjit {
namespace {

constexpr uint64_t kPlanAlignment = 256;

uint64_t align_up(uint64_t bytes) {
  return (bytes + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
}

// Where each part of a plan lives in its one device allocation. The work lists (counts, prefill
// items, decode items) come first, laid out as in the host staging buffers, so an update copies
// them as they are.
struct PlanLayout {
  uint64_t prefill_items = 0;  // offsets in bytes; the counts are at 0
  uint64_t decode_items = 0;
  uint64_t work_bytes = 0;  // the work lists' part: what the staging buffers hold
  uint64_t partial_out = 0;
  uint64_t partial_lse = 0;
  uint64_t merge_counters = 0;
  uint64_t bytes = 0;
};

PlanLayout plan_layout(const PlanCapacity& capacity, int head_dim) {
  PlanLayout layout;
  layout.prefill_items = align_up(sizeof(fj::WorkCounts));
  layout.decode_items =
      layout.prefill_items + align_up(capacity.prefill_items * sizeof(fj::PrefillWorkItem));
  layout.work_bytes =
      layout.decode_items + align_up(capacity.decode_items * sizeof(fj::DecodeWorkItem));
  const uint64_t rows = capacity.partial_slots * fj::kDecodeRows;
  layout.partial_out = layout.work_bytes;
  layout.partial_lse = layout.partial_out + align_up(rows * head_dim * sizeof(float));
  layout.merge_counters = layout.partial_lse + align_up(rows * sizeof(float));
  layout.bytes = layout.merge_counters + align_up(capacity.merge_counters * sizeof(int32_t));
  return layout;
}

}  // namespace
}  // namespace flexjit

struct fj_plan {
  fj_kernel* kernel = nullptr;
  flexjit::PlanShape shape;
  flexjit::PlanCapacity capacity;
  flexjit::PlanLayout layout;
  flexjit::CompiledKernelPtr decode_kernel;  // null when no request can take the decode path
  // The decode kernel of sharded runs (context parallelism), compiled on the first one, and its
  // persistent grid.
  flexjit::CompiledKernelPtr sharded_decode_kernel;
  unsigned sharded_decode_grid = 0;
  int sms = 0;
  CUcontext cu_context = nullptr;
  CUdeviceptr memory = 0;
  unsigned prefill_grid = 0;  // persistent grids: at most what the device runs at once
  unsigned decode_grid = 0;
  // Two staging buffers in pinned host memory, used in turn: an update writes one while the
  // copy of the previous update may still be pending from the other.
  void* staging[2] = {nullptr, nullptr};
  CUevent copied[2] = {nullptr, nullptr};
  bool copy_recorded[2] = {false, false};
  int next_staging = 0;
  flexjit::WorkPlan work;  // the last successful update's

  ~fj_plan() {
    auto api = flexjit::cuda::driver_api();
    if (!api || cu_context == nullptr) return;
    // Memory is freed in the plan's context, the caller's restored (as WorkspacePool does).
    CUcontext previous = nullptr;
    (*api)->cuCtxGetCurrent(&previous);
    if ((*api)->cuCtxSetCurrent(cu_context) != CUDA_SUCCESS) return;
    if (memory != 0) (*api)->cuMemFree(memory);
    for (int i = 0; i < 2; ++i) {
      if (staging[i] != nullptr) (*api)->cuMemFreeHost(staging[i]);
      if (copied[i] != nullptr) (*api)->cuEventDestroy(copied[i]);
    }
    (*api)->cuCtxSetCurrent(previous);
  }
};

namespace flexjit {
namespace {

std::optional<Failure> driver_failure(const cuda::DriverApi& api, const char* what,
                                      CUresult status) {
  if (status == CUDA_SUCCESS) return std::nullopt;
  return fail(FJ_ERROR_CUDA,
              fmt::format("{} failed: {}", what, cuda::driver_error_string(api, status)));
}

// CTAs of `kernel` one SM runs at once with `smem` bytes of dynamic shared memory.
Result<int> ctas_per_sm(const cuda::DriverApi& api, const CompiledKernel& kernel, int threads,
                        size_t smem) {
  auto function = kernel.function(smem);
  if (!function) return function.error();
  int blocks = 0;
  const CUresult status =
      api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, *function, threads, smem);
  if (status != CUDA_SUCCESS) return cuda::driver_error(api, "cuOccupancyMaxActiveBlocks", status);
  return std::max(blocks, 1);
}

std::optional<Failure> create_plan(fj_kernel& kernel, const fj_plan_shape& s, fj_plan& plan) {
  if (kernel.entry->cpu != nullptr) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                "plans are for CUDA kernels: a CPU kernel (arch \"cpu\") runs each call "
                "through fj_paged_attention");
  }
  if (kernel.config.page_size == 0) {
    return fail(
        FJ_ERROR_INVALID_ARGUMENT,
        "kernel was created with page_size 0 (contiguous K/V): plans are for paged kernels");
  }
  auto api_result = cuda::driver_api();
  if (!api_result) return fail(FJ_ERROR_CUDA, api_result.error().message);
  const cuda::DriverApi& api = **api_result;
  auto context = cuda::current_or_primary_context();
  if (!context) return fail(FJ_ERROR_CUDA, context.error().message);
  plan.cu_context = *context;
  plan.kernel = &kernel;

  PlanShape& shape = plan.shape;
  shape.max_num_reqs = s.max_num_reqs;
  shape.max_num_tokens = s.max_num_tokens;
  shape.max_query_len = s.max_query_len;
  shape.num_heads = s.num_heads;
  shape.num_kv_heads = s.num_kv_heads;
  shape.page_size = kernel.config.page_size;
  shape.prefill_block_m = prefill_launch_shape(kernel.config).block_m;

  CUdevice device;
  if (auto f = driver_failure(api, "cuCtxGetDevice", api.cuCtxGetDevice(&device))) return f;
  int sms = 0;
  if (auto f = driver_failure(
          api, "cuDeviceGetAttribute",
          api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device))) {
    return f;
  }
  // The decode kernel, compiled for the kernel's own architecture from its variant.
  const size_t decode_smem =
      fj::paged_decode_smem_bytes(kernel.config.head_dim, kernel.config.kv_fp8);
  auto decode =
      kernel.context->cache.get(decode_kernel_spec(*kernel.entry->variant, kernel.config));
  if (!decode) return compile_failure(decode.error());
  auto decode_ctas = ctas_per_sm(api, **decode, fj::kDecodeThreads, decode_smem);
  if (!decode_ctas) return fail(FJ_ERROR_CUDA, decode_ctas.error().message);
  shape.decode_wave = sms * *decode_ctas;
  plan.sms = sms;

  auto capacity = plan_capacity(shape);
  if (!capacity) return fail(FJ_ERROR_INVALID_ARGUMENT, capacity.error().message);
  plan.capacity = *capacity;
  if (capacity->decode_items > 0) plan.decode_kernel = *decode;
  plan.decode_grid =
      static_cast<unsigned>(std::min<int64_t>(capacity->decode_items, shape.decode_wave));
  if (capacity->prefill_items > 0) {
    const PrefillLaunchShape launch = prefill_launch_shape(kernel.config);
    auto prefill_ctas = ctas_per_sm(api, *kernel.compiled, launch.threads, launch.smem_bytes);
    if (!prefill_ctas) return fail(FJ_ERROR_CUDA, prefill_ctas.error().message);
    plan.prefill_grid = static_cast<unsigned>(
        std::min<int64_t>(capacity->prefill_items, int64_t{sms} * *prefill_ctas));
  }

  plan.layout = plan_layout(plan.capacity, kernel.config.head_dim);
  if (auto f = driver_failure(api, "cuMemAlloc", api.cuMemAlloc(&plan.memory, plan.layout.bytes))) {
    return f;
  }
  // Counts 0 (a run before any update does nothing) and merge counters 0 (the invariant the
  // decode kernel keeps between launches).
  if (auto f =
          driver_failure(api, "cuMemsetD8", api.cuMemsetD8(plan.memory, 0, plan.layout.bytes))) {
    return f;
  }
  for (int i = 0; i < 2; ++i) {
    if (auto f = driver_failure(api, "cuMemAllocHost",
                                api.cuMemAllocHost(&plan.staging[i], plan.layout.work_bytes))) {
      return f;
    }
    if (auto f = driver_failure(api, "cuEventCreate",
                                api.cuEventCreate(&plan.copied[i], CU_EVENT_DISABLE_TIMING))) {
      return f;
    }
  }
  return std::nullopt;
}

std::optional<Failure> update_plan(fj_plan& plan, const int32_t* query_start_loc,
                                   const int32_t* seq_lens, int32_t num_reqs,
                                   int32_t max_blocks_per_req, void* stream) {
  if (num_reqs < 0) return fail(FJ_ERROR_INVALID_ARGUMENT, "num_reqs must be non-negative");
  if (query_start_loc == nullptr || (seq_lens == nullptr && num_reqs > 0)) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "query_start_loc or seq_lens is null");
  }
  if (num_reqs > plan.shape.max_num_reqs) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("num_reqs ({}) exceeds the plan's max_num_reqs ({})", num_reqs,
                            plan.shape.max_num_reqs));
  }
  WorkPlan work = std::move(plan.work);  // reuse its vectors; put back on every path
  auto built = build_plan(plan.shape, {query_start_loc, static_cast<size_t>(num_reqs) + 1},
                          {seq_lens, static_cast<size_t>(num_reqs)}, max_blocks_per_req, work);
  if (!built) {
    plan.work = std::move(work);
    return fail(FJ_ERROR_INVALID_ARGUMENT, built.error().message);
  }
  if (work.counts.prefill > plan.capacity.prefill_items ||
      work.counts.decode > plan.capacity.decode_items) {
    plan.work = std::move(work);
    return fail(FJ_ERROR_INTERNAL, "the planner exceeded the plan's capacity");
  }

  const cuda::DriverApi& api = *cuda::driver_api().value();  // loaded by fj_plan_create
  const int k = plan.next_staging;
  if (plan.copy_recorded[k]) {
    if (auto f =
            driver_failure(api, "cuEventSynchronize", api.cuEventSynchronize(plan.copied[k]))) {
      plan.work = std::move(work);
      return f;
    }
  }
  char* staging = static_cast<char*>(plan.staging[k]);
  std::memcpy(staging, &work.counts, sizeof work.counts);
  const size_t prefill_bytes = work.prefill.size() * sizeof(fj::PrefillWorkItem);
  const size_t decode_bytes = work.decode.size() * sizeof(fj::DecodeWorkItem);
  if (prefill_bytes > 0)
    std::memcpy(staging + plan.layout.prefill_items, work.prefill.data(), prefill_bytes);
  if (decode_bytes > 0)
    std::memcpy(staging + plan.layout.decode_items, work.decode.data(), decode_bytes);
  plan.work = std::move(work);

  const auto cu_stream = static_cast<CUstream>(stream);
  // The counts and prefill items in one copy, the decode items in another.
  const size_t head_bytes = plan.layout.prefill_items + prefill_bytes;
  if (auto f = driver_failure(api, "cuMemcpyHtoDAsync",
                              api.cuMemcpyHtoDAsync(plan.memory, staging, head_bytes, cu_stream))) {
    return f;
  }
  if (decode_bytes > 0) {
    if (auto f = driver_failure(
            api, "cuMemcpyHtoDAsync",
            api.cuMemcpyHtoDAsync(plan.memory + plan.layout.decode_items,
                                  staging + plan.layout.decode_items, decode_bytes, cu_stream))) {
      return f;
    }
  }
  if (auto f = driver_failure(api, "cuEventRecord", api.cuEventRecord(plan.copied[k], cu_stream))) {
    return f;
  }
  plan.copy_recorded[k] = true;
  plan.next_staging = 1 - k;
  return std::nullopt;
}

// The decode kernel of sharded runs (kv_sharded), compiled on the plan's first sharded run, and
// its persistent grid: the plan's decode items, at most what the device runs at once of it.
std::optional<Failure> sharded_decode_of(fj_plan& plan) {
  if (plan.sharded_decode_kernel != nullptr) return std::nullopt;
  fj_kernel& kernel = *plan.kernel;
  auto decode =
      kernel.context->cache.get(decode_kernel_spec(*kernel.entry->variant, sharded_config(kernel)));
  if (!decode) return compile_failure(decode.error());
  const cuda::DriverApi& api = *cuda::driver_api().value();  // loaded by fj_plan_create
  auto ctas =
      ctas_per_sm(api, **decode, fj::kDecodeThreads,
                  fj::paged_decode_smem_bytes(kernel.config.head_dim, kernel.config.kv_fp8));
  if (!ctas) return fail(FJ_ERROR_CUDA, ctas.error().message);
  plan.sharded_decode_grid = static_cast<unsigned>(
      std::min<int64_t>(plan.capacity.decode_items, int64_t{plan.sms} * *ctas));
  plan.sharded_decode_kernel = *decode;
  return std::nullopt;
}

std::optional<Failure> run_plan(fj_plan& plan, const fj_paged_attention_args& a, void* stream) {
  fj_kernel& kernel = *plan.kernel;
  fj::PagedPrefillArgs device;
  std::optional<fj::KvShard> shard;
  if (auto f = prepare_paged_args(kernel, a, device, shard)) return f;
  if (!shard && plan.work.short_request >= 0) {
    return fail(
        FJ_ERROR_INVALID_ARGUMENT,
        fmt::format("seq_lens[{}] ({}) is shorter than the request's {} query tokens: only "
                    "a sharded run (kv_shard_*, context parallelism) takes a request with "
                    "fewer keys than query tokens",
                    plan.work.short_request, plan.work.short_seq_len, plan.work.short_query_len));
  }
  if (a.num_heads != plan.shape.num_heads || a.num_kv_heads != plan.shape.num_kv_heads) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("args have {} heads over {} kv heads, the plan {} over {}", a.num_heads,
                            a.num_kv_heads, plan.shape.num_heads, plan.shape.num_kv_heads));
  }
  if (a.num_reqs < plan.work.num_reqs || a.num_tokens < plan.work.num_tokens) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("args hold {} requests and {} tokens, the plan's batch {} and {}",
                            a.num_reqs, a.num_tokens, plan.work.num_reqs, plan.work.num_tokens));
  }
  SummaryLayout layout;
  if (auto f = launch_summaries(kernel, device.params, a.workspace, a.workspace_bytes, layout)) {
    return f;
  }
  // After every check, before any work is enqueued: a sharded run takes the kernels' sharded
  // forms, which read the layout from `device`.
  CompiledKernelPtr prefill_kernel = kernel.compiled;
  CompiledKernelPtr decode_kernel = plan.decode_kernel;
  unsigned decode_grid = plan.decode_grid;
  if (shard) {
    if (plan.prefill_grid > 0) {
      if (auto f = sharded_kernel_of(kernel, prefill_kernel)) return f;
    }
    if (plan.decode_grid > 0) {
      if (auto f = sharded_decode_of(plan)) return f;
      decode_kernel = plan.sharded_decode_kernel;
      decode_grid = plan.sharded_decode_grid;
    }
  }
  if (auto f = enqueue_summaries(kernel, layout, a.workspace, device.params, stream)) return f;
  const auto counts = reinterpret_cast<const fj::WorkCounts*>(plan.memory);
  if (plan.prefill_grid > 0) {
    device.work_counts = counts;
    device.work_items =
        reinterpret_cast<const fj::PrefillWorkItem*>(plan.memory + plan.layout.prefill_items);
    const PrefillLaunchShape& shape = kernel.launch_shape;
    if (auto f = launch(*prefill_kernel, plan.prefill_grid, 1, 1, shape.threads, shape.smem_bytes,
                        stream, &device)) {
      return f;
    }
  }
  if (decode_grid > 0) {
    fj::PagedDecodeArgs decode{};
    decode.attention = device;
    decode.attention.work_counts = nullptr;
    decode.attention.work_items = nullptr;
    decode.work_counts = counts;
    decode.work_items =
        reinterpret_cast<const fj::DecodeWorkItem*>(plan.memory + plan.layout.decode_items);
    decode.partial_out = reinterpret_cast<float*>(plan.memory + plan.layout.partial_out);
    decode.partial_lse = reinterpret_cast<float*>(plan.memory + plan.layout.partial_lse);
    decode.merge_counters = reinterpret_cast<int32_t*>(plan.memory + plan.layout.merge_counters);
    if (auto f = launch(*decode_kernel, decode_grid, 1, 1, fj::kDecodeThreads,
                        fj::paged_decode_smem_bytes(kernel.config.head_dim, kernel.config.kv_fp8),
                        stream, &decode)) {
      return f;
    }
  }
  return std::nullopt;
}

}  // namespace
}  // namespace flexjit

extern "C" {

using flexjit::fail;
using flexjit::Failure;
using flexjit::guarded;

FJ_API fj_status fj_plan_create(fj_kernel* kernel, const fj_plan_shape* shape, fj_plan** out) {
  const fj_context* context = kernel != nullptr ? kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (kernel == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "kernel is null");
    if (out == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "out is null");
    if (auto f = flexjit::check_args_struct("shape", shape)) return f;
    auto plan = std::make_unique<fj_plan>();
    if (auto f = flexjit::create_plan(*kernel, *shape, *plan)) return f;
    *out = plan.release();
    return std::nullopt;
  });
}

FJ_API fj_status fj_plan_destroy(fj_plan* plan) {
  delete plan;
  return FJ_SUCCESS;
}

FJ_API fj_status fj_plan_update(fj_plan* plan, const int32_t* query_start_loc,
                                const int32_t* seq_lens, int32_t num_reqs,
                                int32_t max_blocks_per_req, void* stream) {
  const fj_context* context = plan != nullptr ? plan->kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (plan == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "plan is null");
    return flexjit::update_plan(*plan, query_start_loc, seq_lens, num_reqs, max_blocks_per_req,
                                stream);
  });
}

FJ_API fj_status fj_plan_run(fj_plan* plan, const fj_paged_attention_args* args, void* stream) {
  const fj_context* context = plan != nullptr ? plan->kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (plan == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "plan is null");
    fj_paged_attention_args a;
    if (auto f = flexjit::read_args_struct("args", args, flexjit::kPagedArgsOldestSize, a)) {
      return f;
    }
    return flexjit::run_plan(*plan, a, stream);
  });
}

}  // extern "C"
