// What the C API's translation units share (capi.cpp, capi_plan.cpp): failures and the
// exception barrier, argument-struct reading, the argument checks and the launch helpers.
// Internal: nothing here is exported from the shared library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "flexjit/flexjit.h"
#include "jit/kernel_cache.h"
#include "kernel_args.cuh"
#include "launch/summaries.h"

struct fj_context;
struct fj_kernel;

namespace flexjit {

void set_last_error(const fj_context* context, std::string message);

// A failed call: its status and message.
struct Failure {
  fj_status status;
  std::string message;
};

inline Failure fail(fj_status status, std::string message) {
  return {status, std::move(message)};
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

// The value a caller stored in a C enum field (fj_dtype, fj_device): C lets any int through, and
// loading a value outside the enum's range as the C++ enum type is undefined behaviour, so the
// field is read as its int32 representation and checked before it is used as the enum.
template <class Enum>
int32_t enum_bits(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int32_t));
  int32_t value;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

struct NamedPointer {
  const char* name;
  const void* pointer;
};

struct NamedValue {
  const char* name;
  int64_t value;
};

// An argument struct must be present and at least as large as this library's version of it.
template <class Args>
std::optional<Failure> check_args_struct(const char* name, const Args* args) {
  if (args == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is null", name));
  if (args->struct_size < sizeof(Args)) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("{}->struct_size is {}, expected at least {}", name, args->struct_size,
                            sizeof(Args)));
  }
  return std::nullopt;
}

// An argument struct that grew: a caller built against an older header passes a shorter one
// (at least `oldest` bytes, the first version's size), whose missing fields read as zero.
template <class Args>
std::optional<Failure> read_args_struct(const char* name, const Args* args, size_t oldest,
                                        Args& out) {
  if (args == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is null", name));
  if (args->struct_size < oldest) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("{}->struct_size is {}, expected at least {}", name, args->struct_size,
                            oldest));
  }
  out = Args{};
  std::memcpy(&out, args, std::min<size_t>(args->struct_size, sizeof(Args)));
  return std::nullopt;
}

// The sizes of fj_paged_attention_args and fj_varlen_attention_args before the workspace
// fields (FJ_VERSION 0.2).
constexpr size_t kPagedArgsOldestSize = offsetof(fj_paged_attention_args, workspace);
constexpr size_t kVarlenArgsOldestSize = offsetof(fj_varlen_attention_args, workspace);

std::optional<Failure> require_non_null(std::initializer_list<NamedPointer> pointers);
std::optional<Failure> require_non_negative(std::initializer_list<NamedValue> values);

// Checks the arguments of a paged call and fills the kernel's argument struct (work list
// fields null) and, for a sharded call (0.9's kv_shard_* and global_seq_lens), `shard`
// (nullopt otherwise) and the struct's copy of it, which the sharded kernels read.
std::optional<Failure> prepare_paged_args(const fj_kernel& kernel, const fj_paged_attention_args& a,
                                          fj::PagedPrefillArgs& device,
                                          std::optional<fj::KvShard>& shard);

// Loads `kernel` in the current CUDA context and enqueues it with `args` as its only parameter.
std::optional<Failure> launch(const CompiledKernel& kernel, unsigned grid_x, unsigned grid_y,
                              unsigned grid_z, unsigned threads, size_t smem, void* stream,
                              void* args);

// A compile error as the C API reports it (FJ_ERROR_COMPILE with NVRTC's log).
Failure compile_failure(const Error& error);

// The config of `kernel`'s kernels for sharded calls (kv_sharded), and its prefill kernel for
// them, compiled on the first sharded call and kept on the handle.
PrefillKernelConfig sharded_config(const fj_kernel& kernel);
std::optional<Failure> sharded_kernel_of(fj_kernel& kernel, CompiledKernelPtr& sharded);

// The summaries a launch builds for the arrays the kernel reads (`layout`), with the caller's
// workspace checked against them; then their enqueueing into it (or into the kernel's own
// buffer when null), pointing `params`' arrays at them (nothing when there are none).
std::optional<Failure> launch_summaries(const fj_kernel& kernel, const fj::MaskParams& params,
                                        const void* workspace, uint64_t workspace_bytes,
                                        SummaryLayout& layout);
std::optional<Failure> enqueue_summaries(fj_kernel& kernel, const SummaryLayout& layout,
                                         void* workspace, fj::MaskParams& params, void* stream);

}  // namespace flexjit
