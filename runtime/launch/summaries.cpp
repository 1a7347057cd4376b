#include "launch/summaries.h"

#include <fmt/format.h>

#include <algorithm>

#include "array_summary.cuh"
#include "flexjit/compiler/host_params.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"

namespace flexjit {

KernelSpec array_summary_spec(const std::string& arch) {
  std::string arch_name = arch;
  std::erase(arch_name, '_');
  KernelSpec spec;
  spec.name = "array_summary_" + arch_name;
  spec.arch = arch;
  spec.source = fmt::format(
      "#include \"array_summary.cuh\"\n\n"
      "extern \"C\" __global__ void __launch_bounds__({threads})\n"
      "{name}(const fj::ArraySummaryArgs args) {{\n"
      "  fj::array_summary(args);\n"
      "}}\n",
      fmt::arg("threads", fj::kSummaryThreads), fmt::arg("name", spec.name));
  return spec;
}

Result<SummaryLayout> summary_layout(const ProgramKernel& kernel, const fj::ArrayParam* arrays) {
  SummaryLayout layout;
  for (size_t slot = 0; slot < kernel.arrays.size() && slot < size_t{fj::kMaxArrayParams}; ++slot) {
    if (!kernel.reads_array[slot]) continue;
    const RuntimeParam& param = kernel.arrays[slot];
    const fj::SummaryAxis axis = summary_axis(param);
    const fj::ArrayParam& array = arrays[slot];
    if (axis == fj::kSummaryNone) continue;
    if (array.rows <= 0 || array.cols <= 0) continue;  // every read yields 0: nothing to bound
    const uint64_t bytes =
        4 * static_cast<uint64_t>(fj::summary_words(array.rows, array.cols, axis));
    if (bytes > kMaxSummaryBytes) {
      return Error{fmt::format("array `{}` ({}x{}) is too large to summarise: {} bytes", param.name,
                               array.rows, array.cols, bytes)};
    }
    layout.entries.push_back(
        {static_cast<int>(slot), axis, param.type == dsl::Type::Float, layout.bytes});
    layout.bytes += (bytes + kSummaryAlignment - 1) / kSummaryAlignment * kSummaryAlignment;
  }
  return layout;
}

namespace {

Result<bool> launch_summary_kernel(const cuda::DriverApi& api, CUfunction function,
                                   const std::string& name, unsigned grid_x, unsigned grid_y,
                                   void* stream, fj::ArraySummaryArgs& args) {
  void* params[] = {&args};
  const CUresult status = api.cuLaunchKernel(function, grid_x, grid_y, 1, fj::kSummaryThreads, 1, 1,
                                             0, static_cast<CUstream>(stream), params, nullptr);
  if (status != CUDA_SUCCESS) return cuda::driver_error(api, "launching " + name, status);
  return true;
}

}  // namespace

Result<bool> enqueue_array_summary(const CompiledKernel& kernel, const fj::ArrayParam& array,
                                   bool is_float, int32_t* summary, void* stream) {
  auto api = cuda::driver_api();
  if (!api) return api.error();
  auto function = kernel.function(0);
  if (!function) {
    return Error{fmt::format("cannot load {}: {}", kernel.name(), function.error().message)};
  }
  const int64_t length = fj::summary_length(array);
  const int64_t lines = fj::summary_lines(array);
  if (length <= 0 || lines <= 0) return true;
  fj::ArraySummaryArgs args{};
  args.array = array;
  args.array.summary = nullptr;
  args.summary = summary;
  args.is_float = is_float ? 1 : 0;
  // Chunks of a line: at most 2^31 / 4096, far below the grid's x limit. Lines past the y
  // limit are taken in turn by the CTAs (a grid-stride loop).
  const int64_t chunks = (length + fj::kSummaryChunk - 1) / fj::kSummaryChunk;
  const int64_t grid_y = std::min<int64_t>(lines, fj::kSummaryMaxGridY);
  args.upper_levels = 0;
  if (auto launched =
          launch_summary_kernel(**api, *function, kernel.name(), static_cast<unsigned>(chunks),
                                static_cast<unsigned>(grid_y), stream, args);
      !launched) {
    return launched;
  }
  if (fj::summary_levels(length) <= fj::kSummaryChunkLevels) return true;
  args.upper_levels = 1;
  return launch_summary_kernel(**api, *function, kernel.name(), static_cast<unsigned>(lines), 1,
                               stream, args);
}

WorkspacePool::~WorkspacePool() {
  if (buffers_.empty()) return;
  Result<const cuda::DriverApi*> api = cuda::driver_api();
  if (!api) return;
  // cuMemFree acts in the current context: each buffer's is made current in turn and the
  // caller's restored. A context already destroyed took its memory with it.
  CUcontext previous = nullptr;
  (*api)->cuCtxGetCurrent(&previous);
  for (const auto& [context, buffers] : buffers_) {
    if ((*api)->cuCtxSetCurrent(context) != CUDA_SUCCESS) continue;
    if (buffers.current != 0) (*api)->cuMemFree(buffers.current);
    for (CUdeviceptr outgrown : buffers.outgrown)
      (*api)->cuMemFree(outgrown);
  }
  (*api)->cuCtxSetCurrent(previous);
}

Result<CUdeviceptr> WorkspacePool::get(uint64_t bytes) {
  Result<CUcontext> context = cuda::current_or_primary_context();
  if (!context) return context.error();
  // The context exists, so the driver table loaded.
  const cuda::DriverApi& api = *cuda::driver_api().value();
  std::lock_guard lock(mutex_);
  Buffers& buffers = buffers_[*context];
  if (buffers.bytes >= bytes) return buffers.current;
  const uint64_t size = std::max(bytes, 2 * buffers.bytes);
  CUdeviceptr pointer = 0;
  if (CUresult code = api.cuMemAlloc(&pointer, size); code != CUDA_SUCCESS) {
    return cuda::driver_error(api, fmt::format("allocating {} bytes of workspace", size), code);
  }
  if (buffers.current != 0) buffers.outgrown.push_back(buffers.current);
  buffers.current = pointer;
  buffers.bytes = size;
  return pointer;
}

}  // namespace flexjit
