#include "jit/kernel_cache.h"

#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string_view>
#include <utility>

#include "flexjit/compiler/cache_key.h"
#include "flexjit/internal/inspect.h"
#include "jit/environment.h"
#include "jit/log.h"
#include "jit/nvrtc_compiler.h"
#include "jit/nvrtc_library.h"
#include "launch/cuda_driver.h"

namespace flexjit {
namespace {

// Bump whenever the key's fields or their encoding change, or when the compile path changes
// in a way that makes a cubin differ for the same key (the options always passed to NVRTC,
// how headers are supplied), so that caches keyed by it never serve stale cubins.
constexpr uint64_t kKeyFormatVersion = 2;

// The CUDA launch limit on dynamic shared memory unless a function opts in to more.
constexpr size_t kDefaultDynamicSmemLimit = 48 * 1024;

// The fields every key starts with, which do not change while the process runs: hashed once.
const KeyHasher& key_prefix() {
  static const KeyHasher prefix = [] {
    KeyHasher hasher;
    hasher.add_number(kKeyFormatVersion);
    const std::span<const EmbeddedFile> templates = embedded_templates();
    hasher.add_number(templates.size());
    for (const EmbeddedFile& file : templates) {
      hasher.add_field(file.name);
      hasher.add_field(file.text);
    }
    hasher.add_field(nvrtc_identity());
    return hasher;
  }();
  return prefix;
}

// Writes <dir>/<stem>.cu and <stem>.log for a person to read; failures are logged, not
// returned: a dump never fails a compile.
void write_dump(const std::filesystem::path& dir, const std::string& stem, std::string_view source,
                std::string_view log_text) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  for (const auto& [suffix, text] : {std::pair{".cu", source}, std::pair{".log", log_text}}) {
    const std::filesystem::path path = dir / (stem + suffix);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out) log(LogLevel::Warn, "cannot write {}", path.string());
  }
}

}  // namespace

CompiledKernel::CompiledKernel(std::string name, std::string key, std::string cubin,
                               std::string log)
    : name_(std::move(name)),
      key_(std::move(key)),
      cubin_(std::move(cubin)),
      log_(std::move(log)) {}

CompiledKernel::~CompiledKernel() {
  if (modules_.empty()) return;
  Result<const cuda::DriverApi*> api = cuda::driver_api();
  if (!api) return;
  // cuModuleUnload acts on the current context, so each module's context is made current in
  // turn and the caller's is restored.
  CUcontext previous = nullptr;
  (*api)->cuCtxGetCurrent(&previous);
  for (const auto& [context, loaded] : modules_) {
    if ((*api)->cuCtxSetCurrent(context) == CUDA_SUCCESS) (*api)->cuModuleUnload(loaded.module);
  }
  (*api)->cuCtxSetCurrent(previous);
}

Result<CUfunction> CompiledKernel::function(size_t dynamic_smem_bytes) const {
  Result<CUcontext> context = cuda::current_or_primary_context();
  if (!context) return context.error();
  // The context exists, so the driver table loaded.
  const cuda::DriverApi& api = *cuda::driver_api().value();
  if (dynamic_smem_bytes > static_cast<size_t>(INT_MAX)) {
    return Error{fmt::format("{}: {} bytes of dynamic shared memory is beyond any device", name_,
                             dynamic_smem_bytes),
                 {}};
  }

  std::lock_guard lock(modules_mutex_);
  auto found = modules_.find(*context);
  if (found == modules_.end()) {
    LoadedModule loaded;
    if (CUresult code = api.cuModuleLoadData(&loaded.module, cubin_.data()); code != CUDA_SUCCESS) {
      return cuda::driver_error(api, fmt::format("loading the module of {}", name_), code);
    }
    if (CUresult code = api.cuModuleGetFunction(&loaded.function, loaded.module, name_.c_str());
        code != CUDA_SUCCESS) {
      api.cuModuleUnload(loaded.module);
      return cuda::driver_error(api, fmt::format("finding the entry function {}", name_), code);
    }
    found = modules_.emplace(*context, loaded).first;
  }
  LoadedModule& loaded = found->second;
  if (dynamic_smem_bytes > kDefaultDynamicSmemLimit &&
      dynamic_smem_bytes > loaded.dynamic_smem_limit) {
    if (CUresult code =
            api.cuFuncSetAttribute(loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   static_cast<int>(dynamic_smem_bytes));
        code != CUDA_SUCCESS) {
      return cuda::driver_error(api,
                                fmt::format("allowing {} bytes of dynamic shared memory for {}",
                                            dynamic_smem_bytes, name_),
                                code);
    }
    loaded.dynamic_smem_limit = dynamic_smem_bytes;
  }
  return loaded.function;
}

std::string KernelCache::key(const KernelSpec& spec) {
  KeyHasher hasher = key_prefix();
  hasher.add_field(spec.name);
  hasher.add_field(spec.source);
  hasher.add_field(spec.arch);
  hasher.add_number(spec.options.size());
  for (const std::string& option : spec.options)
    hasher.add_field(option);
  // A spec without fallbacks keeps the key it had before they existed.
  if (!spec.fallbacks.empty()) {
    hasher.add_number(spec.fallbacks.size());
    for (const std::vector<std::string>& fallback : spec.fallbacks) {
      hasher.add_number(fallback.size());
      for (const std::string& option : fallback)
        hasher.add_field(option);
    }
  }
  return hasher.hex();
}

Result<CompiledKernelPtr> KernelCache::get(const KernelSpec& spec) {
  std::string key = KernelCache::key(spec);
  std::promise<Result<CompiledKernelPtr>> promise;
  {
    std::unique_lock lock(mutex_);
    if (auto found = compiled_.find(key); found != compiled_.end()) return found->second;
    if (auto found = in_flight_.find(key); found != in_flight_.end()) {
      SharedResult pending = found->second;
      lock.unlock();
      return pending.get();
    }
    in_flight_.emplace(key, promise.get_future().share());
  }

  Result<CompiledKernelPtr> result = load_or_compile(spec, key);
  {
    std::lock_guard lock(mutex_);
    in_flight_.erase(key);
    if (result) compiled_.emplace(std::move(key), result.value());
  }
  promise.set_value(result);
  return result;
}

KernelCacheOptions KernelCacheOptions::from_environment() {
  return KernelCacheOptions{.disk = DiskCache::from_environment(),
                            .dump_dir = environment().dump_dir};
}

Result<CompiledKernelPtr> KernelCache::load_or_compile(const KernelSpec& spec, std::string key) {
  CacheEntry entry;
  if (options_.disk) {
    auto loaded = options_.disk->get_or_build(spec.name, key, [&] { return compile(spec, key); });
    if (!loaded) return loaded.error();
    if (loaded->origin == DiskCache::Origin::Disk) {
      disk_hit_count_.fetch_add(1);
      log(LogLevel::Debug, "loaded {} ({}) from the disk cache", spec.name, key);
    }
    entry = std::move(loaded->entry);
  } else {
    auto compiled = compile(spec, key);
    if (!compiled) return compiled.error();
    entry = std::move(*compiled);
  }
  return std::make_shared<const CompiledKernel>(spec.name, std::move(key), std::move(entry.cubin),
                                                std::move(entry.log));
}

std::vector<NvrtcHeader> template_headers() {
  std::vector<NvrtcHeader> headers;
  for (const EmbeddedFile& file : embedded_templates())
    headers.push_back({file.name, file.text});
  return headers;
}

Result<CompiledSpec> compile_spec(const KernelSpec& spec, bool report) {
  const std::vector<NvrtcHeader> headers = template_headers();
  const bool choose = !spec.fallbacks.empty();
  std::vector<std::string> options = spec.options;
  if (report || choose) options.emplace_back(kPtxasVerboseOption);
  Result<NvrtcOutput> first =
      nvrtc_compile(spec.name + ".cu", spec.source, headers, spec.arch, options);
  if (!first || !choose) {
    if (!first) return first.error();
    return CompiledSpec{std::move(*first), spec.options};
  }
  const auto first_resources = parse_ptxas_resources(first->log, spec.name);
  if (!first_resources) return CompiledSpec{std::move(*first), spec.options};
  const auto cost = [](const PtxasResources& r) {
    return std::pair{r.wgmma_serialized, r.spill_store_bytes + r.spill_load_bytes};
  };
  const std::pair<bool, int64_t> clean{false, 0};
  CompiledSpec best{std::move(*first), spec.options};
  auto best_cost = cost(*first_resources);
  // A fallback that fails to compile (or is unreported) is skipped: it is an alternative, not
  // the kernel.
  for (const std::vector<std::string>& fallback : spec.fallbacks) {
    if (best_cost == clean) break;
    std::vector<std::string> with = spec.options;
    with.insert(with.end(), fallback.begin(), fallback.end());
    options = with;
    options.emplace_back(kPtxasVerboseOption);
    Result<NvrtcOutput> built =
        nvrtc_compile(spec.name + ".cu", spec.source, headers, spec.arch, options);
    if (!built) continue;
    const auto resources = parse_ptxas_resources(built->log, spec.name);
    if (!resources || !(cost(*resources) < best_cost)) continue;
    best_cost = cost(*resources);
    best = CompiledSpec{std::move(*built), std::move(with)};
  }
  return best;
}

Result<CacheEntry> KernelCache::compile(const KernelSpec& spec, const std::string& key) {
  compile_count_.fetch_add(1);
  log(LogLevel::Debug, "compiling {} ({}) with NVRTC", spec.name, key);
  const auto start = std::chrono::steady_clock::now();
  Result<CompiledSpec> compiled = compile_spec(spec, false);
  Result<NvrtcOutput> output =
      compiled ? Result<NvrtcOutput>(std::move(compiled->output)) : compiled.error();
  log(LogLevel::Info, "compiled {} in {:.2f} s{}", spec.name,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      output ? "" : " (failed)");

  const std::string stem = fmt::format("{}-{}", spec.name, key);
  if (!options_.dump_dir.empty()) {
    const std::string& log_text = output ? output->log : output.error().log;
    write_dump(options_.dump_dir, stem, spec.source, log_text);
  }
  if (!output) {
    // The source is what a template bug is debugged from: it is written even without a dump
    // directory, and the error says where.
    const std::filesystem::path dir =
        !options_.dump_dir.empty() ? options_.dump_dir
                                   : std::filesystem::temp_directory_path() / kFailedSourceDir;
    if (options_.dump_dir.empty()) write_dump(dir, stem, spec.source, output.error().log);
    const std::filesystem::path source_path = dir / (stem + ".cu");
    log(LogLevel::Error, "{}; its source is {}", output.error().message, source_path.string());
    return Error{output.error().message,
                 fmt::format("{}\ngenerated source: {}", output.error().log, source_path.string())};
  }
  return CacheEntry{spec.name, std::move(output->cubin), std::move(output->log)};
}

}  // namespace flexjit
