// Context parallelism checked (docs/context_parallel.md): a paged check's batch dealt into
// shards of each request's keys, each shard run as one sharded call
// (fj_paged_attention_args.kv_shard_*, global_seq_lens) with its LSE, the partial states merged by
// fj_merge_states_n (sinks passed to the merge only), and the result compared with the float64
// reference and with the unsharded call of the same inputs. CPU backend (0.9) and CUDA (0.10).
#pragma once

#include <cstdint>
#include <vector>

#include "check/cpu_check.h"
#include "check/paged_inputs.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"

namespace flexjit {

// How a request's keys are dealt: vLLM's decode context parallelism (runs of `interleave` keys to
// rank 0, 1, ..., count - 1, then again), or each shard one contiguous range, cut at random
// points of the request (uneven; a shard may get no key).
enum class ShardLayout { Interleaved, Contiguous };

struct ShardCheckConfig {
  int count = 2;
  ShardLayout layout = ShardLayout::Interleaved;
  int interleave = 1;  // Interleaved
  uint64_t seed = 1;   // Contiguous: the cut points
};

struct ShardCheckReport {
  PagedCheckReport merged;               // the merged result against the reference
  OutputDifference unsharded;            // the merged result against the unsharded call
  std::vector<int64_t> keys_per_shard;   // over all requests
  int64_t rows_empty_in_some_shard = 0;  // (token, head) rows a shard saw no key of, merged
                                         // rows that did see one
};

// Runs `config` (a paged config) in `shards`: on the CPU backend where config.arch is "cpu", else
// on the current CUDA device (config.launch Direct, or Planned: a plan per shard, so that decode
// rows take the split-KV decode kernel), the merge on the same device. The unsharded call it is
// compared with is the CPU backend's.
Result<ShardCheckReport> run_shard_check(fj_context* context, const fj_program* program,
                                         const PagedCheckConfig& config,
                                         const ShardCheckConfig& shards);

}  // namespace flexjit
