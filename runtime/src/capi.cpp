// The C API (runtime/include/flexjit/flexjit.h): argument checks, error messages, and the
// hand-over to the compiler and the kernel cache. No exception leaves this file.
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#include <fmt/format.h>

#include "cuda_driver.h"
#include "flexjit/dsl/frontend.h"
#include "handles.h"
#include "paged_prefill_args.cuh"

namespace flexjit {

namespace {

// A failed call: its status and message.
struct Failure {
  fj_status status;
  std::string message;
};

Failure fail(fj_status status, std::string message) {
  return {status, std::move(message)};
}

void set_last_error(const fj_context* context, std::string message) {
  if (context == nullptr) return;
  std::lock_guard lock(context->error_mutex);
  context->last_errors[std::this_thread::get_id()] = std::move(message);
}

// Runs `body` (which returns std::optional<Failure>: nullopt on success), records the message
// of a failure on `context`, and turns any exception into a status.
template <class Body>
fj_status guarded(const fj_context* context, Body&& body) {
  try {
    std::optional<Failure> failure = body();
    if (!failure) {
      set_last_error(context, "");
      return FJ_SUCCESS;
    }
    set_last_error(context, std::move(failure->message));
    return failure->status;
  } catch (const std::bad_alloc&) {
    set_last_error(context, "out of host memory");
    return FJ_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error(context, fmt::format("internal error: {}", e.what()));
    return FJ_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(context, "internal error: unknown exception");
    return FJ_ERROR_INTERNAL;
  }
}

std::optional<Failure> create_program(fj_context* context, dsl::Source source, fj_program** out) {
  std::vector<dsl::Diagnostic> diagnostics;
  dsl::Module module = dsl::parse_and_check(source, diagnostics);
  if (dsl::has_errors(diagnostics)) {
    return fail(FJ_ERROR_INVALID_SOURCE, dsl::format_diagnostics(source, diagnostics));
  }
  auto program = std::make_unique<fj_program>();
  program->context = context;
  program->module = std::move(module);
  for (const dsl::Decl& decl : program->module.decls) {
    if (decl.kind != dsl::DeclKind::Param) continue;
    const int slot = static_cast<int>(program->params.size());
    program->params.push_back(RuntimeParam{decl.name, decl.declared_type, slot});
  }
  if (program->params.size() > static_cast<size_t>(kMaxScalarParams)) {
    return fail(FJ_ERROR_UNSUPPORTED,
                fmt::format("{}: {} runtime parameters declared, at most {} are supported",
                            source.name, program->params.size(), kMaxScalarParams));
  }
  *out = program.release();
  return std::nullopt;
}

bool aligned_16(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0;
}

// Checks every argument the host can see without touching device memory; fills `device`.
std::optional<Failure> prepare_paged_args(const fj_kernel& kernel, const fj_paged_attention_args& a,
                                          fj::PagedPrefillArgs& device) {
  if (a.num_tokens < 0 || a.num_reqs < 0 || a.max_query_len < 0 || a.max_blocks_per_req < 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                "num_tokens, num_reqs, max_query_len and max_blocks_per_req must be >= 0");
  }
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("num_heads ({}) must be a positive multiple of num_kv_heads ({})",
                            a.num_heads, a.num_kv_heads));
  }
  if (a.max_query_len > a.num_tokens) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("max_query_len ({}) exceeds num_tokens ({})",
                                                       a.max_query_len, a.num_tokens));
  }
  if (a.num_reqs > 65535) {
    return fail(FJ_ERROR_UNSUPPORTED, fmt::format("num_reqs ({}) exceeds 65535", a.num_reqs));
  }
  if (a.num_kv_heads > 65535) {
    return fail(FJ_ERROR_UNSUPPORTED,
                fmt::format("num_kv_heads ({}) exceeds 65535", a.num_kv_heads));
  }
  if (a.block_table_stride < a.max_blocks_per_req) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("block_table_stride ({}) is smaller than max_blocks_per_req ({})",
                            a.block_table_stride, a.max_blocks_per_req));
  }
  struct NamedPointer {
    const char* name;
    const void* pointer;
  };
  const NamedPointer required[] = {
      {"q", a.q},
      {"out", a.out},
      {"k_cache", a.k_cache},
      {"v_cache", a.v_cache},
      {"query_start_loc", a.query_start_loc},
      {"seq_lens", a.seq_lens},
      {"block_table", a.block_table},
  };
  for (const NamedPointer& p : required) {
    if (p.pointer == nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is null", p.name));
    }
  }
  for (const NamedPointer& p : {required[0], required[1], required[2], required[3]}) {
    if (!aligned_16(p.pointer)) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is not 16-byte aligned", p.name));
    }
  }
  struct NamedStride {
    const char* name;
    int64_t value;
  };
  const NamedStride strides[] = {
      {"q_stride_token", a.q_stride_token},     {"q_stride_head", a.q_stride_head},
      {"out_stride_token", a.out_stride_token}, {"out_stride_head", a.out_stride_head},
      {"k_stride_block", a.k_stride_block},     {"k_stride_slot", a.k_stride_slot},
      {"k_stride_head", a.k_stride_head},       {"v_stride_block", a.v_stride_block},
      {"v_stride_slot", a.v_stride_slot},       {"v_stride_head", a.v_stride_head},
  };
  for (const NamedStride& s : strides) {
    if (s.value < 0 || s.value % 8 != 0) {
      return fail(
          FJ_ERROR_INVALID_ARGUMENT,
          fmt::format("{} ({}) must be a non-negative multiple of 8 elements", s.name, s.value));
    }
  }
  if (a.lse != nullptr && a.lse_stride_token < a.num_heads) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("lse_stride_token ({}) is smaller than num_heads ({})",
                            a.lse_stride_token, a.num_heads));
  }
  if (a.num_params != kernel.num_params) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("num_params is {} but the program declares {} runtime parameters",
                            a.num_params, kernel.num_params));
  }
  if (a.num_params > 0 && a.params == nullptr) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "params is null");
  }
  if (!std::isfinite(a.scale)) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "scale is not finite");
  }

  device = fj::PagedPrefillArgs{};
  device.q = a.q;
  device.out = a.out;
  device.k_cache = a.k_cache;
  device.v_cache = a.v_cache;
  device.query_start_loc = a.query_start_loc;
  device.seq_lens = a.seq_lens;
  device.block_table = a.block_table;
  device.lse = a.lse;
  device.q_stride_token = a.q_stride_token;
  device.q_stride_head = a.q_stride_head;
  device.out_stride_token = a.out_stride_token;
  device.out_stride_head = a.out_stride_head;
  device.k_stride_block = a.k_stride_block;
  device.k_stride_slot = a.k_stride_slot;
  device.k_stride_head = a.k_stride_head;
  device.v_stride_block = a.v_stride_block;
  device.v_stride_slot = a.v_stride_slot;
  device.v_stride_head = a.v_stride_head;
  device.block_table_stride = a.block_table_stride;
  device.lse_stride_token = a.lse_stride_token;
  device.num_reqs = a.num_reqs;
  device.num_heads = a.num_heads;
  device.num_kv_heads = a.num_kv_heads;
  device.max_blocks_per_req = a.max_blocks_per_req;
  device.scale =
      a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(kernel.config.head_dim));
  for (int i = 0; i < a.num_params; ++i)
    device.params.scalar[i] = a.params[i];
  return std::nullopt;
}

// The architecture to compile for when the caller names none: the current device's.
Result<std::string> current_device_arch() {
  auto api = cuda::driver_api();
  if (!api) return api.error();
  auto context = cuda::current_or_primary_context();
  if (!context) return context.error();
  CUdevice device;
  const CUresult status = (*api)->cuCtxGetDevice(&device);
  if (status != CUDA_SUCCESS) {
    return Error{"cuCtxGetDevice failed: " + cuda::driver_error_string(**api, status)};
  }
  auto sm = cuda::device_sm(**api, device);
  if (!sm) return sm.error();
  return cuda::nvrtc_arch_for(*sm);
}

bool valid_arch(std::string_view arch) {
  if (arch.size() < 5 || arch.substr(0, 3) != "sm_") return false;
  for (size_t i = 3; i < arch.size(); ++i) {
    const char c = arch[i];
    const bool last = i + 1 == arch.size();
    if (!(c >= '0' && c <= '9') && !(last && i > 3 && c == 'a')) return false;
  }
  return true;
}

}  // namespace

Result<MaskFunction> program_mask(const fj_program& program, std::string_view name) {
  std::lock_guard lock(program.masks_mutex);
  if (auto it = program.masks.find(name); it != program.masks.end()) return it->second;
  auto mask = lower_mask(program.module, name);
  if (!mask) return mask.error();
  program.masks.emplace(std::string(name), *mask);
  return *mask;
}

}  // namespace flexjit

using flexjit::fail;
using flexjit::Failure;
using flexjit::guarded;

extern "C" {

FJ_API const char* fj_status_string(fj_status status) {
  switch (status) {
    case FJ_SUCCESS:
      return "FJ_SUCCESS: no error";
    case FJ_ERROR_INVALID_ARGUMENT:
      return "FJ_ERROR_INVALID_ARGUMENT: an argument is null, out of range or inconsistent";
    case FJ_ERROR_INVALID_SOURCE:
      return "FJ_ERROR_INVALID_SOURCE: the mask source has errors";
    case FJ_ERROR_NOT_FOUND:
      return "FJ_ERROR_NOT_FOUND: no such mask, parameter or file";
    case FJ_ERROR_UNSUPPORTED:
      return "FJ_ERROR_UNSUPPORTED: configuration not supported";
    case FJ_ERROR_COMPILE:
      return "FJ_ERROR_COMPILE: kernel compilation failed";
    case FJ_ERROR_CUDA:
      return "FJ_ERROR_CUDA: the CUDA driver is missing or a driver call failed";
    case FJ_ERROR_INTERNAL:
      return "FJ_ERROR_INTERNAL: internal error";
  }
  return "unknown fj_status value";
}

FJ_API uint32_t fj_runtime_version(void) {
  return FJ_VERSION;
}

FJ_API fj_status fj_context_create(fj_context** out) {
  if (out == nullptr) return FJ_ERROR_INVALID_ARGUMENT;
  try {
    *out = new fj_context();
    return FJ_SUCCESS;
  } catch (...) {
    return FJ_ERROR_INTERNAL;
  }
}

FJ_API fj_status fj_context_destroy(fj_context* context) {
  delete context;
  return FJ_SUCCESS;
}

FJ_API const char* fj_context_last_error(const fj_context* context) {
  if (context == nullptr) return "context is null";
  // The message is copied to thread-local storage so the pointer survives other threads'
  // calls on the same context.
  thread_local std::string message;
  std::lock_guard lock(context->error_mutex);
  auto it = context->last_errors.find(std::this_thread::get_id());
  message = it == context->last_errors.end() ? std::string() : it->second;
  return message.c_str();
}

FJ_API fj_status fj_program_create(fj_context* context, const char* name, const char* source,
                                   size_t source_length, fj_program** out) {
  return guarded(context, [&]() -> std::optional<Failure> {
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    if (out == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "out is null");
    if (source == nullptr && source_length > 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "source is null");
    }
    flexjit::dsl::Source text{name != nullptr ? name : "<string>",
                              std::string(source != nullptr ? source : "", source_length)};
    return flexjit::create_program(context, std::move(text), out);
  });
}

FJ_API fj_status fj_program_create_from_file(fj_context* context, const char* path,
                                             fj_program** out) {
  return guarded(context, [&]() -> std::optional<Failure> {
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    if (path == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "path is null");
    if (out == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "out is null");
    std::ifstream file(path, std::ios::binary);
    if (!file) return fail(FJ_ERROR_NOT_FOUND, fmt::format("cannot open '{}'", path));
    std::ostringstream text;
    text << file.rdbuf();
    if (file.bad()) return fail(FJ_ERROR_NOT_FOUND, fmt::format("cannot read '{}'", path));
    return flexjit::create_program(context, flexjit::dsl::Source{path, text.str()}, out);
  });
}

FJ_API fj_status fj_program_destroy(fj_program* program) {
  delete program;
  return FJ_SUCCESS;
}

FJ_API fj_status fj_program_param_slot(const fj_program* program, const char* name, int32_t* slot) {
  const fj_context* context = program != nullptr ? program->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (program == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "program is null");
    if (name == nullptr || slot == nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "name or slot is null");
    }
    for (const flexjit::RuntimeParam& param : program->params) {
      if (param.name == name) {
        *slot = param.slot;
        return std::nullopt;
      }
    }
    return fail(FJ_ERROR_NOT_FOUND, fmt::format("no runtime parameter '{}'", name));
  });
}

FJ_API fj_status fj_program_param_count(const fj_program* program, int32_t* count) {
  if (program == nullptr || count == nullptr) return FJ_ERROR_INVALID_ARGUMENT;
  *count = static_cast<int32_t>(program->params.size());
  return FJ_SUCCESS;
}

FJ_API fj_status fj_kernel_create(fj_context* context, const fj_program* program,
                                  const fj_kernel_desc* desc, fj_kernel** out) {
  return guarded(context, [&]() -> std::optional<Failure> {
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    if (program == nullptr || desc == nullptr || out == nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "program, desc or out is null");
    }
    if (desc->struct_size < sizeof(fj_kernel_desc)) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("desc->struct_size is {}, expected at least {}", desc->struct_size,
                              sizeof(fj_kernel_desc)));
    }
    if (desc->mask == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "desc->mask is null");
    if (!flexjit::prefill_head_dim_supported(desc->head_dim)) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("head_dim {} is not supported (supported: 64, 128)", desc->head_dim));
    }
    if (desc->dtype != FJ_DTYPE_BF16 && desc->dtype != FJ_DTYPE_FP16) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("dtype {} is not supported (FJ_DTYPE_FP16, FJ_DTYPE_BF16)",
                              static_cast<int>(desc->dtype)));
    }
    if (!flexjit::prefill_page_size_supported(desc->page_size)) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("page_size {} is not supported (a multiple of 16, at most 1024)",
                              desc->page_size));
    }
    if (context != program->context) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "program belongs to another context");
    }
    auto mask = flexjit::program_mask(*program, desc->mask);
    if (!mask) return fail(FJ_ERROR_NOT_FOUND, mask.error().message);

    flexjit::PrefillKernelConfig config;
    config.head_dim = desc->head_dim;
    config.bf16 = desc->dtype == FJ_DTYPE_BF16;
    config.page_size = desc->page_size;
    if (desc->arch != nullptr) {
      if (!flexjit::valid_arch(desc->arch)) {
        return fail(FJ_ERROR_UNSUPPORTED,
                    fmt::format("arch '{}' is not of the form sm_NN or sm_NNa", desc->arch));
      }
      config.arch = desc->arch;
    } else {
      auto arch = flexjit::current_device_arch();
      if (!arch) return fail(FJ_ERROR_CUDA, arch.error().message);
      config.arch = *arch;
    }
    auto compiled = context->cache.get(flexjit::prefill_kernel_spec(*mask, config));
    if (!compiled) {
      const auto& error = compiled.error();
      return fail(FJ_ERROR_COMPILE, error.log.empty()
                                        ? error.message
                                        : fmt::format("{}\n{}", error.message, error.log));
    }
    auto kernel = std::make_unique<fj_kernel>();
    kernel->context = context;
    kernel->compiled = std::move(*compiled);
    kernel->config = config;
    kernel->num_params = static_cast<int>(program->params.size());
    *out = kernel.release();
    return std::nullopt;
  });
}

FJ_API fj_status fj_kernel_destroy(fj_kernel* kernel) {
  delete kernel;
  return FJ_SUCCESS;
}

FJ_API fj_status fj_kernel_name(const fj_kernel* kernel, const char** name) {
  if (kernel == nullptr || name == nullptr) return FJ_ERROR_INVALID_ARGUMENT;
  *name = kernel->compiled->name().c_str();
  return FJ_SUCCESS;
}

FJ_API fj_status fj_paged_attention(fj_kernel* kernel, const fj_paged_attention_args* args,
                                    void* stream) {
  const fj_context* context = kernel != nullptr ? kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (kernel == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "kernel is null");
    if (args == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "args is null");
    if (args->struct_size < sizeof(fj_paged_attention_args)) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("args->struct_size is {}, expected at least {}", args->struct_size,
                              sizeof(fj_paged_attention_args)));
    }
    fj::PagedPrefillArgs device_args;
    if (auto failure = flexjit::prepare_paged_args(*kernel, *args, device_args)) return failure;

    const int64_t group = args->num_heads / args->num_kv_heads;
    const int64_t packed_rows = int64_t{args->max_query_len} * group;
    const int64_t q_tiles = (packed_rows + fj::kPrefillBlockM - 1) / fj::kPrefillBlockM;
    if (q_tiles > 0x7fffffff) {
      return fail(FJ_ERROR_UNSUPPORTED, "max_query_len * group is too large for one launch");
    }
    if (q_tiles == 0 || args->num_reqs == 0) return std::nullopt;

    auto api = flexjit::cuda::driver_api();
    if (!api) return fail(FJ_ERROR_CUDA, api.error().message);
    auto cu_context = flexjit::cuda::current_or_primary_context();
    if (!cu_context) return fail(FJ_ERROR_CUDA, cu_context.error().message);
    const size_t smem = fj::paged_prefill_smem_bytes(kernel->config.head_dim);
    auto function = kernel->compiled->function(smem);
    if (!function) {
      return fail(FJ_ERROR_CUDA, fmt::format("cannot load {}: {}", kernel->compiled->name(),
                                             function.error().message));
    }
    void* params[] = {&device_args};
    const CUresult status = (*api)->cuLaunchKernel(
        *function, static_cast<unsigned>(q_tiles), static_cast<unsigned>(args->num_reqs),
        static_cast<unsigned>(args->num_kv_heads), fj::kPrefillThreads, 1, 1,
        static_cast<unsigned>(smem), static_cast<CUstream>(stream), params, nullptr);
    if (status != CUDA_SUCCESS) {
      return fail(FJ_ERROR_CUDA, fmt::format("launching {} failed: {}", kernel->compiled->name(),
                                             flexjit::cuda::driver_error_string(**api, status)));
    }
    return std::nullopt;
  });
}

}  // extern "C"
