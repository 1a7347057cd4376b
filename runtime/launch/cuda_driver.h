// The CUDA driver API, loaded from libcuda.so.1 at run time. Nothing links libcuda, so the
// library loads (and compiles kernels) on machines without a GPU driver; only launching
// needs one. cuda.h is used for the driver's types and prototypes only.
#pragma once

#include <cuda.h>

#include <span>
#include <string>
#include <string_view>

#include "flexjit/compiler/result.h"

// Every driver entry point the runtime calls. cuda.h #defines several of these names to
// versioned symbols (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2);
// the argument is macro-expanded where the list is used, so the table's members, their types
// and the symbols looked up are all the versioned ones, and callers writing `api.cuMemAlloc`
// reach the same member through the same macro.
#define FJ_FOR_EACH_DRIVER_ENTRY(X)              \
  X(cuInit)                                      \
  X(cuDriverGetVersion)                          \
  X(cuDeviceGet)                                 \
  X(cuDeviceGetCount)                            \
  X(cuDeviceGetAttribute)                        \
  X(cuDeviceGetName)                             \
  X(cuDevicePrimaryCtxRetain)                    \
  X(cuDevicePrimaryCtxRelease)                   \
  X(cuCtxGetCurrent)                             \
  X(cuCtxSetCurrent)                             \
  X(cuCtxGetDevice)                              \
  X(cuCtxSynchronize)                            \
  X(cuModuleLoadData)                            \
  X(cuModuleUnload)                              \
  X(cuModuleGetFunction)                         \
  X(cuFuncSetAttribute)                          \
  X(cuFuncGetAttribute)                          \
  X(cuLaunchKernel)                              \
  X(cuMemAlloc)                                  \
  X(cuMemFree)                                   \
  X(cuMemcpyHtoD)                                \
  X(cuMemcpyDtoH)                                \
  X(cuMemsetD8)                                  \
  X(cuMemsetD32)                                 \
  X(cuStreamCreate)                              \
  X(cuStreamDestroy)                             \
  X(cuStreamSynchronize)                         \
  X(cuEventCreate)                               \
  X(cuEventDestroy)                              \
  X(cuEventRecord)                               \
  X(cuEventSynchronize)                          \
  X(cuEventElapsedTime)                          \
  X(cuGetErrorName)                              \
  X(cuGetErrorString)                            \
  X(cuMemAllocHost)                              \
  X(cuMemFreeHost)                               \
  X(cuMemcpyHtoDAsync)                           \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuStreamBeginCapture)                        \
  X(cuStreamEndCapture)                          \
  X(cuGraphInstantiate)                          \
  X(cuGraphLaunch)                               \
  X(cuGraphExecDestroy)                          \
  X(cuGraphDestroy)

namespace flexjit::cuda {

#define FJ_DRIVER_ENTRY_MEMBER(name) decltype(&::name) name = nullptr;
// One function pointer per driver entry point, named after it; all non-null once loaded.
struct DriverApi {
  FJ_FOR_EACH_DRIVER_ENTRY(FJ_DRIVER_ENTRY_MEMBER)
};
#undef FJ_DRIVER_ENTRY_MEMBER

// The driver table, loaded on first call (thread-safe) and kept for the life of the process.
// An Error, naming the library or the symbol, when libcuda.so.1 or an entry point is missing.
Result<const DriverApi*> driver_api();

// "CUDA_ERROR_INVALID_VALUE: invalid argument"; codes the driver does not know are printed
// as numbers.
std::string driver_error_string(const DriverApi& api, CUresult code);

// The Error for a failed driver call: "<what> failed: CUDA_ERROR_...: <description>".
Error driver_error(const DriverApi& api, std::string_view what, CUresult code);

// The symbols driver_api() looks up, in table order (the versioned names, e.g. "cuMemAlloc_v2").
std::span<const char* const> driver_symbol_names();

// The device's compute capability as one number: 90 for 9.0, 86 for 8.6.
Result<int> device_sm(const DriverApi& api, CUdevice device);

// The NVRTC architecture for a compute capability: "sm_90a" for 90 (the kernels use Hopper's
// architecture-specific features such as wgmma), "sm_<sm>" otherwise.
std::string nvrtc_arch_for(int sm);

// The calling thread's current context; when it has none, device 0's primary context (retained
// once for the process) made current on this thread. Initializes the driver (cuInit).
Result<CUcontext> current_or_primary_context();

}  // namespace flexjit::cuda
