// The kernel cache (docs/architecture.md#cache): compiled kernels in memory, backed by the disk
// cache shared between processes; compiles each distinct kernel once with NVRTC and loads its
// module lazily into every CUDA context that launches it.
#pragma once

#include <cuda.h>

#include <filesystem>

#include <atomic>
#include <cstddef>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "flexjit/compiler/result.h"
#include "flexjit/internal/inspect.h"  // KernelSpec
#include "jit/disk_cache.h"
#include "jit/nvrtc_compiler.h"

namespace flexjit {

// One compiled kernel: immutable after compilation and shared by everyone who asked for it.
class CompiledKernel {
 public:
  CompiledKernel(std::string name, std::string key, std::string cubin, std::string log);
  CompiledKernel(const CompiledKernel&) = delete;
  CompiledKernel& operator=(const CompiledKernel&) = delete;
  // Unloads the modules loaded into each context, ignoring errors (the context or the driver
  // may already be gone at exit).
  ~CompiledKernel();

  const std::string& name() const { return name_; }
  const std::string& cubin() const { return cubin_; }
  const std::string& log() const { return log_; }  // NVRTC's warnings, possibly empty
  const std::string& key() const { return key_; }  // KernelCache::key of the spec, in hex

  // The entry function in the calling thread's current CUDA context (device 0's primary
  // context when the thread has none), loading the module there on first use. When
  // dynamic_smem_bytes exceeds the 48 KiB default limit, the function's
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES is raised to it (once per size and
  // context). Thread-safe; driver failures are returned as Errors.
  Result<CUfunction> function(size_t dynamic_smem_bytes) const;

 private:
  struct LoadedModule {
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    size_t dynamic_smem_limit = 0;  // the attribute's value we set; 0 = the default
  };

  std::string name_;
  std::string key_;
  std::string cubin_;
  std::string log_;
  mutable std::mutex modules_mutex_;
  mutable std::unordered_map<CUcontext, LoadedModule> modules_;
};

using CompiledKernelPtr = std::shared_ptr<const CompiledKernel>;

struct KernelCacheOptions {
  // The disk level; null: memory only.
  std::shared_ptr<DiskCache> disk;
  // Where every compile writes its source (<name>-<key>.cu) and log (.log); empty: only a
  // failed compile writes them, to kFailedSourceDir under the system's temp directory.
  std::filesystem::path dump_dir;

  // FLEXJIT_CACHE_DIR & co., FLEXJIT_ALWAYS_COMPILE and FLEXJIT_DUMP_DIR (environment.h).
  static KernelCacheOptions from_environment();
};

// Where a failed compile's source goes when no dump directory is set (under the temp dir).
inline constexpr std::string_view kFailedSourceDir = "flexjit-failed";

// Every embedded template as a header NVRTC may include by name: what the cache compiles with.
std::vector<NvrtcHeader> template_headers();

// A spec compiled: NVRTC's output and the options it was compiled with (the spec's, plus its
// fallback options where that build was kept).
struct CompiledSpec {
  NvrtcOutput output;
  std::vector<std::string> options;
};

// Compiles `spec` with the templates. A spec with fallbacks is compiled with ptxas's report;
// while every build so far shows serialized wgmma or spills, the next fallback's options are
// added to the spec's and built too, and the best kept: wgmma not serialized first, then fewer
// spill bytes, the earlier build on a tie. ptxas's choices there cannot be told from the source
// (issue 29: which role of the wgmma kernel computes a block's kv range decides it for some
// masks and not for others). With `report` the log of the kept build holds ptxas's report.
Result<CompiledSpec> compile_spec(const KernelSpec& spec, bool report);

// Compiled kernels by key, for the life of the cache.
class KernelCache {
 public:
  // Memory only, nothing dumped: what tests and tools that must not touch disk want.
  KernelCache() = default;
  explicit KernelCache(KernelCacheOptions options) : options_(std::move(options)) {}

  // The kernel for `spec`: from memory, else from the disk cache, else compiled with every
  // embedded template available as a header (and stored on disk). Thread-safe: concurrent
  // requests for one key compile once, the others wait and get the same result. A failed
  // compile is returned to everyone waiting for it and is not cached; its Error's message
  // names the kernel and its log holds NVRTC's log, the options, and the path of the dumped
  // source.
  Result<CompiledKernelPtr> get(const KernelSpec& spec);

  // How many NVRTC compiles this cache has run.
  size_t compile_count() const { return compile_count_.load(); }
  // How many kernels this cache has loaded from disk.
  size_t disk_hit_count() const { return disk_hit_count_.load(); }

  const KernelCacheOptions& options() const { return options_; }

  // XXH3-128, in hex, over length-prefixed fields in a fixed order: a format version, the
  // embedded templates (names and bytes, sorted by name), the NVRTC version, then the spec's
  // name, source, arch and options. No environment variable changes generated code today
  // (environment.h), so none is hashed.
  static std::string key(const KernelSpec& spec);

 private:
  Result<CompiledKernelPtr> load_or_compile(const KernelSpec& spec, std::string key);
  Result<CacheEntry> compile(const KernelSpec& spec, const std::string& key);

  KernelCacheOptions options_;

  using SharedResult = std::shared_future<Result<CompiledKernelPtr>>;
  std::mutex mutex_;
  std::unordered_map<std::string, CompiledKernelPtr> compiled_;
  std::unordered_map<std::string, SharedResult> in_flight_;
  std::atomic<size_t> compile_count_ = 0;
  std::atomic<size_t> disk_hit_count_ = 0;
};

}  // namespace flexjit
