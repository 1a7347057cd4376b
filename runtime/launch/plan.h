// The planner of planned launches (fj_plan, docs/architecture.md#plans): from host copies of a
// batch's lengths it writes the work lists the kernels read, deciding which requests take the
// split-KV decode kernel, how many splits each gets, and the order of the prefill tiles. Pure host
// code: no device, so the CPU tests check it exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flexjit/compiler/result.h"
#include "kernel_args.cuh"

namespace flexjit {

// What a plan is made for: the largest batch it takes and the machine's parallelism.
struct PlanShape {
  int max_num_reqs = 0;
  int max_num_tokens = 0;
  int max_query_len = 0;  // the longest query any batch has (bounds the prefill work)
  int num_heads = 0;
  int num_kv_heads = 0;
  int page_size = 16;
  int prefill_block_m = fj::kPrefillBlockM;  // packed rows per prefill item (the kernel's CTA)
  // CTAs of the decode kernel the device runs at once (SMs times CTAs per SM): the planner
  // splits keys until one wave is full.
  int decode_wave = 1;
};

// How many items each list of a plan of this shape can hold: the buffers a plan allocates.
struct PlanCapacity {
  int64_t prefill_items = 0;
  int64_t decode_items = 0;
  int64_t partial_slots = 0;   // split results awaiting their merge
  int64_t merge_counters = 0;  // groups of splits
};

// Fewest key tiles (of fj::kDecodeBlockN keys) per split: shorter splits cost more in merging
// than they gain in parallelism.
inline constexpr int kMinSplitTiles = 4;

// Checks the shape (positive heads dividing, non-negative capacities, sizes that fit the
// kernels' 32-bit indices) and returns its capacity.
Result<PlanCapacity> plan_capacity(const PlanShape& shape);

// A batch's work lists, as the kernels read them.
struct WorkPlan {
  fj::WorkCounts counts{};
  std::vector<fj::PrefillWorkItem> prefill;
  std::vector<fj::DecodeWorkItem> decode;
  int num_reqs = 0;
  int num_tokens = 0;
  // The first request with fewer keys than query tokens (-1: none), which only a sharded run
  // takes (its shard may hold few of the request's keys), with its lengths for the message.
  int32_t short_request = -1;
  int32_t short_seq_len = 0;
  int32_t short_query_len = 0;
};

// Plans one batch: request r owns query rows [query_start_loc[r], query_start_loc[r + 1]) and
// has seq_lens[r] keys (its new tokens included). Rejects what does not fit the shape or the
// contract: a decreasing query_start_loc or one not starting at 0, more requests, tokens or a
// longer query than the shape allows, a negative seq_len or one longer than max_blocks_per_req
// pages hold. A seq_len shorter than the request's query is recorded (short_request): only a
// sharded run may take it. `plan` is reused (no allocation once it has grown).
//
// Requests of at most fj::kDecodeMaxRows packed rows (query tokens times the GQA group) become
// decode items of fj::kDecodeRows rows; when those do not fill one decode wave, each is split
// into equal parts of at least kMinSplitTiles tiles, as many as fill it. Longer requests become
// prefill items of prefill_block_m rows, those that see the most keys first (the persistent
// grid then ends with short items).
Result<bool> build_plan(const PlanShape& shape, std::span<const int32_t> query_start_loc,
                        std::span<const int32_t> seq_lens, int64_t max_blocks_per_req,
                        WorkPlan& plan);

}  // namespace flexjit
