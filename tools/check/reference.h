// Naive double-precision paged attention (docs/architecture.md#call-contract): the reference that
// `flexjit run`, the GPU tests and the CPU backend's tests compare against. It reads the cache
// through the same strides as the kernel and evaluates the mask and score with the variant's
// HostCode a row of keys at a time, every key of every row: no tiling, no kv range, no tile
// classes.
#pragma once

#include <cstdint>
#include <vector>

#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"

namespace flexjit {

// A K or V cache on the host: element (block, slot, kv_head, d) is at
// block * stride_block + slot * stride_slot + kv_head * stride_head + d.
struct HostCache {
  std::vector<float> values;
  int64_t stride_block = 0, stride_slot = 0, stride_head = 0;

  float at(int64_t block, int64_t slot, int64_t head, int64_t d) const {
    return values[block * stride_block + slot * stride_slot + head * stride_head + d];
  }
};

struct HostPagedBatch {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  float scale = 0.0f;
  std::vector<int32_t> query_start_loc;  // [num_reqs + 1]
  std::vector<int32_t> seq_lens;         // [num_reqs]
  std::vector<int32_t> block_table;      // [num_reqs][block_table_stride]
  int64_t block_table_stride = 0;
  int max_blocks_per_req = 0;
  std::vector<float> q;  // [num_tokens][num_heads][head_dim], values as the kernel reads them
  HostCache k, v;
  std::vector<int32_t> params;    // scalar runtime parameters by slot (floats as bits)
  std::vector<HostArray> arrays;  // array runtime parameters by slot (HostParams reads them)
  std::vector<float> sinks;       // [num_heads] sink logits (flexjit.h), or empty: none

  int num_reqs() const { return static_cast<int>(seq_lens.size()); }
  int num_tokens() const { return query_start_loc.empty() ? 0 : query_start_loc.back(); }
};

struct ReferenceOutput {
  std::vector<double> out;  // [num_tokens][num_heads][head_dim]
  std::vector<double> lse;  // [num_tokens][num_heads]; rows with no visible key: the sink, or -inf
  std::vector<uint8_t> empty_rows;  // [num_tokens][num_heads]: 1 where no key is visible
  int64_t visible_pairs = 0;        // (query row, key) pairs the mask keeps, summed over heads
};

// Runs on all hardware threads; deterministic.
// Scores are scale * dot in double, then the variant's score modifier in float32 (as the
// kernel applies it), then the mask. `code` is the variant's host code (make_host_code); a
// caller that wants the reference independent of the native code generator passes the
// evaluator's (prefer_native = false).
ReferenceOutput reference_paged_attention(const Variant& variant, const HostCode& code,
                                          const HostPagedBatch& batch);

// As above with make_host_code(variant): native code where flexjit has LLVM, else (or when
// compiling fails) the evaluator.
ReferenceOutput reference_paged_attention(const Variant& variant, const HostPagedBatch& batch);

}  // namespace flexjit
