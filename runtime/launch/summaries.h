// Min/max summaries of position-indexed array parameters on the device
// (docs/architecture.md#tile-analysis): which arrays an attention launch summarises, where the
// summaries lie in its workspace, the kernel that builds them (templates/array_summary.cuh) ahead
// of the attention kernel on the same stream, and the workspace a kernel handle owns for callers
// that pass none.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fj_ops.cuh"
#include "flexjit/compiler/result.h"
#include "jit/kernel_cache.h"

namespace flexjit {

struct ProgramKernel;  // handles.h

// Each summary starts at a multiple of this many bytes into the workspace.
inline constexpr uint64_t kSummaryAlignment = 256;
// A caller's workspace must be aligned to this many bytes (pairs are stored 8 bytes at once).
inline constexpr uint64_t kWorkspaceAlignment = 16;
// The largest summary of one array, in bytes. A summary takes at most two int32 per element,
// so no array that fits in a device's memory comes near; the bound keeps the sum over
// kMaxArrayParams summaries far from overflowing.
inline constexpr uint64_t kMaxSummaryBytes = uint64_t{1} << 48;

// The summary kernel for `arch`: "array_summary_sm90a".
KernelSpec array_summary_spec(const std::string& arch);

// One array a launch summarises.
struct SummaryEntry {
  int slot = 0;
  fj::SummaryAxis axis = fj::kSummaryNone;
  bool is_float = false;
  uint64_t offset = 0;  // bytes into the workspace, a multiple of kSummaryAlignment
};

struct SummaryLayout {
  std::vector<SummaryEntry> entries;  // by slot
  uint64_t bytes = 0;                 // workspace the launch needs; 0 when nothing is summarised
};

// The summaries a launch of `kernel` builds: one for each array its variant reads that has a
// position dimension (summary_axis) and at least one element. `arrays` holds kMaxArrayParams
// entries by slot, of which only rows and cols are read (0 for an empty array). An Error when
// one summary would exceed kMaxSummaryBytes. The size only grows with rows and cols.
Result<SummaryLayout> summary_layout(const ProgramKernel& kernel, const fj::ArrayParam* arrays);

// Enqueues on `stream` the launches that write the summary of `array` (data in device memory;
// rows, cols, row_stride and summary_axis set, rows * cols > 0) to `summary`: device memory of
// fj::summary_words(rows, cols, summary_axis) int32, 8-byte aligned. `kernel` is
// array_summary_spec's for the current device. No synchronisation.
Result<bool> enqueue_array_summary(const CompiledKernel& kernel, const fj::ArrayParam& array,
                                   bool is_float, int32_t* summary, void* stream);

// The device memory a kernel handle owns for launches whose caller passes no workspace: per
// CUDA context, a buffer that only grows (at least doubling, so a slowly growing batch
// reallocates rarely). An outgrown buffer is kept until the pool is destroyed, since a launch
// still in flight may read it: nothing ever waits for the device. Launches that share the
// buffer must be ordered (one stream), or each would overwrite the other's summaries.
class WorkspacePool {
 public:
  WorkspacePool() = default;
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;
  // Frees every buffer in its context; launches that used them must have completed.
  ~WorkspacePool();

  // A buffer of at least `bytes` (> 0) in the calling thread's current context (device 0's
  // primary one when it has none). Thread-safe.
  Result<CUdeviceptr> get(uint64_t bytes);

 private:
  struct Buffers {
    CUdeviceptr current = 0;
    uint64_t bytes = 0;
    std::vector<CUdeviceptr> outgrown;
  };
  std::mutex mutex_;
  std::unordered_map<CUcontext, Buffers> buffers_;
};

}  // namespace flexjit
