#include "launch/plan.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace flexjit {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A request taking the decode kernel: its row blocks, key tiles and splits.
struct DecodeRequest {
  int32_t request;
  int32_t row_blocks;
  int32_t tiles;
  int32_t splits;
};

// Items of the decode list when every request is split into parts of at most `chunk` tiles.
int64_t decode_items_with_chunk(const std::vector<DecodeRequest>& requests, int64_t chunk,
                                int kv_heads) {
  int64_t items = 0;
  for (const DecodeRequest& r : requests)
    items += int64_t{r.row_blocks} * std::max<int64_t>(1, ceil_div(r.tiles, chunk));
  return items * kv_heads;
}

}  // namespace

Result<PlanCapacity> plan_capacity(const PlanShape& shape) {
  if (shape.max_num_reqs < 0 || shape.max_num_tokens < 0 || shape.max_query_len < 0) {
    return Error{"max_num_reqs, max_num_tokens and max_query_len must be non-negative"};
  }
  if (shape.num_heads <= 0 || shape.num_kv_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0) {
    return Error{fmt::format("num_heads ({}) must be a positive multiple of num_kv_heads ({})",
                             shape.num_heads, shape.num_kv_heads)};
  }
  if (shape.page_size <= 0 || shape.decode_wave <= 0) {
    return Error{"page_size and decode_wave must be positive"};
  }
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t longest_rows = int64_t{std::min(shape.max_query_len, shape.max_num_tokens)} * group;
  const int64_t token_rows = int64_t{shape.max_num_tokens} * group;
  PlanCapacity capacity;
  // Decode requests have at most kDecodeMaxRows packed rows: row blocks of kDecodeRows, each
  // costing at most one block more than its rows fill.
  const int64_t decode_rows = std::min<int64_t>(longest_rows, fj::kDecodeMaxRows);
  const int64_t decode_blocks =
      std::min(shape.max_num_reqs * ceil_div(decode_rows, fj::kDecodeRows),
               token_rows / fj::kDecodeRows + shape.max_num_reqs);
  if (decode_blocks > 0) {
    // Splitting happens only while the list stays within one wave.
    capacity.decode_items =
        std::max<int64_t>(decode_blocks * shape.num_kv_heads, shape.decode_wave);
    capacity.partial_slots = shape.decode_wave;
    capacity.merge_counters = shape.decode_wave / 2;
  }
  if (longest_rows > fj::kDecodeMaxRows) {
    const int64_t prefill_requests =
        std::min<int64_t>(shape.max_num_reqs, token_rows / (fj::kDecodeMaxRows + 1));
    capacity.prefill_items =
        (token_rows / shape.prefill_block_m + prefill_requests) * shape.num_kv_heads;
  }
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();
  if (capacity.decode_items > kLimit || capacity.prefill_items > kLimit ||
      capacity.partial_slots * fj::kDecodeRows > kLimit) {
    return Error{"the plan's shape needs more work items than a launch can index"};
  }
  return capacity;
}

Result<bool> build_plan(const PlanShape& shape, std::span<const int32_t> query_start_loc,
                        std::span<const int32_t> seq_lens, int64_t max_blocks_per_req,
                        WorkPlan& plan) {
  const int num_reqs = static_cast<int>(seq_lens.size());
  if (query_start_loc.size() != seq_lens.size() + 1) {
    return Error{"query_start_loc must hold num_reqs + 1 entries"};
  }
  if (num_reqs > shape.max_num_reqs) {
    return Error{fmt::format("num_reqs ({}) exceeds the plan's max_num_reqs ({})", num_reqs,
                             shape.max_num_reqs)};
  }
  if (max_blocks_per_req < 0) return Error{"max_blocks_per_req must be non-negative"};
  if (query_start_loc[0] != 0) {
    return Error{fmt::format("query_start_loc[0] is {}, expected 0", query_start_loc[0])};
  }
  const int64_t key_capacity = max_blocks_per_req * shape.page_size;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int kv_heads = shape.num_kv_heads;
  const int block_m = shape.prefill_block_m;

  plan.short_request = -1;
  // Pass 1: check every request and sort it into the decode or the prefill path.
  thread_local std::vector<DecodeRequest> decode;
  thread_local std::vector<uint64_t> prefill_tiles;  // cost << 32 | index into prefill_keys
  thread_local std::vector<std::pair<int32_t, int32_t>> prefill_keys;  // (request, row0)
  decode.clear();
  prefill_tiles.clear();
  prefill_keys.clear();
  int32_t max_tiles = 0;
  for (int r = 0; r < num_reqs; ++r) {
    const int32_t begin = query_start_loc[r];
    const int32_t end = query_start_loc[r + 1];
    if (end < begin) {
      return Error{
          fmt::format("query_start_loc decreases at request {} ({} after {})", r, end, begin)};
    }
    const int32_t query_len = end - begin;
    if (query_len > shape.max_query_len) {
      return Error{fmt::format("request {} has {} query tokens, the plan's max_query_len is {}", r,
                               query_len, shape.max_query_len)};
    }
    const int32_t seq_len = seq_lens[r];
    if (seq_len < 0) return Error{fmt::format("seq_lens[{}] ({}) is negative", r, seq_len)};
    // Fewer keys than query tokens: a sharded run's shard (context parallelism); run_plan
    // refuses the batch for a run that holds every key.
    if (seq_len < query_len && plan.short_request < 0) {
      plan.short_request = r;
      plan.short_seq_len = seq_len;
      plan.short_query_len = query_len;
    }
    if (seq_len > key_capacity) {
      return Error{fmt::format(
          "seq_lens[{}] ({}) is more than the block table holds ({} blocks of {} tokens)", r,
          seq_len, max_blocks_per_req, shape.page_size)};
    }
    const int64_t rows = int64_t{query_len} * group;
    if (rows == 0) continue;
    if (rows <= fj::kDecodeMaxRows) {
      const auto tiles = static_cast<int32_t>(ceil_div(seq_len, fj::kDecodeBlockN));
      decode.push_back({r, static_cast<int32_t>(ceil_div(rows, fj::kDecodeRows)), tiles, 1});
      max_tiles = std::max(max_tiles, tiles);
      continue;
    }
    // Prefill tiles, costed by the keys up to their last row's position (what a causal mask
    // sees; for other masks an order as good as any).
    for (int64_t row0 = 0; row0 < rows; row0 += block_m) {
      const int64_t last_row = std::min<int64_t>(row0 + block_m, rows) - 1;
      const uint64_t cost = static_cast<uint64_t>(
          std::clamp<int64_t>(int64_t{seq_len} - query_len + last_row / group + 1, 0, seq_len));
      prefill_tiles.push_back(cost << 32 | prefill_keys.size());
      prefill_keys.emplace_back(r, static_cast<int32_t>(row0));
    }
  }
  const int32_t num_tokens = query_start_loc[num_reqs];
  if (num_tokens > shape.max_num_tokens) {
    return Error{fmt::format("the batch has {} query tokens, the plan's max_num_tokens is {}",
                             num_tokens, shape.max_num_tokens)};
  }

  // Splits: when the unsplit decode list leaves part of a wave idle, the smallest chunk (in
  // tiles, at least kMinSplitTiles) whose splits still fit in one wave.
  const int64_t unsplit =
      decode_items_with_chunk(decode, std::numeric_limits<int32_t>::max(), kv_heads);
  if (unsplit < shape.decode_wave && max_tiles > kMinSplitTiles) {
    int64_t lo = kMinSplitTiles;  // may not fit
    int64_t hi = max_tiles;       // fits: no request is split
    if (decode_items_with_chunk(decode, lo, kv_heads) <= shape.decode_wave) hi = lo;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (decode_items_with_chunk(decode, mid, kv_heads) <= shape.decode_wave ? hi : lo) = mid;
    }
    for (DecodeRequest& r : decode)
      r.splits = static_cast<int32_t>(std::max<int64_t>(1, ceil_div(r.tiles, hi)));
  }
  // Longest items first, so that the persistent grid's last round holds the shortest.
  std::stable_sort(decode.begin(), decode.end(),
                   [](const DecodeRequest& a, const DecodeRequest& b) {
                     return int64_t{a.tiles} * b.splits > int64_t{b.tiles} * a.splits;
                   });
  std::sort(prefill_tiles.begin(), prefill_tiles.end(), std::greater<>());

  plan.decode.clear();
  plan.prefill.clear();
  int32_t partial = 0;
  int32_t merge = 0;
  // Row blocks of one (request, kv head, split) are adjacent: with a large GQA group they read
  // the same keys at the same time, the second from L2. Each row block's splits have
  // consecutive partial slots and one merge counter.
  for (const DecodeRequest& r : decode) {
    const bool merged = r.splits > 1;
    for (int32_t head = 0; head < kv_heads; ++head) {
      for (int32_t split = 0; split < r.splits; ++split) {
        for (int32_t block = 0; block < r.row_blocks; ++block) {
          plan.decode.push_back({r.request, head, block * fj::kDecodeRows, split, r.splits,
                                 merged ? partial + block * r.splits : 0,
                                 merged ? merge + block : 0, 0});
        }
      }
      if (merged) {
        partial += r.row_blocks * r.splits;
        merge += r.row_blocks;
      }
    }
  }
  for (const uint64_t tile : prefill_tiles) {
    const auto& [request, row0] = prefill_keys[tile & 0xffffffffu];
    for (int32_t head = 0; head < kv_heads; ++head)
      plan.prefill.push_back({request, head, row0, 0});
  }
  plan.counts = {};
  plan.counts.prefill = static_cast<int32_t>(plan.prefill.size());
  plan.counts.decode = static_cast<int32_t>(plan.decode.size());
  plan.num_reqs = num_reqs;
  plan.num_tokens = num_tokens;
  return true;
}

}  // namespace flexjit
