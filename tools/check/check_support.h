// Host helpers of the kernel checks (paged_check, ops_check, cpu_check, shard_check): 16-bit float
// conversions (the runtime's, cpu/float16.h), NaN bits, and device buffers owned for the duration
// of one check (host ones: host_buffer.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "check/host_buffer.h"
#include "cpu/float16.h"
#include "flexjit/flexjit.h"
#include "launch/cuda_driver.h"

namespace flexjit {

// A quiet NaN of the dtype: what unowned cache slots hold, so reading one shows in the output.
uint16_t nan_bits(fj_dtype dtype);

// Device memory owned for the duration of one check.
class DeviceBuffer {
 public:
  DeviceBuffer(const cuda::DriverApi& api) : api_(api) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (pointer_ != 0) api_.cuMemFree(pointer_);
  }

  Result<bool> upload(const void* data, size_t bytes) {
    if (auto status = allocate(bytes); !status) return status;
    const CUresult status = api_.cuMemcpyHtoD(pointer_, data, bytes);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuMemcpyHtoD", status);
    return true;
  }

  // Copies `bytes` into the start of the current allocation (which must hold them), keeping
  // the address: what a captured CUDA graph needs of its buffers.
  Result<bool> write(const void* data, size_t bytes) {
    if (bytes == 0) return true;
    const CUresult status = api_.cuMemcpyHtoD(pointer_, data, bytes);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuMemcpyHtoD", status);
    return true;
  }

  // Fills every byte with `value` (poison for outputs).
  Result<bool> fill(size_t bytes, unsigned char value) {
    if (auto status = allocate(bytes); !status) return status;
    const CUresult status = api_.cuMemsetD8(pointer_, value, bytes);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuMemsetD8", status);
    return true;
  }

  Result<bool> download(void* data, size_t bytes) const {
    const CUresult status = api_.cuMemcpyDtoH(data, pointer_, bytes);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuMemcpyDtoH", status);
    return true;
  }

  void* get() const { return reinterpret_cast<void*>(pointer_); }

 private:
  // Each upload or fill sizes the buffer anew; the previous allocation is released.
  Result<bool> allocate(size_t bytes) {
    if (pointer_ != 0) {
      api_.cuMemFree(pointer_);
      pointer_ = 0;
    }
    const CUresult status = api_.cuMemAlloc(&pointer_, std::max<size_t>(bytes, 16));
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuMemAlloc", status);
    return true;
  }

  const cuda::DriverApi& api_;
  CUdeviceptr pointer_ = 0;
};

// Uploads `values` into `buffer` and returns their device address, or null when there are none:
// how the checks pass the C API's optional arrays (sinks).
template <class T>
Result<const T*> upload_optional(DeviceBuffer& buffer, const std::vector<T>& values) {
  if (values.empty()) return static_cast<const T*>(nullptr);
  if (auto status = buffer.upload(values.data(), values.size() * sizeof(T)); !status) {
    return status.error();
  }
  return static_cast<const T*>(buffer.get());
}

// The plan shape that holds exactly the batch of `paged`.
inline fj_plan_shape plan_shape_of(const fj_paged_attention_args& paged) {
  fj_plan_shape shape{};
  shape.struct_size = sizeof(shape);
  shape.max_num_reqs = paged.num_reqs;
  shape.max_num_tokens = paged.num_tokens;
  shape.max_query_len = paged.max_query_len;
  shape.num_heads = paged.num_heads;
  shape.num_kv_heads = paged.num_kv_heads;
  return shape;
}

struct PlanDeleter {
  void operator()(fj_plan* plan) const { fj_plan_destroy(plan); }
};
using PlanPtr = std::unique_ptr<fj_plan, PlanDeleter>;

}  // namespace flexjit
