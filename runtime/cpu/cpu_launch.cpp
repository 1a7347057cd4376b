#include "cpu/cpu_launch.h"

#include <cstdint>
#include <vector>

#include "flexjit/compiler/host_params.h"

namespace flexjit::cpu {

std::optional<LaunchFailure> launch_attention(const CpuKernel& kernel, const SummaryLayout& layout,
                                              fj::PagedPrefillArgs args, void* workspace,
                                              int32_t num_tokens, int32_t num_key_tokens,
                                              int32_t max_query_len, int64_t num_blocks,
                                              const fj::KvShard* shard) {
  const bool contiguous = kernel.config.page_size == 0;
  if (auto problem = check_host_batch(args, contiguous, kernel.config.page_size, num_tokens,
                                      num_key_tokens, max_query_len, num_blocks, shard)) {
    return LaunchFailure{FJ_ERROR_INVALID_ARGUMENT, std::move(*problem)};
  }
  // The host twin of the summary kernel, into the caller's workspace when there is one (so a
  // launch that passes one allocates nothing).
  std::vector<int32_t> own;
  char* base = static_cast<char*>(workspace);
  if (base == nullptr && layout.bytes > 0) {
    own.resize((layout.bytes + sizeof(int32_t) - 1) / sizeof(int32_t));
    base = reinterpret_cast<char*>(own.data());
  }
  for (const SummaryEntry& entry : layout.entries) {
    fj::ArrayParam& array = args.params.array[entry.slot];
    array.summary_axis = entry.axis;
    int32_t* summary = reinterpret_cast<int32_t*>(base + entry.offset);
    build_summary(array, entry.is_float, summary);
    array.summary = summary;
  }
  attention(kernel, args, shard, ThreadPool::shared());
  return std::nullopt;
}

}  // namespace flexjit::cpu
