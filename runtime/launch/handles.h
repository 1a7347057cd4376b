// What the C API's opaque handles hold. Internal: only the C API and in-process tools
// (the CLI, tests) see these definitions.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/ast.h"
#include "flexjit/flexjit.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_source.h"
#include "launch/summaries.h"

struct fj_context {
  // Backed by the disk cache and dump directory the environment names (environment.h).
  flexjit::KernelCache cache{flexjit::KernelCacheOptions::from_environment()};

  // Last error per calling thread, so concurrent callers do not read each other's messages.
  mutable std::mutex error_mutex;
  mutable std::unordered_map<std::thread::id, std::string> last_errors;
  // How many of last_errors' messages are non-empty (changed under error_mutex), so that a
  // success can skip clearing a message no thread has.
  mutable std::atomic<int> threads_with_errors{0};
};

namespace flexjit {

namespace cpu {
struct CpuKernel;  // cpu_attention.h
}

// A kernel handed out by a program, with what its launches check: the program's array
// parameters and which of them the variant reads. Shared by every fj_kernel of one request.
// A CUDA kernel has `compiled`; a CPU kernel (arch "cpu", docs/cpu.md) has `cpu` instead.
struct ProgramKernel {
  std::shared_ptr<const CompiledKernel> compiled;
  std::shared_ptr<const cpu::CpuKernel> cpu;
  std::vector<RuntimeParam> arrays;
  std::vector<bool> reads_array;  // by array slot
  // The lowered variant, for the kernels a plan adds (the split-KV decode kernel).
  std::shared_ptr<const Variant> variant;
};

}  // namespace flexjit

struct fj_program {
  fj_context* context = nullptr;
  flexjit::dsl::Module module;
  std::vector<flexjit::RuntimeParam> scalars;  // scalar params in slot order
  std::vector<flexjit::RuntimeParam> arrays;   // array params in slot order

  // Variants lowered so far, by selection_key (lowering is cheap but kernels are requested
  // repeatedly).
  mutable std::mutex variants_mutex;
  mutable std::map<std::string, flexjit::Variant, std::less<>> variants;

  // Kernels handed out so far, by request (kernel_request_key): a repeated fj_kernel_create
  // costs one lookup instead of generating and hashing the source again. Held by the program,
  // so a request can only ever match a kernel built from this program's source.
  mutable std::mutex kernels_mutex;
  mutable std::unordered_map<std::string, std::shared_ptr<const flexjit::ProgramKernel>> kernels;
};

struct fj_kernel {
  fj_context* context = nullptr;
  std::shared_ptr<const flexjit::CompiledKernel> compiled;
  flexjit::PrefillKernelConfig config;
  flexjit::PrefillLaunchShape launch_shape;  // prefill_launch_shape(config), for every launch
  int num_params = 0;
  std::shared_ptr<const flexjit::ProgramKernel> entry;  // arrays and reads_array for launches
  // Summaries of launches that pass no workspace (per CUDA context; freed with the kernel).
  flexjit::WorkspacePool workspace;
  // The array-summary kernel for this kernel's architecture, fetched on the first launch that
  // summarises and kept, so later launches skip the cache lookup (and its source hash).
  std::mutex summary_mutex;
  std::shared_ptr<const flexjit::CompiledKernel> summary_kernel;
  // The prefill kernel of sharded calls (config.kv_sharded: context parallelism), compiled on
  // the first such call and kept.
  std::mutex sharded_mutex;
  std::shared_ptr<const flexjit::CompiledKernel> sharded_compiled;
};

namespace flexjit {

// Records `message` as the calling thread's last error on `context` (null: nothing).
void set_last_error(const fj_context* context, std::string message);

// The selection a validated fj_kernel_desc names (mask or variant, score, defines).
// fj_kernel_desc before kv_dtype (FJ_VERSION 0.8): the shortest struct_size accepted.
inline constexpr size_t kKernelDescOldestSize = offsetof(fj_kernel_desc, kv_dtype);

VariantSelection selection_of(const fj_kernel_desc& desc);

// The lowered variant of a program (cached on the program).
Result<Variant> program_variant(const fj_program& program, const VariantSelection& selection);

// The key of a kernel request on one program: everything in a validated fj_kernel_desc that
// selects the kernel, with the architecture resolved (the device's when desc->arch is null).
std::string kernel_request_key(const fj_kernel_desc& desc, std::string_view arch);

// The kernel a previous request with this key got (remember_program_kernel), or null.
std::shared_ptr<const ProgramKernel> find_program_kernel(const fj_program& program,
                                                         const std::string& request_key);
void remember_program_kernel(const fj_program& program, std::string request_key,
                             std::shared_ptr<const ProgramKernel> kernel);

}  // namespace flexjit
