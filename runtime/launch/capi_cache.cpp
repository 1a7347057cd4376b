// The C API of compiling ahead (fj_precompile) and the per-program memo of kernel requests
// that makes a repeated fj_kernel_create a lookup. No exception leaves this file.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "launch/handles.h"

namespace flexjit {

namespace {

// Unit separators keep fields apart: names are identifiers, define values literals and arch
// names sm_NN[a], none of which holds the separator (a define value that does is rejected by
// lowering, so it cannot alias another request's key).
std::string selection_key(const VariantSelection& selection) {
  std::string key = fmt::format("{}\x1f{}", selection.name, selection.score);
  for (const auto& [name, value] : selection.defines) {
    key += fmt::format("\x1f{}={}", name, value);
  }
  return key;
}

}  // namespace

VariantSelection selection_of(const fj_kernel_desc& desc) {
  VariantSelection selection;
  selection.name = desc.mask;
  selection.score = desc.score != nullptr ? desc.score : "";
  for (uint32_t i = 0; i < desc.num_defines; ++i) {
    selection.defines.emplace_back(desc.defines[i].name, desc.defines[i].value);
  }
  return selection;
}

Result<Variant> program_variant(const fj_program& program, const VariantSelection& selection) {
  const std::string key = selection_key(selection);
  std::lock_guard lock(program.variants_mutex);
  if (auto it = program.variants.find(key); it != program.variants.end()) return it->second;
  auto variant = lower_variant(program.module, selection);
  if (!variant) return variant.error();
  program.variants.emplace(key, *variant);
  return *variant;
}

std::string kernel_request_key(const fj_kernel_desc& desc, std::string_view arch) {
  // Whether the cache is fp8: any other kv_dtype fj_kernel_create accepts is q's dtype.
  const bool kv_fp8 = desc.kv_dtype == FJ_DTYPE_FP8_E4M3;
  return fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", selection_key(selection_of(desc)),
                     desc.head_dim, static_cast<int>(desc.dtype), kv_fp8 ? "kvfp8" : "",
                     desc.page_size, arch);
}

std::shared_ptr<const ProgramKernel> find_program_kernel(const fj_program& program,
                                                         const std::string& request_key) {
  std::lock_guard lock(program.kernels_mutex);
  auto found = program.kernels.find(request_key);
  return found != program.kernels.end() ? found->second : nullptr;
}

void remember_program_kernel(const fj_program& program, std::string request_key,
                             std::shared_ptr<const ProgramKernel> kernel) {
  std::lock_guard lock(program.kernels_mutex);
  program.kernels.emplace(std::move(request_key), std::move(kernel));
}

namespace {

struct DescOutcome {
  fj_status status = FJ_ERROR_INTERNAL;
  std::string message;
};

// Builds descs[i] for every i taken from `next`, as fj_kernel_create does (same checks, same
// caches), recording each outcome and reporting progress.
void precompile_worker(fj_context* context, const fj_program* program, const fj_kernel_desc* descs,
                       size_t count, const fj_precompile_options& options,
                       std::atomic<size_t>& next, std::vector<DescOutcome>& outcomes,
                       std::mutex& progress_mutex, size_t& done, bool own_thread) {
  for (size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
    fj_kernel* kernel = nullptr;
    DescOutcome& outcome = outcomes[i];
    // The caller's array steps by its struct's size: an older header's descriptions are shorter.
    const auto* desc = reinterpret_cast<const fj_kernel_desc*>(
        reinterpret_cast<const unsigned char*>(descs) + i * descs->struct_size);
    outcome.status = fj_kernel_create(context, program, desc, &kernel);
    if (outcome.status == FJ_SUCCESS) {
      fj_kernel_destroy(kernel);
    } else {
      outcome.message = fj_context_last_error(context);
    }
    if (options.progress != nullptr) {
      std::lock_guard lock(progress_mutex);
      options.progress(options.progress_user_data, ++done, count, i, outcome.status);
    }
  }
  // fj_kernel_create left this worker's last error on the context; nobody will read it.
  if (own_thread) {
    std::lock_guard lock(context->error_mutex);
    context->last_errors.erase(std::this_thread::get_id());
  }
}

fj_status precompile(fj_context* context, const fj_program* program, const fj_kernel_desc* descs,
                     size_t count, const fj_precompile_options* user_options, fj_status* statuses) {
  if (program == nullptr || (descs == nullptr && count > 0)) {
    set_last_error(context, "program or descs is null");
    return FJ_ERROR_INVALID_ARGUMENT;
  }
  if (count > 0 && descs->struct_size < kKernelDescOldestSize) {
    set_last_error(context, fmt::format("descs->struct_size is {}, expected at least {}",
                                        descs->struct_size, kKernelDescOldestSize));
    return FJ_ERROR_INVALID_ARGUMENT;
  }
  fj_precompile_options options{};
  options.struct_size = sizeof(options);
  if (user_options != nullptr) {
    // A newer library's longer struct is accepted: only the fields known here are read.
    if (user_options->struct_size < sizeof(fj_precompile_options)) {
      set_last_error(context, fmt::format("options->struct_size is {}, expected {}",
                                          user_options->struct_size, sizeof(options)));
      return FJ_ERROR_INVALID_ARGUMENT;
    }
    options = *user_options;
    options.struct_size = sizeof(options);
  }
  if (options.num_threads < 0) {
    set_last_error(context, fmt::format("options->num_threads is {}, expected >= 0 (0: one per "
                                        "hardware thread)",
                                        options.num_threads));
    return FJ_ERROR_INVALID_ARGUMENT;
  }
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::clamp<size_t>(
      options.num_threads > 0 ? static_cast<size_t>(options.num_threads) : hardware, 1,
      std::max<size_t>(count, 1));

  std::vector<DescOutcome> outcomes(count);
  std::atomic<size_t> next = 0;
  std::mutex progress_mutex;
  size_t done = 0;
  std::vector<std::thread> workers;
  {
    // Joins the workers however this scope is left (thread creation can throw).
    struct Joiner {
      std::vector<std::thread>& workers;
      ~Joiner() {
        for (std::thread& worker : workers)
          worker.join();
      }
    } joiner{workers};
    for (size_t t = 1; t < threads; ++t) {
      workers.emplace_back(precompile_worker, context, program, descs, count, std::cref(options),
                           std::ref(next), std::ref(outcomes), std::ref(progress_mutex),
                           std::ref(done), true);
    }
    precompile_worker(context, program, descs, count, options, next, outcomes, progress_mutex, done,
                      false);
  }

  if (statuses != nullptr) {
    for (size_t i = 0; i < count; ++i)
      statuses[i] = outcomes[i].status;
  }
  const auto first_failure = std::find_if(outcomes.begin(), outcomes.end(),
                                          [](const auto& o) { return o.status != FJ_SUCCESS; });
  if (first_failure == outcomes.end()) {
    set_last_error(context, "");
    return FJ_SUCCESS;
  }
  const size_t failures = std::count_if(first_failure, outcomes.end(),
                                        [](const auto& o) { return o.status != FJ_SUCCESS; });
  const size_t index = static_cast<size_t>(first_failure - outcomes.begin());
  const char* mask = descs[index].mask != nullptr ? descs[index].mask : "(null)";
  set_last_error(context, fmt::format("{} of {} kernels failed; the first, descs[{}] (mask {}): {}",
                                      failures, count, index, mask, first_failure->message));
  return first_failure->status;
}

}  // namespace
}  // namespace flexjit

extern "C" {

FJ_API fj_status fj_precompile(fj_context* context, const fj_program* program,
                               const fj_kernel_desc* descs, size_t count,
                               const fj_precompile_options* options, fj_status* statuses) {
  if (context == nullptr) return FJ_ERROR_INVALID_ARGUMENT;
  try {
    return flexjit::precompile(context, program, descs, count, options, statuses);
  } catch (const std::bad_alloc&) {
    flexjit::set_last_error(context, "out of host memory");
  } catch (const std::exception& e) {
    flexjit::set_last_error(context, fmt::format("internal error: {}", e.what()));
  } catch (...) {
    flexjit::set_last_error(context, "internal error: unknown exception");
  }
  return FJ_ERROR_INTERNAL;
}

}  // extern "C"
