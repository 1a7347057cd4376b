// The C API's side of the CPU backend: what fj_paged_attention and fj_varlen_attention do for a
// kernel created with arch "cpu", after the checks every launch gets.
#pragma once

#include <optional>
#include <string>

#include "cpu/cpu_attention.h"
#include "flexjit/flexjit.h"
#include "kernel_args.cuh"
#include "launch/summaries.h"

namespace flexjit::cpu {

struct LaunchFailure {
  fj_status status;
  std::string message;
};

// Checks the host batch (check_host_batch, with the cache's num_blocks, 0 for unchecked, and a
// sharded call's `shard`, or null: FJ_ERROR_INVALID_ARGUMENT), builds the summaries
// `layout` lists into `workspace` (host memory; null: memory of the call's own) and points
// `args.params` at them, then runs the attention on the shared pool. Synchronous.
std::optional<LaunchFailure> launch_attention(const CpuKernel& kernel, const SummaryLayout& layout,
                                              fj::PagedPrefillArgs args, void* workspace,
                                              int32_t num_tokens, int32_t num_key_tokens,
                                              int32_t max_query_len, int64_t num_blocks,
                                              const fj::KvShard* shard);

}  // namespace flexjit::cpu
