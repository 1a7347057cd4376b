// Host memory owned for the duration of one check: the CPU backend's launch arguments. Standard
// C++ only, so that the harness's public headers (cpu_check.h) can hold it.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace flexjit {

// Host memory for one launch argument of the CPU backend, 64-byte aligned (the C API wants
// 16).
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const void* data, size_t bytes) : HostBuffer(bytes, 0) {
    if (bytes > 0) std::memcpy(memory_.get(), data, bytes);
  }
  HostBuffer(size_t bytes, unsigned char fill)
      : memory_(static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64))) {
    if (!memory_) throw std::bad_alloc();
    std::memset(memory_.get(), fill, bytes);
  }
  void* get() const { return memory_.get(); }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> memory_;
};

// A host buffer holding a copy of `values`.
template <class T>
HostBuffer copy_of(const std::vector<T>& values) {
  return HostBuffer(values.data(), values.size() * sizeof(T));
}

}  // namespace flexjit
