// flexjit/internal/inspect.h over the runtime's internals: handles, the caches, NVRTC.
#include "flexjit/internal/inspect.h"

#include <vector>

#include "jit/disk_cache.h"
#include "jit/environment.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc_compiler.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"

namespace flexjit::inspect {

namespace {

std::vector<NvrtcHeader> template_headers() {
  std::vector<NvrtcHeader> headers;
  for (const EmbeddedFile& file : embedded_templates())
    headers.push_back({file.name, file.text});
  return headers;
}

}  // namespace

CacheCounts cache_counts(const fj_context& context) {
  return {context.cache.compile_count(), context.cache.disk_hit_count()};
}

const PrefillKernelConfig& kernel_config(const fj_kernel& kernel) {
  return kernel.config;
}

std::string kernel_key(const fj_kernel& kernel) {
  return kernel.compiled ? kernel.compiled->key() : std::string();
}

std::string_view kernel_cubin(const fj_kernel& kernel) {
  return kernel.compiled ? std::string_view(kernel.compiled->cubin()) : std::string_view();
}

Result<Variant> program_variant(const fj_program& program, const VariantSelection& selection) {
  return flexjit::program_variant(program, selection);
}

std::string cache_key(const KernelSpec& spec) {
  return KernelCache::key(spec);
}

Result<std::string> compile_ptx(const KernelSpec& spec) {
  std::string virtual_arch = spec.arch;
  virtual_arch.replace(0, 3, "compute_");  // sm_90a -> compute_90a
  auto ptx = nvrtc_compile_ptx(spec.name + ".cu", spec.source, template_headers(), virtual_arch,
                               spec.options);
  if (!ptx) return ptx.error();
  return std::move(ptx->cubin);
}

Result<PtxasResources> ptxas_resources(const KernelSpec& spec) {
  std::vector<std::string> options = spec.options;
  options.emplace_back(kPtxasVerboseOption);
  auto output =
      nvrtc_compile(spec.name + ".cu", spec.source, template_headers(), spec.arch, options);
  if (!output) return output.error();
  return parse_ptxas_resources(output->log, spec.name);
}

std::optional<DiskCacheListing> list_disk_cache() {
  const auto disk = DiskCache::from_environment();
  if (!disk) return std::nullopt;
  return DiskCacheListing{disk->config().directory, disk->config().max_bytes, disk->list()};
}

std::optional<ClearedDiskCache> clear_disk_cache() {
  const auto disk = DiskCache::from_environment();
  if (!disk) return std::nullopt;
  return ClearedDiskCache{disk->config().directory, disk->clear()};
}

uint32_t cache_format_version() {
  return kCacheFormatVersion;
}

std::filesystem::path cuda_home() {
  return environment().cuda_home;
}

bool cuda_device_usable() {
  return cuda::driver_api().ok() && cuda::current_or_primary_context().ok();
}

}  // namespace flexjit::inspect
