// Arguments of every kernel, each passed by value as the kernel's only parameter, and the
// launch shapes the host needs. Included by the kernels (NVRTC) and by the host launchers (g++),
// so each layout is written once. Only fixed-width scalars and pointers: both compilers lay the
// structs out identically.
#pragma once

#include "fj_ops.cuh"

namespace fj {

// Tile shape of the mma.sync prefill kernel (paged_prefill.cuh): one CTA of four warps computes
// kPrefillBlockM packed query rows (16 per warp) against K/V tiles of kPrefillBlockN keys.
constexpr int kPrefillBlockM = 64;
constexpr int kPrefillBlockN = 64;
constexpr int kPrefillThreads = 128;

// The Hopper prefill kernel (paged_prefill_sm90.cuh, sm_90a, head dims 64, 128 and 256): a
// producer warpgroup gathers K/V tiles of wgmma_block_n() keys into a ring of wgmma_stages()
// stages, two consumer warpgroups of 64 rows each issue wgmma. The visited tiles are listed
// kWgmmaTileList at a time. The producer gives registers to the consumers (setmaxnreg).
// Enumerators, not constexpr variables: NVRTC emits each namespace-scope constexpr variable
// into the PTX as a global, used or not.
enum : int {
  kWarpThreads = 32,
  kWarpgroupThreads = 4 * kWarpThreads,       // wgmma's unit: four warps
  kWgmmaProducerThreads = kWarpgroupThreads,  // warpgroup 0
  kWgmmaConsumerRows = 64,                    // wgmma's M, per consumer
};
constexpr int kWgmmaBlockM = 2 * kWgmmaConsumerRows;
constexpr int kWgmmaThreads = 3 * kWarpgroupThreads;  // the producer and two consumers
constexpr int kWgmmaTileList = 1024;
constexpr int kWgmmaRegisterPool = 3 * 168;  // per thread of each warpgroup, together
constexpr int kWgmmaMaxStages = 4;
FJ_HD constexpr bool prefill_uses_wgmma(int head_dim, bool sm90a) {
  return sm90a && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}
// Keys per K/V tile, where the variant allows 128 (`wide`: not Variant::kNarrowKeyTilesHd64 at
// head dim 64, Variant::kWideKeyTiles at 128; emit_cuda.cpp, key_tile_width): 128 at head dim
// 64, where a 64-key tile's softmax, barriers and row-max shuffles cost about as much as its
// MMAs; at 128 where the cache is not fp8 (its converted parts would not fit beside two 128-key
// stages); else 64, always at 256 and for variants whose per-element mask and score
// take more than kWgmmaWideTileOperations operations (prefix_ranges: 35; ptxas serializes the
// wgmma of its 128-key tile). The host sizes shared memory for the widest (the defaults). At
// head dim 128 the two stages of 128 keys take K and V rings of their own (split_kv_rings):
// with one ring such tiles were 4-20% slower (bench/history/hopper-notes.md).
constexpr int kWgmmaWideTileOperations = 16;
// Whether a variant may take 128-key tiles at `head_dim` (wgmma_block_n's `wide`), from its
// kWideKeyTiles and kNarrowKeyTilesHd64 (emit_cuda.cpp, key_tile_width). The kernel and the host,
// which lists a kernel's fallback builds by it (kernel_source.cpp), both ask here.
FJ_HD constexpr bool wgmma_wide_allowed(int head_dim, bool wide_key_tiles,
                                        bool narrow_key_tiles_hd64) {
  return head_dim == 64 ? !narrow_key_tiles_hd64 : wide_key_tiles;
}
FJ_HD constexpr int wgmma_block_n(int head_dim, int element_operations = 0, bool kv_fp8 = false,
                                  bool wide = true) {
  return ((head_dim == 64 && wide) || (head_dim == 128 && wide && !kv_fp8)) &&
                 element_operations <= kWgmmaWideTileOperations
             ? 128
             : 64;
}
// The K/V stages share 128 KiB: four of 128 keys at head dim 64, two of 128 keys at 128 (four of
// 64 with an fp8 cache), two of 64 keys at 256. With Q (16 to 64 KiB) that leaves room for the key
// terms. (A function, not a namespace-scope constant: NVRTC wrote that one into every kernel's PTX
// as an unused global.)
FJ_HD constexpr int wgmma_stage_bytes() {
  return 128 * 1024;
}
FJ_HD constexpr int wgmma_stages(int head_dim, int block_n) {
  return wgmma_stage_bytes() / (2 * block_n * head_dim * 2) < kWgmmaMaxStages
             ? wgmma_stage_bytes() / (2 * block_n * head_dim * 2)
             : kWgmmaMaxStages;
}
// The three warpgroups share the 168 registers per thread that one CTA of 384 threads has:
// the consumers take 216, or 224 where O and S together are 128 accumulators (head dim 256: O
// alone; 128 with 128-key tiles: gemma2_local spilled 36 bytes at 216), the producer the rest
// (72, or 56). A consumer holds S, one P (the next tile's exponentials wait in S until the PV in
// flight is done) and O.
FJ_HD constexpr int wgmma_consumer_registers(int head_dim, int block_n) {
  return head_dim > 128 || (head_dim == 128 && block_n == 128) ? 224 : 216;
}
FJ_HD constexpr int wgmma_producer_registers(int head_dim, int block_n) {
  return kWgmmaRegisterPool - 2 * wgmma_consumer_registers(head_dim, block_n);
}

// Launch shape of the prefill kernel of a head dim, on sm_90a or not.
FJ_HD constexpr int prefill_block_m(int head_dim, bool sm90a) {
  return prefill_uses_wgmma(head_dim, sm90a) ? kWgmmaBlockM : kPrefillBlockM;
}
FJ_HD constexpr int prefill_threads(int head_dim, bool sm90a) {
  return prefill_uses_wgmma(head_dim, sm90a) ? kWgmmaThreads : kPrefillThreads;
}

// Shared memory of the mma.sync kernels: Q, K and V tiles of 16-bit elements, rows padded by
// 16 bytes so that ldmatrix's eight row addresses fall in different banks.
FJ_HD constexpr int prefill_smem_row_elems(int head_dim) {
  return head_dim + 8;
}
// An fp8 cache (kKvFp8): the wgmma kernel's producer copies the e4m3 K and V of a tile (each a
// "part" of block_n rows of head_dim bytes) into a ring of wgmma_fp8_slots() parts and
// converts them into the 16-bit stages: four parts (two tiles) up to head dim 128, one at 256
// (where two would not fit beside Q and the stages).
FJ_HD constexpr int wgmma_fp8_slots(int head_dim) {
  return head_dim > 128 ? 1 : 4;
}
FJ_HD constexpr int wgmma_fp8_part_bytes(int head_dim) {
  return wgmma_block_n(head_dim, 0, true) * head_dim;  // the widest fp8 tile's
}
// The wgmma kernel's: Q and the K/V stages, unpadded (128-byte swizzle), plus 1024 bytes to
// align them to the swizzle pattern; with an fp8 cache also the e4m3 parts. The mma.sync
// kernel's: Q, K and V tiles, and with an fp8 cache the e4m3 K and V tiles (padded rows of
// head_dim bytes).
FJ_HD constexpr int paged_prefill_smem_bytes(int head_dim, bool sm90a, bool kv_fp8 = false) {
  return prefill_uses_wgmma(head_dim, sm90a)
             ? 1024 + kWgmmaBlockM * head_dim * 2 + wgmma_stage_bytes() +
                   (kv_fp8 ? wgmma_fp8_slots(head_dim) * wgmma_fp8_part_bytes(head_dim) : 0)
             : 3 * kPrefillBlockM * prefill_smem_row_elems(head_dim) * 2 +
                   (kv_fp8 ? 2 * kPrefillBlockM * prefill_smem_row_elems(head_dim / 2) * 2 : 0);
}

// Work lists of planned launches (fj_plan, docs/architecture.md#plans): the host planner writes
// them into device memory, the kernels loop over them, so a launch's geometry does not depend on
// the batch and a captured CUDA graph replays any batch that fits the plan.
struct WorkCounts {
  i32 prefill;  // PrefillWorkItem entries in use
  i32 decode;   // DecodeWorkItem entries in use
  i32 reserved[2];
};

// prefill_block_m() packed query rows from row0 of one request and kv head.
struct PrefillWorkItem {
  i32 request;
  i32 kv_head;
  i32 row0;
  i32 reserved;
};

// The decode kernel's unit: kDecodeRows packed query rows from row0 of one request and kv head,
// over split `split` of `num_splits` equal parts of the tiles the rows may see. With several
// splits, each writes its partial result to partial slot `partial + split` and the last to
// finish merges them (merge counter `merge`).
struct DecodeWorkItem {
  i32 request;
  i32 kv_head;
  i32 row0;
  i32 split;
  i32 num_splits;
  i32 partial;
  i32 merge;
  i32 reserved;
};

// Context parallelism (since 0.9; fj_paged_attention_args.kv_shard_*, docs/context_parallel.md):
// a call that holds one shard of each request's keys. Key j of request r's shard has position
// offsets[r] + (j / interleave) * count * interleave + rank * interleave + j % interleave in the
// whole request, whose global_seq_lens[r] keys place its queries. The CPU backend reads it; the
// CUDA kernels (since 0.10) through ShardedVariant (sharded_variant.cuh).
struct KvShard {
  const i32* offsets;          // [num_reqs] each request's first position, or null: 0
  const i32* global_seq_lens;  // [num_reqs] keys of each request over all shards
  i32 rank;                    // 0 <= rank < count
  i32 count;                   // >= 1
  i32 interleave;              // >= 1: keys a shard holds in a row before the next shard's
};

// One request's shard: positions of its keys, and keys below a position (both monotonic, so a run
// of keys maps to the hull of its positions and a position range back to a run of keys).
struct ShardPositions {
  i64 offset;
  i32 rank, count, interleave;

  // The unsharded request: key j at position j.
  static FJ_HD ShardPositions whole() { return ShardPositions{0, 0, 1, 1}; }

  FJ_HD i64 position(i32 key) const {
    return offset + static_cast<i64>(key / interleave) * count * interleave +
           static_cast<i64>(rank) * interleave + key % interleave;
  }
  // The shard's keys whose position is below `position`.
  FJ_HD i64 keys_below(i64 position) const {
    const i64 relative = position - offset;
    if (relative <= 0) return 0;
    const i64 period = static_cast<i64>(count) * interleave;
    const i64 in_period = relative % period - static_cast<i64>(rank) * interleave;
    return relative / period * interleave + (in_period < 0            ? 0
                                             : in_period > interleave ? interleave
                                                                      : in_period);
  }
  // The end of key `key`'s run: keys from `key` to it (exclusive) have consecutive positions.
  FJ_HD i64 run_end(i32 key) const {
    return count == 1 ? static_cast<i64>(0x7fffffff)
                      : (static_cast<i64>(key) / interleave + 1) * interleave;
  }
};

FJ_HD ShardPositions shard_positions(const KvShard& shard, i32 request) {
  return ShardPositions{shard.offsets != nullptr ? shard.offsets[request] : 0, shard.rank,
                        shard.count, shard.interleave};
}

// Contiguous (page size 0) calls keep the fields only they read (fj_varlen_attention's key starts
// and batch strides, since 0.6) where paged calls keep theirs (the unions, *_stride_block), so
// that the struct's layout, and with it the paged kernels, stay as they were.
struct PagedPrefillArgs {
  const void* q;               // [num_tokens, num_heads, head_dim], head_dim contiguous
  void* out;                   // same shape as q
  const void* k_cache;         // paged: element (block, slot, kv_head, d) at the strides below;
  const void* v_cache;         // contiguous: row (token) at *_stride_slot, sequence *_stride_block
  const i32* query_start_loc;  // [num_reqs + 1]
  union {
    const i32* seq_lens;       // paged: [num_reqs], keys of each request (new tokens included)
    const i32* key_start_loc;  // contiguous: [num_reqs + 1] rows of K/V, or null: query_start_loc
  };
  union {
    const i32* block_table;  // paged: [num_reqs][block_table_stride]
    i64 out_stride_batch;    // contiguous: out of sequence s starts s * out_stride_batch further
  };
  float* lse;  // optional [num_tokens, num_heads] natural-log LSE, or null

  i64 q_stride_token, q_stride_head;  // in elements
  i64 out_stride_token, out_stride_head;
  i64 k_stride_block, k_stride_slot, k_stride_head;  // contiguous: k_stride_block per sequence
  i64 v_stride_block, v_stride_slot, v_stride_head;
  union {
    i64 block_table_stride;  // paged
    i64 q_stride_batch;      // contiguous: q of sequence s starts s * q_stride_batch further
  };
  i64 lse_stride_token;  // lse[token * lse_stride_token + head]

  i32 num_reqs;
  i32 num_heads;
  i32 num_kv_heads;
  i32 max_blocks_per_req;  // keys at or past max_blocks_per_req * page size are never read
  float scale;             // softmax scale applied to q·k before score_mod

  MaskParams params;

  // Planned launch (the persistent grid loops over the work list), or null: one CTA per
  // (row tile, request, kv head) of the grid.
  const WorkCounts* work_counts;
  const PrefillWorkItem* work_items;

  // Attention sinks (since 0.7), or null: [num_heads] float32 logits, one per query head, each
  // joining its head's every row's softmax denominator once, with no value (finish_row).
  const float* sinks;

  // An fp8 (e4m3) cache (since 0.8; the kernel's kKvFp8): K element (block, slot, h, d) is its
  // e4m3 value times k_scale[h * kv_scale_stride], V likewise; the cache strides count bytes.
  // Null for a 16-bit cache.
  const float* k_scale;
  const float* v_scale;
  i32 kv_scale_stride;

  // A sharded call's layout (context parallelism), read only by kernels of a ShardedVariant
  // (sharded_variant.cuh); zero otherwise.
  KvShard shard;

  // Direct launches: the host's longest query (the grid's rows); a longer request has its rows
  // zeroed and is reported (DebugReport::QueryLength). Unused by planned launches.
  i32 max_query_len;
  // Paged: blocks in the cache, at most 2^31; 0 leaves block ids unchecked. Keys whose block id
  // lies outside [0, num_blocks) are absent (page_in_cache, paged_prefill.cuh).
  u32 num_blocks;
};

static_assert(sizeof(const i32*) == sizeof(i64),
              "the unions of PagedPrefillArgs pair 8-byte fields");

// How a row of attention ends: its output is the accumulator times `scale`, its LSE `lse`.
struct RowFinish {
  float scale;
  float lse;
};

// From the row's largest score `row_max` (natural log) and `total`, the sum of exp(s - row_max)
// over its visible keys; `sink` is its head's sink logit (-inf: none), which joins the
// denominator once: lse = log(sum of exp(s) + exp(sink)). A row with no visible key gets out 0
// and lse -inf, or the sink. One function for every kernel and the CPU backend, so that they
// agree on the edge cases.
FJ_HD RowFinish finish_row(float row_max, float total, float sink) {
  if (sink == negative_infinity()) {
    return total > 0.0f ? RowFinish{1.0f / total, row_max + logf(total)}
                        : RowFinish{0.0f, negative_infinity()};
  }
  if (!(total > 0.0f)) return RowFinish{0.0f, sink};
  // exp as exp2 of x log2(e) and a reciprocal, as the kernels' softmax computes it.
  const float m = fmaxf(row_max, sink);
  const float kept = exp2f((row_max - m) * kLog2e);
  const float sum = total * kept + exp2f((sink - m) * kLog2e);
  return RowFinish{kept * (1.0f / sum), m + logf(sum)};
}

// The scale of kv head `kv_head`'s scores: the softmax scale, times the head's k_scale for an
// fp8 cache, whose Q K^T the kernels compute on the e4m3 values. And the factor its outputs
// take: the head's v_scale, or 1.
template <bool kKvFp8>
FJ_HD float score_scale(const PagedPrefillArgs& args, int kv_head) {
  return kKvFp8 ? args.scale * args.k_scale[static_cast<i64>(kv_head) * args.kv_scale_stride]
                : args.scale;
}
template <bool kKvFp8>
FJ_HD float value_scale(const PagedPrefillArgs& args, int kv_head) {
  return kKvFp8 ? args.v_scale[static_cast<i64>(kv_head) * args.kv_scale_stride] : 1.0f;
}

// Head `head`'s sink logit, -inf where the call has none.
FJ_HD float sink_of(const float* sinks, i64 head) {
  return sinks != nullptr ? sinks[head] : negative_infinity();
}

// Contiguous (page size 0) calls, fj_varlen_attention: where sequence `seq`'s rows begin in out,
// K and V (element offsets: the batch strides; packed_rows_of adds q's), and its keys' first row
// and count (its queries' with no key_start_loc). A paged call has no batch strides.
template <int kPageSize>
FJ_HD i64 out_batch_offset(const PagedPrefillArgs& args, int seq) {
  return kPageSize == 0 ? seq * args.out_stride_batch : 0;
}
template <int kPageSize>
FJ_HD i64 kv_batch_offset(i64 stride_block, int seq) {
  return kPageSize == 0 ? seq * stride_block : 0;
}
FJ_HD int contiguous_key_begin(const PagedPrefillArgs& args, int seq) {
  return (args.key_start_loc != nullptr ? args.key_start_loc : args.query_start_loc)[seq];
}
FJ_HD int contiguous_key_count(const PagedPrefillArgs& args, int seq) {
  const i32* starts = args.key_start_loc != nullptr ? args.key_start_loc : args.query_start_loc;
  return starts[seq + 1] - starts[seq];
}

// The split-KV decode kernel (paged_decode.cuh): one CTA of four warps per work item, each warp
// taking 16 of every kDecodeBlockN keys, K/V streamed through kDecodeStages-deep cp.async
// stages. Queries of at most kDecodeMaxRows packed rows (query tokens times GQA group) take it.
constexpr int kDecodeRows = 16;
constexpr int kDecodeBlockN = 64;
constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxRows = 32;
FJ_HD constexpr int decode_stages(int head_dim) {
  return head_dim > 128 ? 2 : 3;
}
// Whether the decode kernel's K/V tiles are unpadded rows in the 128-byte swizzle, copied by
// whole rows per pass of the CTA's threads (head dims 64, 128, 256), rather than padded rows.
FJ_HD constexpr bool decode_swizzled_tiles(int head_dim) {
  return head_dim % 64 == 0 && kDecodeThreads % (head_dim / 8) == 0 &&
         kDecodeBlockN % (kDecodeThreads / (head_dim / 8)) == 0;
}
// Elements of one decode K or V tile.
FJ_HD constexpr int decode_tile_elems(int head_dim) {
  return kDecodeBlockN *
         (decode_swizzled_tiles(head_dim) ? head_dim : prefill_smem_row_elems(head_dim));
}
// An fp8 cache: the stages hold e4m3 tiles (unpadded rows of head_dim bytes, or padded ones
// where the 16-bit tiles are padded), one more stage than the 16-bit kernel has, and one
// 16-bit K/V tile pair receives each warp's keys of the tile it computes (paged_decode.cuh).
FJ_HD constexpr int decode_fp8_stages(int head_dim) {
  return decode_stages(head_dim) + 1;
}
FJ_HD constexpr int decode_fp8_tile_bytes(int head_dim) {
  return kDecodeBlockN *
         (decode_swizzled_tiles(head_dim) ? head_dim : prefill_smem_row_elems(head_dim / 2) * 2);
}
// Whether the fp8 decode kernel converts tiles into 16-bit ones in shared memory: at head dims
// 64 and 128 it reads K's and V's fragments from the e4m3 stages in registers instead.
FJ_HD constexpr bool decode_fp8_converts(int head_dim, bool kv_fp8) {
  return kv_fp8 && !(decode_swizzled_tiles(head_dim) && head_dim <= 128);
}
// Q's padded rows and the K/V stages (and the fp8 kernel's 16-bit tiles, where it converts),
// plus 128 bytes to align them to 128-byte lines.
FJ_HD constexpr int paged_decode_smem_bytes(int head_dim, bool kv_fp8 = false) {
  return 128 + kDecodeRows * prefill_smem_row_elems(head_dim) * 2 +
         (kv_fp8
              ? (decode_fp8_converts(head_dim, kv_fp8) ? 2 * decode_tile_elems(head_dim) * 2 : 0) +
                    decode_fp8_stages(head_dim) * 2 * decode_fp8_tile_bytes(head_dim)
              : decode_stages(head_dim) * 2 * decode_tile_elems(head_dim) * 2);
}

struct PagedDecodeArgs {
  PagedPrefillArgs attention;  // shapes, pointers and parameters (its work list unused)
  const WorkCounts* work_counts;
  const DecodeWorkItem* work_items;
  float* partial_out;   // [slot][kDecodeRows][head_dim], each split's normalised output
  float* partial_lse;   // [slot][kDecodeRows]
  i32* merge_counters;  // zero between launches: the merging CTA resets its counter
};

// KV-cache write: see kv_cache_write.cuh.
struct KvCacheWriteArgs {
  const void* key;    // [num_tokens, num_kv_heads, head_dim] at key_stride_*
  const void* value;  // same shape, at value_stride_*
  void* k_cache;      // element (block, slot, kv_head, d) at k_stride_*
  void* v_cache;
  const i64* slot_mapping;  // [num_tokens]
  i64 key_stride_token, key_stride_head;
  i64 value_stride_token, value_stride_head;
  i64 k_stride_block, k_stride_slot, k_stride_head;
  i64 v_stride_block, v_stride_slot, v_stride_head;
  i64 num_slots;  // num_blocks * page_size
  i32 num_tokens;
  i32 num_kv_heads;
  i32 head_dim;  // a multiple of 8
  i32 page_size;
  // An fp8 (e4m3) cache (since 0.8; the kv_cache_write_fp8 kernel): a value x of kv head h is
  // stored as e4m3_from_float(x / k_scale[h * kv_scale_stride]) (v_scale for V), the cache
  // strides count bytes, and input_bf16 says whether key and value are bf16 (else fp16). Null
  // scales for the 16-bit copy.
  const float* k_scale;
  const float* v_scale;
  i32 kv_scale_stride;
  i32 input_bf16;
};

constexpr int kKvCacheWriteThreads = 256;

// merge_states: see merge_states.cuh.
struct MergeStatesArgs {
  const void* out_a;   // [num_tokens, num_heads, head_dim] at *_stride_token / *_stride_head
  const float* lse_a;  // [num_tokens, num_heads] at lse_a_stride_token, natural log
  const void* out_b;
  const float* lse_b;
  void* out;   // may alias out_a or out_b
  float* lse;  // optional
  i64 out_a_stride_token, out_a_stride_head;
  i64 out_b_stride_token, out_b_stride_head;
  i64 out_stride_token, out_stride_head;
  i64 lse_a_stride_token, lse_b_stride_token, lse_stride_token;
  i32 num_tokens;
  i32 num_heads;
  i32 head_dim;        // a multiple of 8
  const float* sinks;  // since 0.7, or null: [num_heads] logits joining each merged row once
};

constexpr int kMergeStatesThreads = 256;

// fj_merge_states_n on CUDA (since 0.10): num_states states stacked at *_stride_state, merged in
// state order by merge_rows (merge_states.cuh), kDecodeRows rows (token, head) per CTA of
// kDecodeThreads threads, as the split-KV decode kernel merges its splits.
struct MergeStatesNArgs {
  const void* states_out;   // state s, row (token, head) at out_stride_*
  const float* states_lse;  // at lse_stride_*, natural log
  void* out;                // [num_tokens, num_heads, head_dim] at merged_stride_*
  float* lse;               // optional, at merged_lse_stride_token
  i64 out_stride_state, out_stride_token, out_stride_head;
  i64 lse_stride_state, lse_stride_token;
  i64 merged_stride_token, merged_stride_head;
  i64 merged_lse_stride_token;
  i32 num_states;
  i32 num_tokens;
  i32 num_heads;
  const float* sinks;  // or null: [num_heads] logits joining each merged row once
};

}  // namespace fj
