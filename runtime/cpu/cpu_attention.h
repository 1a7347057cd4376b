// The CPU backend (docs/cpu.md): the whole attention contract of docs/architecture.md#call-contract
// computed on the host, from the same argument structs the CUDA kernels take
// (templates/kernel_args.cuh) with every pointer in host memory. Paged and contiguous (encoder)
// attention with LSE, merge_states and the KV-cache write. Work is tiled as on the GPU: per
// (request, kv head, tile of packed query rows), the mask's kv range bounds the keys visited, Empty
// tiles are skipped, Full tiles skip per-element mask evaluation and Partial ones evaluate it a row
// at a time (HostCode).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cpu/cpu_pool.h"
#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"
#include "flexjit/internal/supported.h"
#include "jit/kernel_source.h"
#include "kernel_args.cuh"

namespace flexjit::cpu {

// fj_kernel_desc::arch of a CPU kernel.
inline constexpr std::string_view kArch = supported::kCpuArch;

// Packed query rows per work item and keys per K/V tile (the GPU's kPrefillBlockM and
// kPrefillBlockN): the tiles classify() sees are the same on both devices.
inline constexpr int kBlockM = 64;
inline constexpr int kBlockN = 64;

// What a CPU kernel handle holds: the variant and its host code (mask rows, scores, tile
// classes and kv ranges, LLVM-compiled where flexjit has LLVM).
struct CpuKernel {
  std::string name;  // "cpu_prefill_causal_hd128_bf16_page16", "..._bf16_kvfp8_page16"
  // head_dim, bf16, page_size (0: contiguous K/V), kv_fp8 (an e4m3 cache); arch "cpu"
  PrefillKernelConfig config;
  Variant variant;
  std::shared_ptr<const HostCode> code;
};

// The CPU kernel of `variant` for `config` (head dim and page size already validated).
Result<std::shared_ptr<const CpuKernel>> make_cpu_kernel(const Variant& variant,
                                                         const PrefillKernelConfig& config);

// Checks what a kernel cannot check but the host can read: query_start_loc starts at 0 or
// more, never decreases, ends at most at num_tokens, and gives no request more than
// max_query_len rows; a paged request's seq_len covers its query rows; the block-table
// entries that will be read are not negative, and below num_blocks when it is not 0; a contiguous
// call's key_start_loc makes ranges of [0, num_key_tokens). nullopt when the batch is sound.
// With `shard` (a sharded paged call, fj_paged_attention_args.kv_shard_*, or null), the
// request's global length covers its query rows instead, and each of its shard's keys has a
// position in [0, global length).
std::optional<std::string> check_host_batch(const fj::PagedPrefillArgs& args, bool contiguous,
                                            int32_t page_size, int32_t num_tokens,
                                            int32_t num_key_tokens, int32_t max_query_len,
                                            int64_t num_blocks, const fj::KvShard* shard);

// Runs the attention of `args` (checked by the C API's rules and check_host_batch; the
// summaries of the arrays the variant reads along a position built in args.params) on `pool`.
// With config.kv_fp8 the cache holds e4m3 bytes, each read as fj::e4m3_to_float times its kv
// head's args.k_scale or args.v_scale (host memory). With `shard` (or null), the call holds one
// shard of each request's keys: masks and scores see their positions in the whole request
// (fj::ShardPositions), and the request's global length places its queries. Synchronous; the
// output does not depend on the pool's size.
void attention(const CpuKernel& kernel, const fj::PagedPrefillArgs& args, const fj::KvShard* shard,
               ThreadPool& pool);

// merge_states.cuh and kv_cache_write.cuh on host memory (arguments checked by the C API). With
// args.k_scale set, kv_cache_write quantizes into an fp8 cache: fj::e4m3_from_float(x / scale).
void merge_states(const fj::MergeStatesArgs& args, bool bf16, ThreadPool& pool);
// fj_merge_states_n on host memory (arguments checked by the C API): the states of each row in
// their order.
void merge_states_n(const fj_merge_states_n_args& args, ThreadPool& pool);
void kv_cache_write(const fj::KvCacheWriteArgs& args, ThreadPool& pool);

}  // namespace flexjit::cpu
