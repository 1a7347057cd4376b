// flexjit/internal/inspect.h over the runtime's internals: handles, the caches, NVRTC.
#include "flexjit/internal/inspect.h"

#include <algorithm>
#include <vector>

#include "jit/disk_cache.h"
#include "jit/environment.h"
#include "jit/host_code_store.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc_compiler.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"
#include "launch/plan.h"

namespace flexjit::inspect {

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
  // The PTX of the build the cache keeps (compile_spec chooses by ptxas's report). Fallbacks of
  // ptxas options alone (the mma.sync kernels' register level) all have the first build's PTX:
  // no build is needed to know it.
  std::vector<std::string> options = spec.options;
  const bool ptx_may_differ =
      std::any_of(spec.fallbacks.begin(), spec.fallbacks.end(), [](const auto& fallback) {
        return !std::all_of(fallback.begin(), fallback.end(), is_ptxas_option);
      });
  if (ptx_may_differ) {
    auto compiled = compile_spec(spec, false);
    if (!compiled) return compiled.error();
    options = std::move(compiled->options);
  }
  auto ptx =
      nvrtc_compile_ptx(spec.name + ".cu", spec.source, template_headers(), virtual_arch, options);
  if (!ptx) return ptx.error();
  return std::move(ptx->cubin);
}

Result<PtxasResources> ptxas_resources(const KernelSpec& spec) {
  auto compiled = compile_spec(spec, true);
  if (!compiled) return compiled.error();
  auto resources = parse_ptxas_resources(compiled->output.log, spec.name);
  if (resources) {
    resources->fallback_options.assign(compiled->options.begin() + spec.options.size(),
                                       compiled->options.end());
  }
  return resources;
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

std::shared_ptr<HostCodeStore> host_code_store() {
  return host_code_store_from_environment();
}

uint32_t cache_format_version() {
  return kCacheFormatVersion;
}

IsolatedCache::IsolatedCache(const std::filesystem::path& directory)
    : cache_(std::make_unique<KernelCache>(KernelCacheOptions{
          .disk = std::make_shared<DiskCache>(DiskCacheConfig{.directory = directory}),
          .dump_dir = {}})) {}

IsolatedCache::~IsolatedCache() = default;

Result<bool> IsolatedCache::get(const KernelSpec& spec) {
  auto kernel = cache_->get(spec);
  if (!kernel) return kernel.error();
  return true;
}

size_t IsolatedCache::disk_hits() const {
  return cache_->disk_hit_count();
}

Result<bool> cache_get(fj_context& context, const KernelSpec& spec) {
  auto kernel = context.cache.get(spec);
  if (!kernel) return kernel.error();
  return true;
}

bool program_has_kernel(const fj_program& program, const fj_kernel_desc& desc,
                        std::string_view arch) {
  return find_program_kernel(program, kernel_request_key(desc, arch)) != nullptr;
}

struct Planner::State {
  PlanShape shape;
  WorkPlan plan;
};

Planner::Planner(const PlannerShape& shape) : state_(std::make_unique<State>()) {
  state_->shape.max_num_reqs = shape.max_num_reqs;
  state_->shape.max_num_tokens = shape.max_num_tokens;
  state_->shape.max_query_len = shape.max_query_len;
  state_->shape.num_heads = shape.num_heads;
  state_->shape.num_kv_heads = shape.num_kv_heads;
  state_->shape.page_size = shape.page_size;
  state_->shape.decode_wave = shape.decode_wave;
}

Planner::~Planner() = default;

Result<bool> Planner::build(std::span<const int32_t> query_start_loc,
                            std::span<const int32_t> seq_lens, int64_t max_blocks_per_req) {
  return build_plan(state_->shape, query_start_loc, seq_lens, max_blocks_per_req, state_->plan);
}

int Planner::decode_items() const {
  return state_->plan.counts.decode;
}

int Planner::prefill_items() const {
  return state_->plan.counts.prefill;
}

std::filesystem::path cuda_home() {
  return environment().cuda_home;
}

bool cuda_device_usable() {
  return cuda::driver_api().ok() && cuda::current_or_primary_context().ok();
}

}  // namespace flexjit::inspect
