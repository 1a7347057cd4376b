// In-process inspection of the runtime, for flexjit's own tools (the CLI, the benchmarks,
// tools/dev, the check harness): a kernel's spec, name, source and options, its PTX, cubin and
// ptxas resources, the embedded templates, and the caches' statistics. C++ and internal: not
// part of the C ABI (flexjit.h), not installed, no stability promise; link
// flexjit_runtime_core, whose symbols the shared library hides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"

namespace flexjit {

class KernelCache;    // jit/kernel_cache.h
class HostCodeStore;  // flexjit/compiler/host_code.h

// Everything that determines a kernel's cubin (together with the embedded templates and the
// NVRTC version, which the cache adds).
struct KernelSpec {
  std::string name;    // readable kernel name == the extern "C" __global__ entry symbol
  std::string source;  // full CUDA source; includes templates by name (#include "fj_ops.cuh")
  std::string arch;    // NVRTC architecture, e.g. "sm_90a"
  std::vector<std::string> options;  // extra NVRTC options, in order
  // Alternatives to the first build, each the options it adds, compiled in order while
  // ptxas's report on every build so far shows serialized wgmma or spills; the best build is
  // kept (compile_spec, jit/kernel_cache.h). Empty: one build.
  std::vector<std::vector<std::string>> fallbacks;
};

// What a prefill (or encoder, or decode) kernel is instantiated for; flexjit/internal/supported.h
// lists the values each field may take.
struct PrefillKernelConfig {
  int head_dim = 128;
  bool bf16 = true;
  int page_size = 16;  // 0: contiguous K/V (the encoder kernel)
  std::string arch = "sm_90a";
  // An fp8 (e4m3) K/V cache (fj_kernel_desc::kv_dtype, since 0.8), read with the launch's
  // k_scale and v_scale; paged kernels only. False: the cache has q's dtype.
  bool kv_fp8 = false;
  // The kernel of a sharded call (context parallelism, since 0.10): its variant is
  // fj::ShardedVariant of the mask's (sharded_variant.cuh), which reads the launch's shard layout.
  // Paged kernels only.
  bool kv_sharded = false;
};

// Launch shape of a config's prefill kernel: the wgmma kernel on sm_90a for head dims 64, 128
// and 256 (fj::prefill_uses_wgmma, docs/hopper.md), the mma.sync kernel otherwise.
struct PrefillLaunchShape {
  bool wgmma = false;
  int block_m = 0;  // packed query rows per CTA (and per planned work item)
  int threads = 0;
  int smem_bytes = 0;  // dynamic shared memory
};
PrefillLaunchShape prefill_launch_shape(const PrefillKernelConfig& config);

// Name, full CUDA source (variant struct + template instantiation), arch and NVRTC options.
KernelSpec prefill_kernel_spec(const Variant& variant, const PrefillKernelConfig& config);

// The split-KV decode kernel of a paged variant (paged_decode.cuh), which planned launches
// (fj_plan) use for queries of at most fj::kDecodeMaxRows packed rows. config.page_size must
// be positive.
KernelSpec decode_kernel_spec(const Variant& variant, const PrefillKernelConfig& config);

// The mask-independent kernels: KV-cache write (one for every 16-bit dtype) and merge_states.
KernelSpec kv_cache_write_spec(const std::string& arch);
// The KV-cache write into an fp8 cache (since 0.8), from bf16 or fp16 keys and values.
KernelSpec kv_cache_write_fp8_spec(bool bf16, const std::string& arch);
KernelSpec merge_states_spec(bool bf16, const std::string& arch);
// fj_merge_states_n's CUDA kernel (merge_states.cuh, since 0.10) for one head dim (a multiple of 8,
// at most kMergeStatesNMaxHeadDim): kDecodeRows rows per CTA of kDecodeThreads threads.
inline constexpr int kMergeStatesNMaxHeadDim = 256;
KernelSpec merge_states_n_spec(bool bf16, int head_dim, const std::string& arch);

// The CUDA kernel templates (templates/*.cuh), embedded into the library at build time: NVRTC
// receives them as headers, and every kernel cache key hashes them.
struct EmbeddedFile {
  std::string_view name;  // file name without directory, e.g. "fj_ops.cuh"
  std::string_view text;  // the file's bytes
};

// Every template, sorted by name. The views point into static storage.
std::span<const EmbeddedFile> embedded_templates();

// What ptxas reports for one entry function when NVRTC runs it with --ptxas-options=-v.
struct PtxasResources {
  int registers = 0;
  int barriers = 0;
  int64_t shared_bytes = 0;    // static shared memory; dynamic shared memory is set at launch
  int64_t constant_bytes = 0;  // cmem[0]: kernel parameters and constants
  int64_t stack_frame_bytes = 0;
  int64_t spill_store_bytes = 0;
  int64_t spill_load_bytes = 0;
  // ptxas reported "wgmma.mma_async instructions are serialized" for the function (C7514,
  // C7520: each MMA waits for the previous one; docs/hopper.md says what causes it).
  bool wgmma_serialized = false;
  // Set by inspect::ptxas_resources: the options a fallback of the spec added, where the report
  // is of that build (compile_spec kept it: the first build was serialized or spilled, and that
  // one less so); empty for the first build.
  std::vector<std::string> fallback_options;
  bool fallback_build() const { return !fallback_options.empty(); }
};

// One disk cache entry as `flexjit cache ls` shows it.
// The name of every disk cache entry that holds LLVM host code (an object file,
// runtime/jit/host_code_store.h) starts with this, followed by the variant's name; the others
// are kernels.
inline constexpr std::string_view kHostCodeEntryPrefix = "host_";

struct CacheFileInfo {
  std::string name;  // from the file name (sanitised kernel name)
  std::string key;
  std::filesystem::path path;
  uint64_t bytes = 0;
  std::filesystem::file_time_type written;    // when the entry was published
  std::filesystem::file_time_type last_used;  // the last disk hit, else `written`
  uint64_t hits = 0;                          // loads from disk, by any process
};

namespace inspect {

// The kernel cache of a context: NVRTC compiles run and kernels loaded from disk so far.
struct CacheCounts {
  size_t compiles = 0;
  size_t disk_hits = 0;
};
CacheCounts cache_counts(const fj_context& context);

// What a kernel handle was built for, its cache key (hex) and its cubin. CUDA kernels only (a
// CPU kernel has no cubin: key and cubin are empty).
const PrefillKernelConfig& kernel_config(const fj_kernel& kernel);
std::string kernel_key(const fj_kernel& kernel);
std::string_view kernel_cubin(const fj_kernel& kernel);

// The lowered variant a program gives for `selection` (as fj_kernel_create lowers it).
Result<Variant> program_variant(const fj_program& program, const VariantSelection& selection);

// The kernel cache's key of `spec` (hex), as kernel_key reports it for the kernel built from it.
std::string cache_key(const KernelSpec& spec);

// `spec` compiled again outside the cache, with the embedded templates as headers: its PTX
// (for the virtual architecture of spec.arch, "sm_90a" -> "compute_90a"), or ptxas's report on
// its entry function (compiled once more with --ptxas-options=-v, which changes the log, not
// the code).
Result<std::string> compile_ptx(const KernelSpec& spec);
Result<PtxasResources> ptxas_resources(const KernelSpec& spec);

// The disk cache the environment names (FLEXJIT_CACHE_DIR & co.); nullopt when it names none.
struct DiskCacheListing {
  std::filesystem::path directory;
  uint64_t max_bytes = 0;
  std::vector<CacheFileInfo> entries;
};
std::optional<DiskCacheListing> list_disk_cache();
// Removes every entry of that cache: its directory and how many files went; nullopt: no cache.
struct ClearedDiskCache {
  std::filesystem::path directory;
  size_t removed = 0;
};
std::optional<ClearedDiskCache> clear_disk_cache();
// The version of the disk cache's entry format.
uint32_t cache_format_version();
// The disk cache's store for LLVM host code (runtime/jit/host_code_store.h), null without a
// cache directory: what the CLI installs as make_host_code's default, so that `hints` and the
// check harness load a mask's host code instead of compiling it in every process.
std::shared_ptr<HostCodeStore> host_code_store();

// A kernel cache of its own over a disk cache in `directory`, nothing dumped: what the compile
// benchmark times cold compiles and disk hits with.
class IsolatedCache {
 public:
  explicit IsolatedCache(const std::filesystem::path& directory);
  IsolatedCache(const IsolatedCache&) = delete;
  IsolatedCache& operator=(const IsolatedCache&) = delete;
  ~IsolatedCache();
  // The kernel of `spec`, compiled or loaded from disk (as KernelCache::get).
  Result<bool> get(const KernelSpec& spec);
  size_t disk_hits() const;

 private:
  std::unique_ptr<KernelCache> cache_;
};

// A context's own kernel cache asked for `spec` (a memory hit once fj_kernel_create built it).
Result<bool> cache_get(fj_context& context, const KernelSpec& spec);

// Whether fj_kernel_create on `program` has built the kernel `desc` names for `arch`: the
// per-program lookup a repeated fj_kernel_create starts with.
bool program_has_kernel(const fj_program& program, const fj_kernel_desc& desc,
                        std::string_view arch);

// The planner, fj_plan_update's host half (no device): the work lists of batches of one shape,
// built again for each batch into the same storage.
struct PlannerShape {
  int max_num_reqs = 0;
  int max_num_tokens = 0;
  int max_query_len = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int page_size = 16;
  int decode_wave = 1;  // CTAs of the decode kernel the device runs at once
};
class Planner {
 public:
  explicit Planner(const PlannerShape& shape);
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;
  ~Planner();
  // Plans one batch (build_plan's rules and errors).
  Result<bool> build(std::span<const int32_t> query_start_loc, std::span<const int32_t> seq_lens,
                     int64_t max_blocks_per_req);
  // Items of the last plan built.
  int decode_items() const;
  int prefill_items() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// $CUDA_HOME as the environment gives it (empty when unset).
std::filesystem::path cuda_home();

// A CUDA device this process can use: the driver loads and a context can be had.
bool cuda_device_usable();

}  // namespace inspect

}  // namespace flexjit
