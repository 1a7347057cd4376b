// The C API (runtime/include/flexjit/flexjit.h): argument checks, error messages, and the
// hand-over to the compiler and the kernel cache. No exception leaves this file.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <new>
#include <tuple>

#include <fmt/format.h>

#include "cpu/cpu_launch.h"
#include "flexjit/dsl/frontend.h"
#include "flexjit/internal/supported.h"
#include "kernel_args.cuh"
#include "launch/capi_internal.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"
#include "launch/summaries.h"

namespace flexjit {

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
    std::vector<RuntimeParam>& list = decl.is_array() ? program->arrays : program->scalars;
    RuntimeParam param{decl.name, decl.declared_type, static_cast<int>(list.size()), {}};
    for (const dsl::ArrayDim& dim : decl.dims)
      param.dims.push_back(dim.name);
    list.push_back(std::move(param));
  }
  if (program->scalars.size() > static_cast<size_t>(kMaxScalarParams) ||
      program->arrays.size() > static_cast<size_t>(kMaxArrayParams)) {
    return fail(FJ_ERROR_UNSUPPORTED,
                fmt::format("{}: {} scalar and {} array runtime parameters declared, at most {} "
                            "and {} are supported",
                            source.name, program->scalars.size(), program->arrays.size(),
                            kMaxScalarParams, kMaxArrayParams));
  }
  *out = program.release();
  return std::nullopt;
}

std::optional<Failure> require_non_null(std::initializer_list<NamedPointer> pointers) {
  for (const NamedPointer& p : pointers) {
    if (p.pointer == nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is null", p.name));
    }
  }
  return std::nullopt;
}

// Rows are moved in 16-byte pieces.
std::optional<Failure> require_aligned_16(std::initializer_list<NamedPointer> pointers) {
  for (const NamedPointer& p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p.pointer) % 16 != 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is not 16-byte aligned", p.name));
    }
  }
  return std::nullopt;
}

std::optional<Failure> require_non_negative(std::initializer_list<NamedValue> values) {
  for (const NamedValue& v : values) {
    if (v.value < 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} ({}) is negative", v.name, v.value));
    }
  }
  return std::nullopt;
}

// Strides of rows: non-negative multiples of `multiple` elements (8 of 16 bits, 16 of an fp8
// cache) keep every row 16-byte aligned.
std::optional<Failure> require_row_strides(std::initializer_list<NamedValue> strides,
                                           int64_t multiple = 8) {
  for (const NamedValue& s : strides) {
    if (s.value < 0 || s.value % multiple != 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("{} ({}) must be a non-negative multiple of {} elements", s.name,
                              s.value, multiple));
    }
  }
  return std::nullopt;
}

// fj_device of a context-level call (fj_kv_cache_write, fj_merge_states).
std::optional<Failure> check_device(const fj_device& device) {
  const int32_t value = enum_bits(device);
  if (value != FJ_DEVICE_CUDA && value != FJ_DEVICE_CPU) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("device ({}) is neither FJ_DEVICE_CUDA nor FJ_DEVICE_CPU", value));
  }
  return std::nullopt;
}

// fj_dtype of a kernel description or a merge.
std::optional<Failure> check_dtype(const fj_dtype& dtype) {
  const int32_t value = enum_bits(dtype);
  if (!supported::dtype(value)) {
    return fail(FJ_ERROR_UNSUPPORTED,
                fmt::format("dtype {} is not supported (FJ_DTYPE_FP16, FJ_DTYPE_BF16)", value));
  }
  return std::nullopt;
}

std::optional<Failure> check_heads(int32_t num_heads, int32_t num_kv_heads) {
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("num_heads ({}) must be a positive multiple of num_kv_heads ({})",
                            num_heads, num_kv_heads));
  }
  if (num_kv_heads > 65535) {
    return fail(FJ_ERROR_UNSUPPORTED, fmt::format("num_kv_heads ({}) exceeds 65535", num_kv_heads));
  }
  return std::nullopt;
}

// The array descriptors must match the program's declarations in number (or be absent when
// the kernel's variant reads no array).
std::optional<Failure> check_array_count(const fj_kernel& kernel, const fj_array* arrays,
                                         int32_t num_arrays) {
  const std::vector<RuntimeParam>& declared = kernel.entry->arrays;
  const std::vector<bool>& reads = kernel.entry->reads_array;
  const bool reads_any = std::find(reads.begin(), reads.end(), true) != reads.end();
  if (num_arrays == 0 && !reads_any) return std::nullopt;
  if (num_arrays != static_cast<int32_t>(declared.size())) {
    return fail(
        FJ_ERROR_INVALID_ARGUMENT,
        fmt::format("num_arrays is {} but the program declares {} array parameters{}", num_arrays,
                    declared.size(), reads_any ? " (and the kernel reads some)" : " (or pass 0)"));
  }
  if (arrays == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "arrays is null");
  return std::nullopt;
}

Failure bad_array(int slot, const RuntimeParam& param, std::string what) {
  return fail(FJ_ERROR_INVALID_ARGUMENT,
              fmt::format("arrays[{}] (`{}`): {}", slot, param.name, std::move(what)));
}

// The shape of a read array: what sizing its summary needs.
std::optional<Failure> check_array_shape(int slot, const fj_array& a, const RuntimeParam& param) {
  if (a.rows < 0 || a.cols < 0) {
    return bad_array(slot, param, fmt::format("negative shape {}x{}", a.rows, a.cols));
  }
  if (param.dims.size() == 1 && a.cols > 1) {
    return bad_array(slot, param, fmt::format("a 1-D array has cols 1 (or 0), got {}", a.cols));
  }
  return std::nullopt;
}

// What the kernel sees of a descriptor: an empty array has no data and no shape.
fj::ArrayParam array_param(const fj_array& a, int slot, int32_t* bad_index) {
  const bool empty = a.rows == 0 || a.cols == 0;
  fj::ArrayParam param;
  param.data = empty ? nullptr : a.data;
  param.rows = empty ? 0 : a.rows;
  param.cols = empty ? 0 : a.cols;
  param.row_stride = a.row_stride;
  param.slot = slot;
  param.bad_index = bad_index;
  return param;
}

// What every attention launch shares: runtime parameters, the softmax scale, the LSE stride.
// Checks the array parameters' descriptors against what the program declares: a dimension
// named `b` must cover every request and one named `h` every query head, so that a correct
// index never reads the "out of range" 0.
std::optional<Failure> prepare_arrays(const fj_kernel& kernel, const fj_array* arrays,
                                      int32_t num_arrays, int32_t* bad_index, int32_t num_reqs,
                                      int32_t num_heads, fj::MaskParams& params) {
  if (reinterpret_cast<std::uintptr_t>(bad_index) % 4 != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "bad_index is not 4-byte aligned");
  }
  // Arrays the variant does not read stay empty: it never reads them.
  for (int i = 0; i < kMaxArrayParams; ++i) {
    params.array[i] = fj::ArrayParam{};
    params.array[i].slot = i;
    params.array[i].bad_index = bad_index;
  }
  if (auto f = check_array_count(kernel, arrays, num_arrays)) return f;
  const std::vector<RuntimeParam>& declared = kernel.entry->arrays;
  const std::vector<bool>& reads = kernel.entry->reads_array;
  for (int i = 0; i < num_arrays; ++i) {
    const fj_array& a = arrays[i];
    const RuntimeParam& param = declared[i];
    if (!reads[i]) continue;  // not read: left empty in the parameter block
    if (auto f = check_array_shape(i, a, param)) return f;
    if (a.row_stride < a.cols) {
      return bad_array(
          i, param, fmt::format("row_stride ({}) is smaller than cols ({})", a.row_stride, a.cols));
    }
    const bool empty = a.rows == 0 || a.cols == 0;
    if (!empty && a.data == nullptr) return bad_array(i, param, "data is null");
    if (reinterpret_cast<std::uintptr_t>(a.data) % 4 != 0) {
      return bad_array(i, param, "data is not 4-byte aligned");
    }
    const int32_t extents[2] = {a.rows, a.cols};
    for (size_t d = 0; d < param.dims.size(); ++d) {
      const int32_t need = param.dims[d] == "b" ? num_reqs : param.dims[d] == "h" ? num_heads : 0;
      if (extents[d] < need) {
        return bad_array(i, param,
                         fmt::format("dimension {} (`{}`) has {} entries, fewer than the {} the "
                                     "call needs",
                                     d, param.dims[d], extents[d], need));
      }
    }
    params.array[i] = array_param(a, i, bad_index);
  }
  return std::nullopt;
}

// The sinks array of 0.7 (flexjit.h): null, or float32 elements.
std::optional<Failure> check_sinks(const float* sinks) {
  if (reinterpret_cast<std::uintptr_t>(sinks) % alignof(float) != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "sinks is not 4-byte aligned");
  }
  return std::nullopt;
}

// The fp8 cache's scales of 0.8 (flexjit.h): both given, 4-byte aligned, with a non-negative
// stride whose last kv head's index fits, for an fp8 cache; both null otherwise.
std::optional<Failure> check_kv_scales(bool kv_fp8, const float* k_scale, const float* v_scale,
                                       int32_t kv_scale_stride, int32_t num_kv_heads) {
  if (!kv_fp8) {
    if (k_scale != nullptr || v_scale != nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  "k_scale/v_scale given for a 16-bit K/V cache (they belong to kv_dtype "
                  "FJ_DTYPE_FP8_E4M3)");
    }
    return std::nullopt;
  }
  if (auto f = require_non_null({{"k_scale", k_scale}, {"v_scale", v_scale}})) return f;
  if (reinterpret_cast<std::uintptr_t>(k_scale) % alignof(float) != 0 ||
      reinterpret_cast<std::uintptr_t>(v_scale) % alignof(float) != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "k_scale or v_scale is not 4-byte aligned");
  }
  if (kv_scale_stride < 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("kv_scale_stride ({}) is negative", kv_scale_stride));
  }
  if (int64_t{kv_scale_stride} * std::max(num_kv_heads - 1, 0) > 0x7fffffff) {
    return fail(
        FJ_ERROR_UNSUPPORTED,
        fmt::format("kv_scale_stride ({}) times num_kv_heads overflows 32 bits", kv_scale_stride));
  }
  return std::nullopt;
}

std::optional<Failure> prepare_attention_common(const fj_kernel& kernel, const int32_t* params,
                                                int32_t num_params, const fj_array* arrays,
                                                int32_t num_arrays, int32_t* bad_index,
                                                int32_t num_reqs, float scale, const float* lse,
                                                int64_t lse_stride_token, int32_t num_heads,
                                                fj::PagedPrefillArgs& device) {
  if (num_params != kernel.num_params) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("num_params is {} but the program declares {} runtime parameters",
                            num_params, kernel.num_params));
  }
  if (num_params > 0 && params == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "params is null");
  if (!std::isfinite(scale)) return fail(FJ_ERROR_INVALID_ARGUMENT, "scale is not finite");
  if (lse != nullptr && lse_stride_token < num_heads) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("lse_stride_token ({}) is smaller than num_heads ({})",
                            lse_stride_token, num_heads));
  }
  device.scale =
      scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(kernel.config.head_dim));
  for (int i = 0; i < num_params; ++i)
    device.params.scalar[i] = params[i];
  return prepare_arrays(kernel, arrays, num_arrays, bad_index, num_reqs, num_heads, device.params);
}

// The shard layout of a context-parallel call (0.9, flexjit.h): nullopt when the call holds every
// key of its requests.
std::optional<Failure> prepare_shard(const fj_paged_attention_args& a,
                                     std::optional<fj::KvShard>& shard) {
  shard.reset();
  if (auto f = require_non_negative(
          {{"kv_shard_count", a.kv_shard_count}, {"kv_shard_interleave", a.kv_shard_interleave}})) {
    return f;
  }
  const int32_t count = std::max(a.kv_shard_count, 1);
  const int32_t interleave = std::max(a.kv_shard_interleave, 1);
  if (a.kv_shard_rank < 0 || a.kv_shard_rank >= count) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("kv_shard_rank ({}) is outside [0, kv_shard_count = {})",
                            a.kv_shard_rank, count));
  }
  if (count == 1 && a.kv_shard_offsets == nullptr && a.global_seq_lens == nullptr) {
    return std::nullopt;
  }
  if (a.global_seq_lens == nullptr) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                "global_seq_lens is null: a sharded call (kv_shard_count > 1 or kv_shard_offsets) "
                "places its queries by each request's length over all shards");
  }
  for (const auto& [name, pointer] : {std::pair{"kv_shard_offsets", a.kv_shard_offsets},
                                      std::pair{"global_seq_lens", a.global_seq_lens}}) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % alignof(int32_t) != 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is not 4-byte aligned", name));
    }
  }
  if (int64_t{count} * interleave > 0x7fffffff) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("kv_shard_count ({}) times kv_shard_interleave ({}) exceeds 2^31 - 1",
                            count, interleave));
  }
  if (a.sinks != nullptr) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                "sinks are given to a sharded call, whose shards would each count them: pass them "
                "to fj_merge_states_n instead");
  }
  shard = fj::KvShard{a.kv_shard_offsets, a.global_seq_lens, a.kv_shard_rank, count, interleave};
  return std::nullopt;
}

// Checks every argument the host can see without touching device memory; fills `device`.
std::optional<Failure> prepare_paged_args(const fj_kernel& kernel, const fj_paged_attention_args& a,
                                          fj::PagedPrefillArgs& device,
                                          std::optional<fj::KvShard>& shard) {
  if (kernel.config.page_size == 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                "kernel was created with page_size 0 (contiguous K/V): use fj_varlen_attention");
  }
  if (auto f = check_sinks(a.sinks)) return f;
  if (auto f = require_non_negative({{"num_tokens", a.num_tokens},
                                     {"num_reqs", a.num_reqs},
                                     {"max_query_len", a.max_query_len},
                                     {"max_blocks_per_req", a.max_blocks_per_req},
                                     {"num_blocks", a.num_blocks}})) {
    return f;
  }
  if (auto f = check_heads(a.num_heads, a.num_kv_heads)) return f;
  if (a.max_query_len > a.num_tokens) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("max_query_len ({}) exceeds num_tokens ({})",
                                                       a.max_query_len, a.num_tokens));
  }
  if (a.num_reqs > 65535) {
    return fail(FJ_ERROR_UNSUPPORTED, fmt::format("num_reqs ({}) exceeds 65535", a.num_reqs));
  }
  if (a.block_table_stride < a.max_blocks_per_req) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("block_table_stride ({}) is smaller than max_blocks_per_req ({})",
                            a.block_table_stride, a.max_blocks_per_req));
  }
  if (auto f = require_non_null({{"q", a.q},
                                 {"out", a.out},
                                 {"k_cache", a.k_cache},
                                 {"v_cache", a.v_cache},
                                 {"query_start_loc", a.query_start_loc},
                                 {"seq_lens", a.seq_lens},
                                 {"block_table", a.block_table}})) {
    return f;
  }
  if (auto f = require_aligned_16(
          {{"q", a.q}, {"out", a.out}, {"k_cache", a.k_cache}, {"v_cache", a.v_cache}})) {
    return f;
  }
  if (auto f = require_row_strides({{"q_stride_token", a.q_stride_token},
                                    {"q_stride_head", a.q_stride_head},
                                    {"out_stride_token", a.out_stride_token},
                                    {"out_stride_head", a.out_stride_head}})) {
    return f;
  }
  // Cache rows move in 16-byte pieces: 8 elements of 16 bits, 16 of an fp8 cache.
  if (auto f = require_row_strides({{"k_stride_block", a.k_stride_block},
                                    {"k_stride_slot", a.k_stride_slot},
                                    {"k_stride_head", a.k_stride_head},
                                    {"v_stride_block", a.v_stride_block},
                                    {"v_stride_slot", a.v_stride_slot},
                                    {"v_stride_head", a.v_stride_head}},
                                   kernel.config.kv_fp8 ? 16 : 8)) {
    return f;
  }
  if (auto f = check_kv_scales(kernel.config.kv_fp8, a.k_scale, a.v_scale, a.kv_scale_stride,
                               a.num_kv_heads)) {
    return f;
  }
  if (auto f = prepare_shard(a, shard)) return f;
  device = fj::PagedPrefillArgs{};
  if (auto f = prepare_attention_common(kernel, a.params, a.num_params, a.arrays, a.num_arrays,
                                        a.bad_index, a.num_reqs, a.scale, a.lse, a.lse_stride_token,
                                        a.num_heads, device)) {
    return f;
  }
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
  device.sinks = a.sinks;
  device.k_scale = a.k_scale;
  device.v_scale = a.v_scale;
  device.kv_scale_stride = a.kv_scale_stride;
  if (shard) device.shard = *shard;
  // Block ids are int32: a cache of more than 2^31 blocks holds every non-negative one.
  device.num_blocks = static_cast<uint32_t>(std::min<int64_t>(a.num_blocks, int64_t{1} << 31));
  return std::nullopt;
}

// The encoder call maps onto the same kernel arguments: sequences are requests, K/V rows are
// addressed by *_stride_slot from the sequence's first row, and the fields of 0.6 go where paged
// calls keep theirs (kernel_args.cuh): cu_seqlens_k in key_start_loc, the K/V batch strides in
// *_stride_block.
std::optional<Failure> prepare_varlen_args(const fj_kernel& kernel,
                                           const fj_varlen_attention_args& a,
                                           fj::PagedPrefillArgs& device) {
  if (kernel.config.page_size != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                "kernel was created for a paged cache: use fj_paged_attention, or create it with "
                "page_size 0");
  }
  if (auto f = check_sinks(a.sinks)) return f;
  if (auto f = require_non_negative({{"num_tokens", a.num_tokens},
                                     {"num_seqs", a.num_seqs},
                                     {"max_seq_len", a.max_seq_len},
                                     {"num_tokens_k", a.num_tokens_k}})) {
    return f;
  }
  if (auto f = check_heads(a.num_heads, a.num_kv_heads)) return f;
  if (a.max_seq_len > a.num_tokens) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("max_seq_len ({}) exceeds num_tokens ({})",
                                                       a.max_seq_len, a.num_tokens));
  }
  if (a.num_seqs > 65535) {
    return fail(FJ_ERROR_UNSUPPORTED, fmt::format("num_seqs ({}) exceeds 65535", a.num_seqs));
  }
  if (auto f = require_non_null(
          {{"q", a.q}, {"k", a.k}, {"v", a.v}, {"out", a.out}, {"cu_seqlens", a.cu_seqlens}})) {
    return f;
  }
  if (auto f = require_aligned_16({{"q", a.q}, {"k", a.k}, {"v", a.v}, {"out", a.out}})) return f;
  if (auto f = require_row_strides({{"q_stride_token", a.q_stride_token},
                                    {"q_stride_head", a.q_stride_head},
                                    {"k_stride_token", a.k_stride_token},
                                    {"k_stride_head", a.k_stride_head},
                                    {"v_stride_token", a.v_stride_token},
                                    {"v_stride_head", a.v_stride_head},
                                    {"out_stride_token", a.out_stride_token},
                                    {"out_stride_head", a.out_stride_head}})) {
    return f;
  }
  // Batch strides may be negative (they are added to the packed row's offset).
  for (const NamedValue& s : {NamedValue{"q_stride_batch", a.q_stride_batch},
                              NamedValue{"k_stride_batch", a.k_stride_batch},
                              NamedValue{"v_stride_batch", a.v_stride_batch},
                              NamedValue{"out_stride_batch", a.out_stride_batch}}) {
    if (s.value % 8 != 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("{} ({}) must be a multiple of 8 elements", s.name, s.value));
    }
  }
  device = fj::PagedPrefillArgs{};
  if (auto f = prepare_attention_common(kernel, a.params, a.num_params, a.arrays, a.num_arrays,
                                        a.bad_index, a.num_seqs, a.scale, a.lse, a.lse_stride_token,
                                        a.num_heads, device)) {
    return f;
  }
  device.q = a.q;
  device.out = a.out;
  device.k_cache = a.k;
  device.v_cache = a.v;
  device.query_start_loc = a.cu_seqlens;
  device.key_start_loc = a.cu_seqlens_k;
  device.lse = a.lse;
  device.q_stride_token = a.q_stride_token;
  device.q_stride_head = a.q_stride_head;
  device.out_stride_token = a.out_stride_token;
  device.out_stride_head = a.out_stride_head;
  device.k_stride_slot = a.k_stride_token;
  device.k_stride_head = a.k_stride_head;
  device.v_stride_slot = a.v_stride_token;
  device.v_stride_head = a.v_stride_head;
  device.q_stride_batch = a.q_stride_batch;
  device.k_stride_block = a.k_stride_batch;
  device.v_stride_block = a.v_stride_batch;
  device.out_stride_batch = a.out_stride_batch;
  device.lse_stride_token = a.lse_stride_token;
  device.num_reqs = a.num_seqs;
  device.num_heads = a.num_heads;
  device.num_kv_heads = a.num_kv_heads;
  device.sinks = a.sinks;
  return std::nullopt;
}

// Loads `kernel` in the current CUDA context (device 0's primary one when the thread has none)
// and enqueues it with `args` as its only parameter. No synchronisation.
std::optional<Failure> launch(const CompiledKernel& kernel, unsigned grid_x, unsigned grid_y,
                              unsigned grid_z, unsigned threads, size_t smem, void* stream,
                              void* args) {
  auto api = cuda::driver_api();
  if (!api) return fail(FJ_ERROR_CUDA, api.error().message);
  auto function = kernel.function(smem);
  if (!function) {
    return fail(FJ_ERROR_CUDA,
                fmt::format("cannot load {}: {}", kernel.name(), function.error().message));
  }
  void* params[] = {args};
  const CUresult status = (*api)->cuLaunchKernel(*function, grid_x, grid_y, grid_z, threads, 1, 1,
                                                 static_cast<unsigned>(smem),
                                                 static_cast<CUstream>(stream), params, nullptr);
  if (status != CUDA_SUCCESS) {
    return fail(FJ_ERROR_CUDA, fmt::format("launching {} failed: {}", kernel.name(),
                                           cuda::driver_error_string(**api, status)));
  }
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

Failure compile_failure(const Error& error);

// A mask-independent kernel (KV-cache write, merge_states) for the current
// device, compiled on first use and cached in the context: FJ_ERROR_CUDA without a device,
// FJ_ERROR_COMPILE when NVRTC fails.
template <class MakeSpec>  // KernelSpec(const std::string& arch)
std::optional<Failure> device_kernel(fj_context& context, const MakeSpec& make_spec,
                                     CompiledKernelPtr& kernel) {
  auto arch = current_device_arch();
  if (!arch) return fail(FJ_ERROR_CUDA, arch.error().message);
  auto compiled = context.cache.get(make_spec(*arch));
  if (!compiled) return compile_failure(compiled.error());
  kernel = *compiled;
  return std::nullopt;
}

// Define names and values must be present and printable: they become part of a request key
// whose fields are kept apart by a control character.
std::optional<Failure> check_defines(const fj_kernel_desc& desc) {
  if (desc.num_defines > 0 && desc.defines == nullptr) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "desc->defines is null");
  }
  const auto printable = [](const char* text) {
    for (; *text != '\0'; ++text) {
      if (static_cast<unsigned char>(*text) < 0x20 || *text == 0x7f) return false;
    }
    return true;
  };
  for (uint32_t i = 0; i < desc.num_defines; ++i) {
    const fj_define& define = desc.defines[i];
    if (define.name == nullptr || define.value == nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("desc->defines[{}] has a null name or value", i));
    }
    if (!printable(define.name) || !printable(define.value)) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("desc->defines[{}] holds a control character", i));
    }
  }
  if (desc.score != nullptr && !printable(desc.score)) {
    return fail(FJ_ERROR_INVALID_ARGUMENT, "desc->score holds a control character");
  }
  return std::nullopt;
}

Failure compile_failure(const Error& error) {
  return fail(FJ_ERROR_COMPILE,
              error.log.empty() ? error.message : fmt::format("{}\n{}", error.message, error.log));
}

// A caller's workspace must hold what the launch needs; a null one with a nonzero size is a
// mistake (a failed allocation?) rather than a request for the kernel's own buffer.
std::optional<Failure> check_workspace(const SummaryLayout& layout, const void* workspace,
                                       uint64_t workspace_bytes) {
  if (workspace == nullptr) {
    if (workspace_bytes == 0) return std::nullopt;
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("workspace is null but workspace_bytes is {}", workspace_bytes));
  }
  if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("workspace is not {}-byte aligned", kWorkspaceAlignment));
  }
  if (workspace_bytes < layout.bytes) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("workspace_bytes ({}) is smaller than the {} bytes this launch needs "
                            "(see fj_attention_workspace_size)",
                            workspace_bytes, layout.bytes));
  }
  return std::nullopt;
}

PrefillKernelConfig sharded_config(const fj_kernel& kernel) {
  PrefillKernelConfig config = kernel.config;
  config.kv_sharded = true;
  return config;
}

std::optional<Failure> sharded_kernel_of(fj_kernel& kernel, CompiledKernelPtr& sharded) {
  std::lock_guard lock(kernel.sharded_mutex);
  if (kernel.sharded_compiled == nullptr) {
    auto compiled = kernel.context->cache.get(
        prefill_kernel_spec(*kernel.entry->variant, sharded_config(kernel)));
    if (!compiled) return compile_failure(compiled.error());
    kernel.sharded_compiled = *compiled;
  }
  sharded = kernel.sharded_compiled;
  return std::nullopt;
}

// The summaries a launch of `kernel` over `params`' arrays builds, with the caller's workspace
// checked against them.
std::optional<Failure> launch_summaries(const fj_kernel& kernel, const fj::MaskParams& params,
                                        const void* workspace, uint64_t workspace_bytes,
                                        SummaryLayout& layout) {
  auto result = summary_layout(*kernel.entry, params.array);
  if (!result) return fail(FJ_ERROR_UNSUPPORTED, result.error().message);
  layout = std::move(*result);
  return check_workspace(layout, workspace, workspace_bytes);
}

// The array-summary kernel for `kernel`'s architecture (the attention kernel's, which runs on
// the same device), from the handle after the first call.
std::optional<Failure> summary_kernel_of(fj_kernel& kernel, CompiledKernelPtr& summary_kernel) {
  if (auto api = cuda::driver_api(); !api) return fail(FJ_ERROR_CUDA, api.error().message);
  std::lock_guard lock(kernel.summary_mutex);
  if (kernel.summary_kernel == nullptr) {
    auto compiled = kernel.context->cache.get(array_summary_spec(kernel.config.arch));
    if (!compiled) return compile_failure(compiled.error());
    kernel.summary_kernel = *compiled;
  }
  summary_kernel = kernel.summary_kernel;
  return std::nullopt;
}

// Enqueues the summaries of `layout` into `workspace` (the kernel's own buffer when null) and
// points the parameter block's arrays at them; nothing when the layout has none.
std::optional<Failure> enqueue_summaries(fj_kernel& kernel, const SummaryLayout& layout,
                                         void* workspace, fj::MaskParams& params, void* stream) {
  if (layout.entries.empty()) return std::nullopt;
  CompiledKernelPtr summary_kernel;
  if (auto f = summary_kernel_of(kernel, summary_kernel)) return f;
  char* base = static_cast<char*>(workspace);
  if (base == nullptr) {
    auto owned = kernel.workspace.get(layout.bytes);
    if (!owned) return fail(FJ_ERROR_CUDA, owned.error().message);
    base = reinterpret_cast<char*>(static_cast<std::uintptr_t>(*owned));
  }
  for (const SummaryEntry& entry : layout.entries) {
    fj::ArrayParam& array = params.array[entry.slot];
    array.summary_axis = entry.axis;
    int32_t* summary = reinterpret_cast<int32_t*>(base + entry.offset);
    if (auto enqueued =
            enqueue_array_summary(*summary_kernel, array, entry.is_float, summary, stream);
        !enqueued) {
      return fail(FJ_ERROR_CUDA, enqueued.error().message);
    }
    array.summary = summary;
  }
  return std::nullopt;
}

// The host's copy of the longest query (`name`: max_query_len, max_seq_len) sizes the grid, so
// 0 with rows to compute would launch nothing and leave them unwritten: rejected on every
// device. (A non-zero value that is too small is caught by the CPU backend, which reads the
// lengths; on the GPU they are device memory, and the kernel zeroes and reports a longer
// request: zero_long_request, paged_prefill.cuh.)
std::optional<Failure> check_longest_query(const char* name, int32_t max_query_len,
                                           int32_t num_sequences, int32_t num_tokens) {
  if (max_query_len == 0 && num_sequences > 0 && num_tokens > 0) {
    return fail(FJ_ERROR_INVALID_ARGUMENT,
                fmt::format("{} is 0 but the call has {} query rows: pass the longest "
                            "request's query rows",
                            name, num_tokens));
  }
  return std::nullopt;
}

// Launches the attention kernel over `num_sequences` sequences of at most `max_query_len`
// query rows each (`num_tokens` in all), after the summaries of the arrays it reads (in
// `workspace`, or the kernel's own buffer when null). A CPU kernel runs here and now; it checks
// a contiguous call's key_start_loc against `num_key_tokens` and block-table entries against
// `num_blocks` (0: unchecked). `shard`: a sharded call's layout, or null; a CUDA kernel then
// runs its sharded form (sharded_kernel_of), which reads the layout from `device`.
std::optional<Failure> launch_attention(fj_kernel& kernel, fj::PagedPrefillArgs& device,
                                        void* workspace, uint64_t workspace_bytes,
                                        int32_t max_query_len, int32_t num_sequences,
                                        int32_t num_tokens, int32_t num_key_tokens,
                                        int64_t num_blocks, const fj::KvShard* shard,
                                        void* stream) {
  const int64_t group = device.num_heads / device.num_kv_heads;
  const int64_t packed_rows = int64_t{max_query_len} * group;
  const PrefillLaunchShape& shape = kernel.launch_shape;
  const int64_t block_m = shape.block_m;
  const int64_t q_tiles = (packed_rows + block_m - 1) / block_m;
  if (q_tiles > 0x7fffffff) {
    return fail(FJ_ERROR_UNSUPPORTED, "the longest query times the GQA group is too large");
  }
  SummaryLayout layout;
  if (auto f = launch_summaries(kernel, device.params, workspace, workspace_bytes, layout)) {
    return f;
  }
  if (q_tiles == 0 || num_sequences == 0) return std::nullopt;
  device.max_query_len = max_query_len;
  if (kernel.entry->cpu) {
    if (auto f = cpu::launch_attention(*kernel.entry->cpu, layout, device, workspace, num_tokens,
                                       num_key_tokens, max_query_len, num_blocks, shard)) {
      return fail(f->status, std::move(f->message));
    }
    return std::nullopt;
  }
  CompiledKernelPtr compiled = kernel.compiled;
  if (shard != nullptr) {
    if (auto f = sharded_kernel_of(kernel, compiled)) return f;
  }
  if (auto f = enqueue_summaries(kernel, layout, workspace, device.params, stream)) return f;
  return launch(*compiled, static_cast<unsigned>(q_tiles), static_cast<unsigned>(num_sequences),
                static_cast<unsigned>(device.num_kv_heads), static_cast<unsigned>(shape.threads),
                static_cast<unsigned>(shape.smem_bytes), stream, &device);
}

void set_last_error(const fj_context* context, std::string message) {
  if (context == nullptr) return;
  // A success clears the calling thread's message. While no thread of the context has one (the
  // usual case) this thread's is already empty: no lock and no map lookup on the launch path.
  if (message.empty() && context->threads_with_errors.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(context->error_mutex);
  std::string& slot = context->last_errors[std::this_thread::get_id()];
  context->threads_with_errors += int{!message.empty()} - int{!slot.empty()};
  slot = std::move(message);
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
    flexjit::dsl::SourceFile file = flexjit::dsl::read_source_file(path);
    if (!file.source) return fail(FJ_ERROR_NOT_FOUND, std::move(file.error));
    return flexjit::create_program(context, std::move(*file.source), out);
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
    for (const flexjit::RuntimeParam& param : program->scalars) {
      if (param.name == name) {
        *slot = param.slot;
        return std::nullopt;
      }
    }
    for (const flexjit::RuntimeParam& param : program->arrays) {
      if (param.name == name) {
        return fail(FJ_ERROR_NOT_FOUND,
                    fmt::format("'{}' is an array parameter: see fj_program_param_info", name));
      }
    }
    return fail(FJ_ERROR_NOT_FOUND, fmt::format("no scalar runtime parameter '{}'", name));
  });
}

FJ_API fj_status fj_program_param_count(const fj_program* program, int32_t* count) {
  const fj_context* context = program != nullptr ? program->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (auto f = flexjit::require_non_null({{"program", program}, {"count", count}})) return f;
    *count = static_cast<int32_t>(program->scalars.size());
    return std::nullopt;
  });
}

FJ_API fj_status fj_program_array_count(const fj_program* program, int32_t* count) {
  const fj_context* context = program != nullptr ? program->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (auto f = flexjit::require_non_null({{"program", program}, {"count", count}})) return f;
    *count = static_cast<int32_t>(program->arrays.size());
    return std::nullopt;
  });
}

FJ_API fj_status fj_program_param_info(const fj_program* program, const char* name,
                                       fj_param_info* info) {
  const fj_context* context = program != nullptr ? program->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (program == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "program is null");
    if (name == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "name is null");
    if (auto f = flexjit::check_args_struct("info", info)) return f;
    for (const auto* list : {&program->scalars, &program->arrays}) {
      for (const flexjit::RuntimeParam& param : *list) {
        if (param.name != name) continue;
        const bool is_float = param.type == flexjit::dsl::Type::Float;
        if (param.is_array()) {
          info->type = is_float ? FJ_PARAM_FLOAT_ARRAY : FJ_PARAM_INT_ARRAY;
        } else {
          info->type = is_float                                 ? FJ_PARAM_FLOAT
                       : param.type == flexjit::dsl::Type::Bool ? FJ_PARAM_BOOL
                                                                : FJ_PARAM_INT;
        }
        info->slot = param.slot;
        info->rank = static_cast<int32_t>(param.dims.size());
        info->dims[0] = param.dims.size() > 0 ? param.dims[0].c_str() : nullptr;
        info->dims[1] = param.dims.size() > 1 ? param.dims[1].c_str() : nullptr;
        return std::nullopt;
      }
    }
    return fail(FJ_ERROR_NOT_FOUND, fmt::format("no runtime parameter '{}'", name));
  });
}

FJ_API fj_status fj_kernel_create(fj_context* context, const fj_program* program,
                                  const fj_kernel_desc* desc, fj_kernel** out) {
  return guarded(context, [&]() -> std::optional<Failure> {
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    if (program == nullptr || desc == nullptr || out == nullptr) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "program, desc or out is null");
    }
    // 0.8 appended kv_dtype: an older caller's shorter struct reads it as 0.
    fj_kernel_desc d;
    if (auto f = flexjit::read_args_struct("desc", desc, flexjit::kKernelDescOldestSize, d)) {
      return f;
    }
    if (d.mask == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "desc->mask is null");
    if (auto f = flexjit::check_defines(d)) return f;
    if (!flexjit::supported::head_dim(d.head_dim)) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("head_dim {} is not supported (supported: {})", d.head_dim,
                              flexjit::supported::head_dims_text()));
    }
    if (auto f = flexjit::check_dtype(d.dtype)) return f;
    if (!flexjit::supported::page_size(d.page_size)) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("page_size {} is not supported ({})", d.page_size,
                              flexjit::supported::kPageSizesText));
    }
    const int32_t kv_dtype = flexjit::enum_bits(d.kv_dtype);
    const bool kv_fp8 = kv_dtype == FJ_DTYPE_FP8_E4M3;
    if (kv_dtype != 0 && kv_dtype != flexjit::enum_bits(d.dtype) && !kv_fp8) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("kv_dtype {} is not supported (0, the dtype, or FJ_DTYPE_FP8_E4M3)",
                              kv_dtype));
    }
    if (kv_fp8 && d.page_size == 0) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  "kv_dtype FJ_DTYPE_FP8_E4M3 needs a paged kernel (page_size > 0): the "
                  "contiguous-KV kernel reads 16-bit K/V");
    }
    if (context != program->context) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "program belongs to another context");
    }
    flexjit::PrefillKernelConfig config;
    config.head_dim = d.head_dim;
    config.bf16 = d.dtype == FJ_DTYPE_BF16;
    config.page_size = d.page_size;
    config.kv_fp8 = kv_fp8;
    if (d.arch != nullptr && d.arch == flexjit::cpu::kArch) {
      config.arch = flexjit::cpu::kArch;  // the CPU backend: no NVRTC, no device
    } else if (d.arch != nullptr) {
      if (std::string problem = flexjit::supported::cuda_arch_problem(d.arch); !problem.empty()) {
        return fail(FJ_ERROR_UNSUPPORTED, std::move(problem));
      }
      config.arch = d.arch;
    } else {
      auto arch = flexjit::current_device_arch();
      if (!arch) return fail(FJ_ERROR_CUDA, arch.error().message);
      config.arch = *arch;
    }
    // A request seen before costs one lookup: no lowering, source generation or hashing.
    std::string request = flexjit::kernel_request_key(d, config.arch);
    std::shared_ptr<const flexjit::ProgramKernel> entry =
        flexjit::find_program_kernel(*program, request);
    if (!entry) {
      auto variant = flexjit::program_variant(*program, flexjit::selection_of(d));
      if (!variant) return fail(FJ_ERROR_NOT_FOUND, variant.error().message);
      auto created = std::make_shared<flexjit::ProgramKernel>();
      if (config.arch == flexjit::cpu::kArch) {
        auto cpu = flexjit::cpu::make_cpu_kernel(*variant, config);
        if (!cpu) return fail(FJ_ERROR_COMPILE, cpu.error().message);
        created->cpu = *cpu;
      } else {
        auto result = context->cache.get(flexjit::prefill_kernel_spec(*variant, config));
        if (!result) return flexjit::compile_failure(result.error());
        created->compiled = *result;
      }
      created->arrays = program->arrays;
      created->variant = std::make_shared<const flexjit::Variant>(*variant);
      for (const flexjit::RuntimeParam& array : program->arrays) {
        created->reads_array.push_back(
            flexjit::ir::uses_array(variant->mask, array.slot) ||
            (variant->has_score() && flexjit::ir::uses_array(variant->score, array.slot)));
      }
      entry = created;
      flexjit::remember_program_kernel(*program, std::move(request), entry);
    }
    auto kernel = std::make_unique<fj_kernel>();
    kernel->context = context;
    kernel->compiled = entry->compiled;
    kernel->config = config;
    kernel->launch_shape = flexjit::prefill_launch_shape(config);
    kernel->num_params = static_cast<int>(program->scalars.size());
    kernel->entry = std::move(entry);
    *out = kernel.release();
    return std::nullopt;
  });
}

FJ_API fj_status fj_kernel_destroy(fj_kernel* kernel) {
  delete kernel;
  return FJ_SUCCESS;
}

FJ_API fj_status fj_kernel_name(const fj_kernel* kernel, const char** name) {
  const fj_context* context = kernel != nullptr ? kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (auto f = flexjit::require_non_null({{"kernel", kernel}, {"name", name}})) return f;
    *name =
        kernel->entry->cpu ? kernel->entry->cpu->name.c_str() : kernel->compiled->name().c_str();
    return std::nullopt;
  });
}

FJ_API fj_status fj_attention_workspace_size(const fj_kernel* kernel, const fj_array* arrays,
                                             int32_t num_arrays, uint64_t* bytes) {
  const fj_context* context = kernel != nullptr ? kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (kernel == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "kernel is null");
    if (bytes == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "bytes is null");
    if (auto f = flexjit::check_array_count(*kernel, arrays, num_arrays)) return f;
    fj::ArrayParam shapes[fj::kMaxArrayParams] = {};
    for (int i = 0; i < num_arrays; ++i) {
      if (!kernel->entry->reads_array[i]) continue;
      if (auto f = flexjit::check_array_shape(i, arrays[i], kernel->entry->arrays[i])) return f;
      shapes[i] = flexjit::array_param(arrays[i], i, nullptr);
    }
    auto layout = flexjit::summary_layout(*kernel->entry, shapes);
    if (!layout) return fail(FJ_ERROR_UNSUPPORTED, layout.error().message);
    *bytes = layout->bytes;
    return std::nullopt;
  });
}

FJ_API fj_status fj_paged_attention(fj_kernel* kernel, const fj_paged_attention_args* args,
                                    void* stream) {
  const fj_context* context = kernel != nullptr ? kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (kernel == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "kernel is null");
    fj_paged_attention_args a;
    if (auto f = flexjit::read_args_struct("args", args, flexjit::kPagedArgsOldestSize, a)) {
      return f;
    }
    fj::PagedPrefillArgs device;
    std::optional<fj::KvShard> shard;
    if (auto failure = flexjit::prepare_paged_args(*kernel, a, device, shard)) return failure;
    if (auto failure = flexjit::check_longest_query("max_query_len", a.max_query_len, a.num_reqs,
                                                    a.num_tokens)) {
      return failure;
    }
    return flexjit::launch_attention(*kernel, device, a.workspace, a.workspace_bytes,
                                     a.max_query_len, a.num_reqs, a.num_tokens, 0, a.num_blocks,
                                     shard ? &*shard : nullptr, stream);
  });
}

FJ_API fj_status fj_varlen_attention(fj_kernel* kernel, const fj_varlen_attention_args* args,
                                     void* stream) {
  const fj_context* context = kernel != nullptr ? kernel->context : nullptr;
  return guarded(context, [&]() -> std::optional<Failure> {
    if (kernel == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "kernel is null");
    fj_varlen_attention_args a;
    if (auto f = flexjit::read_args_struct("args", args, flexjit::kVarlenArgsOldestSize, a)) {
      return f;
    }
    fj::PagedPrefillArgs device;
    if (auto failure = flexjit::prepare_varlen_args(*kernel, a, device)) return failure;
    if (auto failure =
            flexjit::check_longest_query("max_seq_len", a.max_seq_len, a.num_seqs, a.num_tokens)) {
      return failure;
    }
    return flexjit::launch_attention(*kernel, device, a.workspace, a.workspace_bytes, a.max_seq_len,
                                     a.num_seqs, a.num_tokens, a.num_tokens_k, 0, nullptr, stream);
  });
}

FJ_API fj_status fj_kv_cache_write(fj_context* context, const fj_kv_cache_write_args* args,
                                   void* stream) {
  return guarded(context, [&]() -> std::optional<Failure> {
    using flexjit::NamedValue;
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    fj_kv_cache_write_args a;
    if (auto f =
            flexjit::read_args_struct("args", args, offsetof(fj_kv_cache_write_args, device), a)) {
      return f;
    }
    if (auto f = flexjit::check_device(a.device)) return f;
    if (auto f = flexjit::require_non_negative(
            {{"num_tokens", a.num_tokens}, {"num_blocks", a.num_blocks}})) {
      return f;
    }
    if (a.num_kv_heads <= 0 || a.head_dim <= 0 || a.head_dim % 8 != 0 || a.page_size <= 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  "num_kv_heads and page_size must be positive, head_dim a positive multiple of 8");
    }
    if (a.num_blocks > std::numeric_limits<int64_t>::max() / a.page_size) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "num_blocks * page_size overflows");
    }
    if (auto f = flexjit::require_non_null({{"key", a.key},
                                            {"value", a.value},
                                            {"k_cache", a.k_cache},
                                            {"v_cache", a.v_cache},
                                            {"slot_mapping", a.slot_mapping}})) {
      return f;
    }
    if (auto f = flexjit::require_aligned_16(
            {{"key", a.key}, {"value", a.value}, {"k_cache", a.k_cache}, {"v_cache", a.v_cache}})) {
      return f;
    }
    // 0.8: an fp8 cache quantizes 16-bit inputs of `dtype` with the scales.
    const int32_t cache_dtype = flexjit::enum_bits(a.cache_dtype);
    const bool fp8 = cache_dtype == FJ_DTYPE_FP8_E4M3;
    if (cache_dtype != 0 && !fp8) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("cache_dtype ({}) is neither 0 (a 16-bit copy) nor FJ_DTYPE_FP8_E4M3",
                              cache_dtype));
    }
    if (fp8) {
      const int32_t dtype = flexjit::enum_bits(a.dtype);
      if (dtype != FJ_DTYPE_BF16 && dtype != FJ_DTYPE_FP16) {
        return fail(FJ_ERROR_INVALID_ARGUMENT,
                    fmt::format("dtype ({}) of the keys and values written into an fp8 cache is "
                                "neither FJ_DTYPE_BF16 nor FJ_DTYPE_FP16",
                                dtype));
      }
    }
    if (auto f = flexjit::check_kv_scales(fp8, a.k_scale, a.v_scale, a.kv_scale_stride,
                                          a.num_kv_heads)) {
      return f;
    }
    if (auto f = flexjit::require_row_strides({{"key_stride_token", a.key_stride_token},
                                               {"key_stride_head", a.key_stride_head},
                                               {"value_stride_token", a.value_stride_token},
                                               {"value_stride_head", a.value_stride_head}})) {
      return f;
    }
    if (auto f = flexjit::require_row_strides({{"k_stride_block", a.k_stride_block},
                                               {"k_stride_slot", a.k_stride_slot},
                                               {"k_stride_head", a.k_stride_head},
                                               {"v_stride_block", a.v_stride_block},
                                               {"v_stride_slot", a.v_stride_slot},
                                               {"v_stride_head", a.v_stride_head}},
                                              fp8 ? 16 : 8)) {
      return f;
    }
    const int64_t chunks = int64_t{a.num_tokens} * a.num_kv_heads * (a.head_dim / 8);
    const int64_t blocks = (chunks + fj::kKvCacheWriteThreads - 1) / fj::kKvCacheWriteThreads;
    if (blocks > 0x7fffffff) return fail(FJ_ERROR_UNSUPPORTED, "too many tokens for one launch");
    if (blocks == 0) return std::nullopt;
    fj::KvCacheWriteArgs device{};
    device.key = a.key;
    device.value = a.value;
    device.k_cache = a.k_cache;
    device.v_cache = a.v_cache;
    device.slot_mapping = reinterpret_cast<const fj::i64*>(a.slot_mapping);
    device.key_stride_token = a.key_stride_token;
    device.key_stride_head = a.key_stride_head;
    device.value_stride_token = a.value_stride_token;
    device.value_stride_head = a.value_stride_head;
    device.k_stride_block = a.k_stride_block;
    device.k_stride_slot = a.k_stride_slot;
    device.k_stride_head = a.k_stride_head;
    device.v_stride_block = a.v_stride_block;
    device.v_stride_slot = a.v_stride_slot;
    device.v_stride_head = a.v_stride_head;
    device.num_slots = a.num_blocks * a.page_size;
    device.num_tokens = a.num_tokens;
    device.num_kv_heads = a.num_kv_heads;
    device.head_dim = a.head_dim;
    device.page_size = a.page_size;
    device.k_scale = a.k_scale;
    device.v_scale = a.v_scale;
    device.kv_scale_stride = a.kv_scale_stride;
    device.input_bf16 = fp8 && a.dtype == FJ_DTYPE_BF16;
    if (a.device == FJ_DEVICE_CPU) {
      flexjit::cpu::kv_cache_write(device, flexjit::cpu::ThreadPool::shared());
      return std::nullopt;
    }
    flexjit::CompiledKernelPtr kernel;
    using MakeSpec = flexjit::KernelSpec (*)(const std::string&);
    const MakeSpec spec = !fp8 ? &flexjit::kv_cache_write_spec
                          : device.input_bf16
                              ? MakeSpec{+[](const std::string& arch) {
                                  return flexjit::kv_cache_write_fp8_spec(true, arch);
                                }}
                              : MakeSpec{+[](const std::string& arch) {
                                  return flexjit::kv_cache_write_fp8_spec(false, arch);
                                }};
    if (auto f = flexjit::device_kernel(*context, spec, kernel)) return f;
    return flexjit::launch(*kernel, static_cast<unsigned>(blocks), 1, 1, fj::kKvCacheWriteThreads,
                           0, stream, &device);
  });
}

FJ_API fj_status fj_merge_states(fj_context* context, const fj_merge_states_args* args,
                                 void* stream) {
  return guarded(context, [&]() -> std::optional<Failure> {
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    fj_merge_states_args a;
    if (auto f =
            flexjit::read_args_struct("args", args, offsetof(fj_merge_states_args, device), a)) {
      return f;
    }
    if (auto f = flexjit::check_device(a.device)) return f;
    if (auto f = flexjit::check_dtype(a.dtype)) return f;
    if (a.num_tokens < 0 || a.num_heads <= 0 || a.head_dim <= 0 || a.head_dim % 8 != 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  "num_tokens must be >= 0, num_heads positive, head_dim a positive multiple of 8");
    }
    if (auto f = flexjit::require_non_null({{"out_a", a.out_a},
                                            {"lse_a", a.lse_a},
                                            {"out_b", a.out_b},
                                            {"lse_b", a.lse_b},
                                            {"out", a.out}})) {
      return f;
    }
    if (auto f =
            flexjit::require_aligned_16({{"out_a", a.out_a}, {"out_b", a.out_b}, {"out", a.out}})) {
      return f;
    }
    if (auto f = flexjit::check_sinks(a.sinks)) return f;
    if (a.lse != nullptr && (a.lse == a.lse_a || a.lse == a.lse_b)) {
      return fail(FJ_ERROR_INVALID_ARGUMENT, "lse must not alias lse_a or lse_b");
    }
    if (auto f = flexjit::require_row_strides({{"out_a_stride_token", a.out_a_stride_token},
                                               {"out_a_stride_head", a.out_a_stride_head},
                                               {"out_b_stride_token", a.out_b_stride_token},
                                               {"out_b_stride_head", a.out_b_stride_head},
                                               {"out_stride_token", a.out_stride_token},
                                               {"out_stride_head", a.out_stride_head}})) {
      return f;
    }
    for (const auto& [name, stride, present] :
         {std::tuple{"lse_a_stride_token", a.lse_a_stride_token, true},
          std::tuple{"lse_b_stride_token", a.lse_b_stride_token, true},
          std::tuple{"lse_stride_token", a.lse_stride_token, a.lse != nullptr}}) {
      if (present && stride < a.num_heads) {
        return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} ({}) is smaller than num_heads ({})",
                                                           name, stride, a.num_heads));
      }
    }
    const int64_t chunks = int64_t{a.num_tokens} * a.num_heads * (a.head_dim / 8);
    const int64_t blocks = (chunks + fj::kMergeStatesThreads - 1) / fj::kMergeStatesThreads;
    if (blocks > 0x7fffffff) return fail(FJ_ERROR_UNSUPPORTED, "too many rows for one launch");
    if (blocks == 0) return std::nullopt;
    fj::MergeStatesArgs device{};
    device.out_a = a.out_a;
    device.lse_a = a.lse_a;
    device.out_b = a.out_b;
    device.lse_b = a.lse_b;
    device.out = a.out;
    device.lse = a.lse;
    device.out_a_stride_token = a.out_a_stride_token;
    device.out_a_stride_head = a.out_a_stride_head;
    device.out_b_stride_token = a.out_b_stride_token;
    device.out_b_stride_head = a.out_b_stride_head;
    device.out_stride_token = a.out_stride_token;
    device.out_stride_head = a.out_stride_head;
    device.lse_a_stride_token = a.lse_a_stride_token;
    device.lse_b_stride_token = a.lse_b_stride_token;
    device.lse_stride_token = a.lse_stride_token;
    device.num_tokens = a.num_tokens;
    device.num_heads = a.num_heads;
    device.head_dim = a.head_dim;
    device.sinks = a.sinks;
    if (a.device == FJ_DEVICE_CPU) {
      flexjit::cpu::merge_states(device, a.dtype == FJ_DTYPE_BF16,
                                 flexjit::cpu::ThreadPool::shared());
      return std::nullopt;
    }
    flexjit::CompiledKernelPtr kernel;
    if (auto f = flexjit::device_kernel(
            *context,
            a.dtype == FJ_DTYPE_BF16
                ? +[](const std::string& arch) { return flexjit::merge_states_spec(true, arch); }
                : +[](const std::string& arch) { return flexjit::merge_states_spec(false, arch); },
            kernel)) {
      return f;
    }
    return flexjit::launch(*kernel, static_cast<unsigned>(blocks), 1, 1, fj::kMergeStatesThreads, 0,
                           stream, &device);
  });
}

FJ_API fj_status fj_merge_states_n(fj_context* context, const fj_merge_states_n_args* args,
                                   void* stream) {
  return guarded(context, [&]() -> std::optional<Failure> {
    if (context == nullptr) return fail(FJ_ERROR_INVALID_ARGUMENT, "context is null");
    fj_merge_states_n_args a;
    if (auto f = flexjit::read_args_struct("args", args, sizeof(fj_merge_states_n_args), a)) {
      return f;
    }
    if (auto f = flexjit::check_device(a.device)) return f;
    if (auto f = flexjit::check_dtype(a.dtype)) return f;
    if (a.num_states <= 0 || a.num_tokens < 0 || a.num_heads <= 0 || a.head_dim <= 0 ||
        a.head_dim % 8 != 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("num_states ({}) must be positive, num_tokens ({}) >= 0, num_heads "
                              "({}) positive, head_dim ({}) a positive multiple of 8",
                              a.num_states, a.num_tokens, a.num_heads, a.head_dim));
    }
    if (auto f = flexjit::require_non_null(
            {{"states_out", a.states_out}, {"states_lse", a.states_lse}, {"out", a.out}})) {
      return f;
    }
    if (auto f = flexjit::require_aligned_16({{"states_out", a.states_out}, {"out", a.out}})) {
      return f;
    }
    for (const auto& [name, pointer] : {std::pair{"states_lse", a.states_lse},
                                        std::pair{"lse", static_cast<const float*>(a.lse)}}) {
      if (reinterpret_cast<std::uintptr_t>(pointer) % alignof(float) != 0) {
        return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} is not 4-byte aligned", name));
      }
    }
    if (auto f = flexjit::check_sinks(a.sinks)) return f;
    if (auto f = flexjit::require_row_strides({{"out_stride_state", a.out_stride_state},
                                               {"out_stride_token", a.out_stride_token},
                                               {"out_stride_head", a.out_stride_head},
                                               {"merged_stride_token", a.merged_stride_token},
                                               {"merged_stride_head", a.merged_stride_head}})) {
      return f;
    }
    for (const auto& [name, stride, present] :
         {std::tuple{"lse_stride_token", a.lse_stride_token, true},
          std::tuple{"merged_lse_stride_token", a.merged_lse_stride_token, a.lse != nullptr}}) {
      if (present && stride < a.num_heads) {
        return fail(FJ_ERROR_INVALID_ARGUMENT, fmt::format("{} ({}) is smaller than num_heads ({})",
                                                           name, stride, a.num_heads));
      }
    }
    if (a.lse_stride_state < 0) {
      return fail(FJ_ERROR_INVALID_ARGUMENT,
                  fmt::format("lse_stride_state ({}) is negative", a.lse_stride_state));
    }
    // The states' LSEs must not change under the merge: lse may not overlap them (strides are
    // non-negative, so each spans [base, base + its last element]).
    if (a.lse != nullptr && a.num_tokens > 0) {
      const float* states_end = a.states_lse + (a.num_states - 1) * a.lse_stride_state +
                                (a.num_tokens - 1) * a.lse_stride_token + a.num_heads;
      const float* merged_end =
          a.lse + (a.num_tokens - 1) * a.merged_lse_stride_token + a.num_heads;
      if (std::less<>()(a.lse, states_end) && std::less<>()(a.states_lse, merged_end)) {
        return fail(FJ_ERROR_INVALID_ARGUMENT, "lse overlaps states_lse");
      }
    }
    if (a.device == FJ_DEVICE_CUDA && a.head_dim > flexjit::kMergeStatesNMaxHeadDim) {
      return fail(FJ_ERROR_UNSUPPORTED,
                  fmt::format("head_dim ({}) is above {}, the largest fj_merge_states_n merges on "
                              "CUDA",
                              a.head_dim, flexjit::kMergeStatesNMaxHeadDim));
    }
    const int64_t rows = int64_t{a.num_tokens} * a.num_heads;
    const int64_t blocks = (rows + fj::kDecodeRows - 1) / fj::kDecodeRows;
    if (blocks > 0x7fffffff) return fail(FJ_ERROR_UNSUPPORTED, "too many rows for one launch");
    if (a.num_tokens == 0) return std::nullopt;
    if (a.device == FJ_DEVICE_CPU) {
      flexjit::cpu::merge_states_n(a, flexjit::cpu::ThreadPool::shared());
      return std::nullopt;
    }
    // CUDA: the kernel of the head dim (merge_rows, the decode kernel's merge).
    flexjit::CompiledKernelPtr kernel;
    if (auto f = flexjit::device_kernel(
            *context,
            [&](const std::string& arch) {
              return flexjit::merge_states_n_spec(a.dtype == FJ_DTYPE_BF16, a.head_dim, arch);
            },
            kernel)) {
      return f;
    }
    fj::MergeStatesNArgs device{};
    device.states_out = a.states_out;
    device.states_lse = a.states_lse;
    device.out = a.out;
    device.lse = a.lse;
    device.out_stride_state = a.out_stride_state;
    device.out_stride_token = a.out_stride_token;
    device.out_stride_head = a.out_stride_head;
    device.lse_stride_state = a.lse_stride_state;
    device.lse_stride_token = a.lse_stride_token;
    device.merged_stride_token = a.merged_stride_token;
    device.merged_stride_head = a.merged_stride_head;
    device.merged_lse_stride_token = a.merged_lse_stride_token;
    device.num_states = a.num_states;
    device.num_tokens = a.num_tokens;
    device.num_heads = a.num_heads;
    device.sinks = a.sinks;
    return flexjit::launch(*kernel, static_cast<unsigned>(blocks), 1, 1, fj::kDecodeThreads, 0,
                           stream, &device);
  });
}

}  // extern "C"
