#include "launch/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace flexjit::cuda {
namespace {

// Two levels so that the argument is macro-expanded first: the versioned name is stringified.
#define FJ_STRINGIFY(x) #x
#define FJ_SYMBOL_NAME(name) FJ_STRINGIFY(name)
#define FJ_SYMBOL_NAME_ENTRY(name) FJ_SYMBOL_NAME(name),
constexpr const char* kDriverSymbols[] = {FJ_FOR_EACH_DRIVER_ENTRY(FJ_SYMBOL_NAME_ENTRY)};
#undef FJ_SYMBOL_NAME_ENTRY

constexpr const char* kDriverLibrary = "libcuda.so.1";

Result<const DriverApi*> load_driver(DriverApi& api) {
  void* library = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    return Error{fmt::format("cannot load the CUDA driver library {} ({}); a GPU driver is "
                             "needed to load and launch kernels",
                             kDriverLibrary, reason != nullptr ? reason : "unknown reason"),
                 {}};
  }
  std::vector<std::string> missing;
#define FJ_RESOLVE_ENTRY(name)                                                           \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, FJ_SYMBOL_NAME(name))); \
  if (api.name == nullptr) missing.emplace_back(FJ_SYMBOL_NAME(name));
  FJ_FOR_EACH_DRIVER_ENTRY(FJ_RESOLVE_ENTRY)
#undef FJ_RESOLVE_ENTRY
  if (!missing.empty()) {
    // No pointer into the library survives a failed load, so it can go.
    api = DriverApi{};
    dlclose(library);
    return Error{fmt::format("the CUDA driver library {} lacks {} (driver too old?)",
                             kDriverLibrary, fmt::join(missing, ", ")),
                 {}};
  }
  // Never closed: kernels and modules may be in use until the process exits.
  return &api;
}

#undef FJ_SYMBOL_NAME
#undef FJ_STRINGIFY

}  // namespace

Result<const DriverApi*> driver_api() {
  static DriverApi api;
  static Result<const DriverApi*> loaded = Error{};
  static std::once_flag once;
  std::call_once(once, [] { loaded = load_driver(api); });
  return loaded;
}

std::span<const char* const> driver_symbol_names() {
  return kDriverSymbols;
}

std::string driver_error_string(const DriverApi& api, CUresult code) {
  const char* name = nullptr;
  if (api.cuGetErrorName(code, &name) != CUDA_SUCCESS || name == nullptr) {
    return fmt::format("unknown CUresult {}", static_cast<int>(code));
  }
  const char* description = nullptr;
  if (api.cuGetErrorString(code, &description) != CUDA_SUCCESS || description == nullptr) {
    return name;
  }
  return fmt::format("{}: {}", name, description);
}

Error driver_error(const DriverApi& api, std::string_view what, CUresult code) {
  return Error{fmt::format("{} failed: {}", what, driver_error_string(api, code)), {}};
}

Result<int> device_sm(const DriverApi& api, CUdevice device) {
  int major = 0;
  int minor = 0;
  if (CUresult code =
          api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
      code != CUDA_SUCCESS) {
    return driver_error(api, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", code);
  }
  if (CUresult code =
          api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
      code != CUDA_SUCCESS) {
    return driver_error(api, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", code);
  }
  return major * 10 + minor;
}

std::string nvrtc_arch_for(int sm) {
  return sm == 90 ? std::string("sm_90a") : fmt::format("sm_{}", sm);
}

Result<CUcontext> current_or_primary_context() {
  Result<const DriverApi*> loaded = driver_api();
  if (!loaded) return loaded.error();
  const DriverApi& api = **loaded;
  // cuInit once: this runs before every launch. A failure is retried by the next call.
  static std::atomic<bool> initialized{false};
  if (!initialized.load(std::memory_order_acquire)) {
    if (CUresult code = api.cuInit(0); code != CUDA_SUCCESS) {
      return driver_error(api, "cuInit", code);
    }
    initialized.store(true, std::memory_order_release);
  }
  CUcontext current = nullptr;
  if (CUresult code = api.cuCtxGetCurrent(&current); code != CUDA_SUCCESS) {
    return driver_error(api, "cuCtxGetCurrent", code);
  }
  if (current != nullptr) return current;

  // Retained once and never released: modules loaded into it live as long as the process.
  static std::mutex primary_mutex;
  static CUcontext primary = nullptr;
  {
    std::lock_guard lock(primary_mutex);
    if (primary == nullptr) {
      CUdevice device = 0;
      if (CUresult code = api.cuDeviceGet(&device, 0); code != CUDA_SUCCESS) {
        return driver_error(api, "cuDeviceGet(0)", code);
      }
      if (CUresult code = api.cuDevicePrimaryCtxRetain(&primary, device); code != CUDA_SUCCESS) {
        primary = nullptr;
        return driver_error(api, "cuDevicePrimaryCtxRetain", code);
      }
    }
  }
  if (CUresult code = api.cuCtxSetCurrent(primary); code != CUDA_SUCCESS) {
    return driver_error(api, "cuCtxSetCurrent", code);
  }
  return primary;
}

}  // namespace flexjit::cuda
