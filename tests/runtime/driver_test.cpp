#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>

#include "launch/cuda_driver.h"

using namespace flexjit::cuda;

namespace {

// Stand-ins for the driver's error functions, so formatting is testable without a GPU.
CUresult fake_error_name(CUresult code, const char** name) {
  if (code != CUDA_ERROR_INVALID_VALUE) return CUDA_ERROR_INVALID_VALUE;
  *name = "CUDA_ERROR_INVALID_VALUE";
  return CUDA_SUCCESS;
}
CUresult fake_error_string(CUresult code, const char** text) {
  if (code != CUDA_ERROR_INVALID_VALUE) return CUDA_ERROR_INVALID_VALUE;
  *text = "invalid argument";
  return CUDA_SUCCESS;
}
CUresult fake_attribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (device != 0) return CUDA_ERROR_INVALID_VALUE;
  *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 8 : 6;
  return CUDA_SUCCESS;
}

}  // namespace

TEST_CASE("driver_api loads libcuda or says why not", "[driver]") {
  auto api = driver_api();
  if (!api) {
    CHECK_THAT(api.error().message, Catch::Contains("libcuda.so.1"));
    // The failure is remembered, not retried into a different state.
    auto again = driver_api();
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().message == api.error().message);
    return;
  }
  // A driver is present: every entry point resolved.
#define FJ_CHECK_ENTRY(name) CHECK((*api)->name != nullptr);
  FJ_FOR_EACH_DRIVER_ENTRY(FJ_CHECK_ENTRY)
#undef FJ_CHECK_ENTRY
}

TEST_CASE("driver symbols are the versioned ones cuda.h declares", "[driver]") {
  const auto names = driver_symbol_names();
  CHECK(names.size() == sizeof(DriverApi) / sizeof(void*));
  const std::set<std::string_view> unique(names.begin(), names.end());
  CHECK(unique.size() == names.size());
  for (std::string_view versioned :
       {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemsetD8_v2",
        "cuMemsetD32_v2", "cuStreamDestroy_v2", "cuEventDestroy_v2", "cuEventElapsedTime_v2",
        "cuDevicePrimaryCtxRelease_v2", "cuInit", "cuLaunchKernel", "cuModuleLoadData"}) {
    INFO(versioned);
    CHECK(unique.count(versioned) == 1);
  }
  CHECK(unique.count("cuMemAlloc") == 0);
}

TEST_CASE("current_or_primary_context fails cleanly without a driver", "[driver]") {
  if (driver_api()) return;  // a driver exists here: the GPU tests cover contexts
  auto context = current_or_primary_context();
  REQUIRE_FALSE(context.ok());
  CHECK_THAT(context.error().message, Catch::Contains("libcuda.so.1"));
}

TEST_CASE("driver errors read as name and description", "[driver]") {
  DriverApi api;
  api.cuGetErrorName = fake_error_name;
  api.cuGetErrorString = fake_error_string;
  CHECK(driver_error_string(api, CUDA_ERROR_INVALID_VALUE) ==
        "CUDA_ERROR_INVALID_VALUE: invalid argument");
  CHECK(driver_error_string(api, static_cast<CUresult>(123456)) == "unknown CUresult 123456");
  CHECK(driver_error(api, "cuMemAlloc", CUDA_ERROR_INVALID_VALUE).message ==
        "cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE: invalid argument");
}

TEST_CASE("device_sm combines major and minor", "[driver]") {
  DriverApi api;
  api.cuGetErrorName = fake_error_name;
  api.cuGetErrorString = fake_error_string;
  api.cuDeviceGetAttribute = fake_attribute;
  auto sm = device_sm(api, 0);
  REQUIRE(sm.ok());
  CHECK(*sm == 86);
  auto bad = device_sm(api, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("CUDA_ERROR_INVALID_VALUE"));
}

TEST_CASE("nvrtc_arch_for picks the architecture-specific target on Hopper", "[driver]") {
  CHECK(nvrtc_arch_for(90) == "sm_90a");
  CHECK(nvrtc_arch_for(80) == "sm_80");
  CHECK(nvrtc_arch_for(89) == "sm_89");
  CHECK(nvrtc_arch_for(100) == "sm_100");
}
