// Split-KV paged decode (flash-decoding, docs/architecture.md#plans) for queries of a few packed
// rows: a decode step, speculative tokens, or a short chunk times the GQA group. Work items come
// from the planner (fj_plan): kDecodeRows packed rows of one request and kv head over one split of
// the key tiles they may see. Packed rows are (token, head-in-group) pairs, so the query heads
// that share a kv head share each K/V tile and fill the MMA's M dimension.
//
// A CTA of four warps streams the split's non-empty tiles of kDecodeBlockN keys through
// kDecodeStages cp.async stages; warp w takes keys [16w, 16w + 16) of every tile with an online
// softmax of its own, and the warps' states are combined at the end. Decode is bound by reading
// K and V once, so what matters is keeping enough bytes in flight: stages ahead of the
// computing one, several CTAs per SM, and splits that give every SM work.
//
// With one split the CTA writes the output. With several, each writes a float32 partial output
// and LSE to its slot; the CTA that finishes last (a counter per item group, reset by it for
// the next launch) merges the slots in split order, so the result does not depend on timing.
#pragma once

#include "fj_device.cuh"
#include "fj_ops.cuh"
#include "kernel_args.cuh"
#include "merge_states.cuh"
#include "paged_prefill.cuh"

namespace fj {

// K/V tile loads of the decode kernel (decode_swizzled_tiles). Head dims 64, 128 and 256:
// KvTileCopy into unpadded swizzled rows, its per-thread constants computed once and the
// block-table entries of the next tile read a step ahead (read_pages, then load), so that their
// latency is not in front of the copies. Otherwise (80, 96) the prefill kernel's loader into
// padded rows, which reads an entry per chunk.
// An fp8 cache (kKvFp8): the same copies of rows half as long (head_dim bytes, counted in 16-bit
// units, as are the byte strides halved) into StageLayout (unpadded and swizzled, or padded where
// the 16-bit tiles are), from which each warp reads its keys' fragments (or, for K at head dim
// 256 and at 80 and 96, converts them into the 16-bit tiles of Layout first).
// kPageMajorAllowed: KvTileCopy's (false keeps the copies by passes).
template <int kHeadDim, int kPageSize, bool kKvFp8,
          bool kSwizzled = decode_swizzled_tiles(kHeadDim), bool kPageMajorAllowed = true>
struct DecodeTileLoader {
  static constexpr int kUnit = kKvFp8 ? 2 : 1;  // cache elements per 16-bit unit
  using Layout = Swizzled128Rows<kDecodeBlockN>;
  using StageLayout = typename Select<kKvFp8, SwizzledDenseRows<kHeadDim / 16>, Layout>::Type;
  using Copy = KvTileCopy<kHeadDim / kUnit, kDecodeBlockN, kDecodeThreads, kPageSize, StageLayout,
                          kPageMajorAllowed>;
  Copy k_copy;
  Copy v_copy;
  i32 pages[Copy::kPages];

  __device__ __forceinline__ DecodeTileLoader(const unsigned short* k_cache,
                                              const unsigned short* v_cache, i64 k_head_offset,
                                              i64 v_head_offset)
      : k_copy(static_cast<int>(threadIdx.x), k_cache, k_head_offset / kUnit),
        v_copy(static_cast<int>(threadIdx.x), v_cache, v_head_offset / kUnit) {}
  __device__ __forceinline__ void read_pages(const i32* block_row, int k0, int kv_end) {
    k_copy.read_pages(pages, block_row, k0, kv_end);
  }
  // Keys [k0, k0 + kDecodeBlockN), with the entries of the last read_pages.
  __device__ __forceinline__ void load(const PagedPrefillArgs& args, unsigned short* k_tile,
                                       unsigned short* v_tile, const i32*, int k0,
                                       int kv_end) const {
    k_copy.copy(smem_address(k_tile), args.k_stride_block / kUnit, args.k_stride_slot / kUnit,
                pages, 0, k0, kv_end, last_block_of(args));
    v_copy.copy(smem_address(v_tile), args.v_stride_block / kUnit, args.v_stride_slot / kUnit,
                pages, 0, k0, kv_end, last_block_of(args));
  }
};

template <int kHeadDim, int kPageSize, bool kKvFp8, bool kPageMajorAllowed>
struct DecodeTileLoader<kHeadDim, kPageSize, kKvFp8, false, kPageMajorAllowed> {
  static constexpr int kUnit = kKvFp8 ? 2 : 1;
  using Layout = PaddedRows<kHeadDim>;
  using StageLayout = PaddedRows<kHeadDim / kUnit>;
  const unsigned short* k_cache;
  const unsigned short* v_cache;
  i64 k_head_offset;
  i64 v_head_offset;

  __device__ __forceinline__ DecodeTileLoader(const unsigned short* k, const unsigned short* v,
                                              i64 k_offset, i64 v_offset)
      : k_cache(k), v_cache(v), k_head_offset(k_offset / kUnit), v_head_offset(v_offset / kUnit) {}
  __device__ __forceinline__ void read_pages(const i32*, int, int) {}
  __device__ __forceinline__ void load(const PagedPrefillArgs& args, unsigned short* k_tile,
                                       unsigned short* v_tile, const i32* block_row, int k0,
                                       int kv_end) const {
    load_kv_tile<kHeadDim / kUnit, kPageSize>(k_tile, k_cache, args.k_stride_block / kUnit,
                                              args.k_stride_slot / kUnit, k_head_offset, block_row,
                                              0, k0, kv_end, last_block_of(args));
    load_kv_tile<kHeadDim / kUnit, kPageSize>(v_tile, v_cache, args.v_stride_block / kUnit,
                                              args.v_stride_slot / kUnit, v_head_offset, block_row,
                                              0, k0, kv_end, last_block_of(args));
  }
};

// The split partials of one decode item, as merge_rows reads them. Slot offsets fit in 32 bits:
// a plan has decode_wave slots (plan_capacity: SMs times CTAs per SM, a few thousand at most) of
// kDecodeRows * kHeadDim floats.
template <int kHeadDim>
struct DecodeSplits {
  const PagedDecodeArgs& decode;
  int partial;  // the item's first slot
  const PackedRows& block;
  int row0;

  __device__ __forceinline__ float lse(int s, int row) const {
    return __ldcg(decode.partial_lse + (partial + s) * kDecodeRows + row);
  }
  __device__ __forceinline__ float4 piece(int s, int row, int i) const {
    return __ldcg(reinterpret_cast<const float4*>(decode.partial_out +
                                                  (partial * kDecodeRows + row) * kHeadDim) +
                  i + s * (kDecodeRows * kHeadDim / 4));
  }
  __device__ __forceinline__ float sink(int row) const {
    return sink_of(decode.attention.sinks, block.head(row0 + row));
  }
  __device__ __forceinline__ unsigned short* out_row(int row) const {
    const int packed = row0 + row;
    return static_cast<unsigned short*>(decode.attention.out) +
           block.token(packed) * decode.attention.out_stride_token +
           static_cast<i64>(block.head(packed)) * decode.attention.out_stride_head;
  }
  __device__ __forceinline__ float* lse_slot(int row) const {
    const int packed = row0 + row;
    return decode.attention.lse == nullptr
               ? nullptr
               : decode.attention.lse + block.token(packed) * decode.attention.lse_stride_token +
                     block.head(packed);
  }
};

template <class Variant, int kHeadDim, bool kBF16, int kPageSize, bool kKvFp8>
__device__ void decode_item(const PagedDecodeArgs& decode, const DecodeWorkItem& item,
                            unsigned char* smem) {
  static_assert(kHeadDim % 16 == 0, "head dim must be a multiple of 16");
  static_assert(kPageSize > 0 && kPageSize % 16 == 0, "the decode kernel reads a paged cache");
  static_assert(kDecodeBlockN == kPrefillBlockN && kDecodeThreads == kPrefillThreads,
                "the decode kernel loads K/V tiles with the prefill kernel's loader");
  constexpr int kRow = prefill_smem_row_elems(kHeadDim);
  constexpr int kStages = kKvFp8 ? decode_fp8_stages(kHeadDim) : decode_stages(kHeadDim);
  constexpr int kTileElems = decode_tile_elems(kHeadDim);
  // A stage's K (or V) tile: 16-bit elements, or an fp8 cache's e4m3 bytes in 16-bit units.
  constexpr int kStageTileElems = kKvFp8 ? decode_fp8_tile_bytes(kHeadDim) / 2 : kTileElems;
  constexpr int kKSteps = kHeadDim / 16;
  constexpr int kNTilesO = kHeadDim / 8;
  constexpr int kWarps = kDecodeThreads / 32;
  static_assert(kWarps * 16 == kDecodeBlockN, "each warp takes 16 keys of a tile");

  // Page by page, except for rows of more than 128 columns of 16 bits in a kernel whose
  // variant keeps its copies by passes (kPageMajorCopies: the sharded kernels, whose document
  // decoder at head dim 256 spilled 24 bytes page by page; up to 128 they were clean).
  using Loader = DecodeTileLoader<kHeadDim, kPageSize, kKvFp8, decode_swizzled_tiles(kHeadDim),
                                  Variant::kPageMajorCopies || kHeadDim / (kKvFp8 ? 2 : 1) <= 128>;
  using Layout = typename Loader::Layout;  // of the 16-bit K/V tiles the MMAs read
  const PagedPrefillArgs& args = decode.attention;
  unsigned short* q_tile = reinterpret_cast<unsigned short*>(smem);
  // [stage][K tile, V tile]; an fp8 cache's e4m3 stages follow the one 16-bit K/V pair that
  // the warps convert their keys into, where they convert any (decode_fp8_converts).
  unsigned short* const stages = q_tile + kDecodeRows * kRow;
  unsigned short* const copy_stages =
      decode_fp8_converts(kHeadDim, kKvFp8) ? stages + 2 * kTileElems : stages;

  const Variant variant = variant_for<Variant>(args);
  const int request = item.request;
  const int kv_head = item.kv_head;
  const float scale = score_scale<kKvFp8>(args, kv_head);
  const float v_scale = value_scale<kKvFp8>(args, kv_head);
  const int row0 = item.row0;
  const PackedRows block = packed_rows_of(args, request, kv_head, row0, kDecodeRows, false);
  // The plan was made from host copies of the lengths; rows it names that the device's lengths
  // do not have are skipped (the same for every split of the item, so merges stay consistent).
  if (row0 >= block.packed_rows) return;
  const int group = block.group;
  const int packed_rows = block.packed_rows;
  const int seq_len = block.seq_len;
  const int q_lo = block.q_lo();
  const int q_hi = block.q_hi();
  const int head_lo = block.head_lo();
  const int head_hi = block.head_hi();

  load_q_rows<kHeadDim, kDecodeRows, kDecodeThreads>(q_tile, args, block);
  cp_async_commit();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quad_row = lane / 4;
  const int quad_col = lane % 4;
  ThreadRows<Variant> rows;                          // packed rows quad_row and quad_row + 8
  const float factor = exp2_factor<Variant>(scale);  // of exp2's argument
  rows.set(variant, args.params, request, block, row0 + quad_row);

  const i32* block_row = args.block_table + static_cast<i64>(request) * args.block_table_stride;
  const unsigned short* k_cache = static_cast<const unsigned short*>(args.k_cache);
  const unsigned short* v_cache = static_cast<const unsigned short*>(args.v_cache);
  const i64 k_head_offset = static_cast<i64>(kv_head) * args.k_stride_head;
  const i64 v_head_offset = static_cast<i64>(kv_head) * args.v_stride_head;
  const int kv_end = kv_end_of<kPageSize>(args, seq_len);

  // This split's share of the tiles the rows may see: equal parts in tile order.
  const KvRange range =
      kv_range_for_heads(variant, args.params, request, head_lo, head_hi, q_lo, q_hi);
  const int visible_end = min(range.hi, kv_end);
  const int first_tile = range.lo / kDecodeBlockN;
  const int end_tile =
      range.lo < visible_end ? (visible_end + kDecodeBlockN - 1) / kDecodeBlockN : first_tile;
  const int per_split = (end_tile - first_tile + item.num_splits - 1) / item.num_splits;
  const int split_first = min(first_tile + item.split * per_split, end_tile);
  const int split_end = min(split_first + per_split, end_tile);

  // Q's fragments are read from shared memory at each tile: the few ldmatrix cost nothing in a
  // kernel bound by the K/V reads, and registers held for Q would leave less for the copies.
  // Q's copies are the oldest cp.async group, so the wait for the first K/V tile covers them:
  // their latency overlaps the listing and the first tiles' copies.
  const unsigned short* q_warp = q_tile + (lane % 16) * kRow + (lane / 16) * 8;
  // An fp8 cache at head dims 64 and 128 (where decode_fp8_converts is false): K's and V's
  // fragments come from the e4m3 stage in registers (no 16-bit tiles), and Q's, in K's order,
  // stay in registers from the item's first tile (32 at head dim 128; at 256 they would not fit,
  // and V's fragments so read took the registers to 255 and spilled).
  constexpr bool kStageFragments = kKvFp8 && !decode_fp8_converts(kHeadDim, kKvFp8);
  constexpr int kLaneBytes = kHeadDim / 4;  // of a K row, per quad lane
  const unsigned short* const q_lane = q_tile + quad_row * kRow + quad_col * kLaneBytes;
  u32 q_frag[kStageFragments ? kKSteps : 1][4];
  bool q_ready = false;

  float o[kNTilesO][4];
  for (int j = 0; j < kNTilesO; ++j)
    o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  const float neg_inf = negative_infinity();
  float row_max[2] = {neg_inf, neg_inf};
  float row_sum[2] = {0.0f, 0.0f};

  // Non-empty tiles of the current batch of kDecodeThreads tiles, in order: tile index * 4 +
  // its TileClass. Classifying a batch first lets the loads run ahead over Empty tiles.
  __shared__ int tile_list[kDecodeThreads];
  __shared__ int warp_counts[kWarps];

  Loader loader(k_cache, v_cache, k_head_offset, v_head_offset);
  // This lane's ldmatrix rows in a K tile (B operand) and a V tile (transposed), at chunk 0 or 1.
  const u32 k_lane_bytes = Layout::bytes(warp * 16 + lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
  const u32 v_lane_bytes = Layout::bytes(warp * 16 + lane % 8 + ((lane / 8) % 2) * 8, lane / 16);
  const auto load_tile = [&](int entry, int stage) {
    unsigned short* k_tile = copy_stages + stage * 2 * kStageTileElems;
    loader.load(args, k_tile, k_tile + kStageTileElems, block_row, (entry >> 2) * kDecodeBlockN,
                kv_end);
  };
  const auto read_pages = [&](int entry) {
    loader.read_pages(block_row, (entry >> 2) * kDecodeBlockN, kv_end);
  };

  for (int batch = split_first; batch < split_end; batch += kDecodeThreads) {
    __syncthreads();  // the previous batch's list and stages are no longer read
    {
      const int own = batch + static_cast<int>(threadIdx.x);
      TileClass own_class = TileClass::Empty;
      if (own < split_end) {
        const int own_k0 = own * kDecodeBlockN;
        own_class = classify_tile<kDecodeBlockN, kPageSize>(variant, args, block_row, request,
                                                            head_lo, head_hi, q_lo, q_hi, own_k0,
                                                            min(own_k0 + kDecodeBlockN, kv_end));
      }
      const bool keep = own_class != TileClass::Empty;
      const unsigned ballot = __ballot_sync(0xffffffffu, keep);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int offset = __popc(ballot & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w)
        offset += warp_counts[w];
      if (keep) tile_list[offset] = own * 4 + static_cast<int>(own_class);
    }
    __syncthreads();
    int count = 0;
    for (int w = 0; w < kWarps; ++w)
      count += warp_counts[w];

    for (int s = 0; s < kStages - 1; ++s) {
      if (s < count) {
        read_pages(tile_list[s]);
        load_tile(tile_list[s], s);
      }
      cp_async_commit();
    }
    if (kStages - 1 < count) read_pages(tile_list[kStages - 1]);
    for (int i = 0; i < count; ++i) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile i has landed for every thread; tile i - 1's stage is free
      if (i + kStages - 1 < count) {
        load_tile(tile_list[i + kStages - 1], (i + kStages - 1) % kStages);
        if (i + kStages < count) read_pages(tile_list[i + kStages]);
      }
      cp_async_commit();

      const int entry = tile_list[i];
      const int k0 = (entry >> 2) * kDecodeBlockN;
      const TileClass tile_class = static_cast<TileClass>(entry & 3);
      const unsigned short* k_tile = stages + (kKvFp8 ? 0 : (i % kStages) * 2 * kTileElems);
      const unsigned short* v_tile = k_tile + kTileElems;
      const u32 k_stage = smem_address(copy_stages + (i % kStages) * 2 * kStageTileElems);
      if constexpr (kStageFragments) {
        if (!q_ready) {  // Q has landed with the item's first tile
          for (int ks = 0; ks < kKSteps; ++ks) {
            const uint2 top = *reinterpret_cast<const uint2*>(q_lane + 4 * ks);
            const uint2 bottom = *reinterpret_cast<const uint2*>(q_lane + 8 * kRow + 4 * ks);
            q_frag[ks][0] = top.x;
            q_frag[ks][1] = bottom.x;
            q_frag[ks][2] = top.y;
            q_frag[ks][3] = bottom.y;
          }
          q_ready = true;
        }
      }
      if constexpr (decode_fp8_converts(kHeadDim, kKvFp8)) {
        // The warp's 16 keys of K and V into the 16-bit tiles: only this warp reads them, and
        // it has finished the previous tile's.
        using StageLayout = typename Loader::StageLayout;
        constexpr int kChunks = kHeadDim / 16;  // 16-byte chunks of an e4m3 row
        const u32 v_stage = k_stage + kStageTileElems * 2;
        constexpr u32 kItems = 16 * kChunks;
        const u32 k_to = smem_address(k_tile);
        const u32 v_to = smem_address(v_tile);
#pragma unroll
        for (u32 step = 0; step < (kItems + 31) / 32; ++step) {
          // Unsigned: with kChunks dividing 32, the row and chunk are shifts of the lane.
          const u32 c = e4m3_item<kChunks>(static_cast<u32>(lane)) + 32 * step;
          if (kItems % 32 != 0 && c >= kItems) break;
          const u32 row = static_cast<u32>(warp) * 16u + c / kChunks;
          const u32 chunk = c % kChunks;
          const u32 from = StageLayout::unsigned_bytes(row, chunk);
          const u32 low = Layout::unsigned_bytes(row, 2 * chunk);
          const u32 high = Layout::unsigned_bytes(row, 2 * chunk + 1);
          convert_e4m3_chunk<kBF16>(k_stage + from, k_to + low, k_to + high);
          convert_e4m3_chunk<kBF16>(v_stage + from, v_to + low, v_to + high);
        }
        __syncwarp();
      }
      const u32 k_lane = smem_address(k_tile) + k_lane_bytes;
      const u32 v_lane = smem_address(v_tile) + v_lane_bytes;

      // S = Q K^T for the 16 rows and this warp's 16 keys.
      float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      if constexpr (kStageFragments) {
        // K's B fragments straight from the e4m3 stage: lane (quad_row, quad_col) reads bytes
        // [quad_col * kLaneBytes, + kLaneBytes) of keys warp * 16 + 8 j + quad_row; word ks of
        // them converts into k-step ks's b0 (bytes 0, 1) and b1 (bytes 2, 3). The sum over k
        // does not care which dims a k-step takes, as long as Q's A fragment takes the same:
        // q_frag holds dims (d, d + 1) and (d + 2, d + 3), d = quad_col * kLaneBytes + 4 ks.
        using StageLayout = typename Loader::StageLayout;
        for (int h = 0; h < kLaneBytes / 16; ++h) {
          u32 words[2][4];
          for (int j = 0; j < 2; ++j) {
            const u32 row = static_cast<u32>(warp * 16 + 8 * j + quad_row);
            const u32 chunk = static_cast<u32>(quad_col * (kLaneBytes / 16) + h);
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(words[j][0]), "=r"(words[j][1]), "=r"(words[j][2]),
                           "=r"(words[j][3])
                         : "r"(k_stage + StageLayout::unsigned_bytes(row, chunk)));
          }
          for (int t = 0; t < 4; ++t) {
            for (int j = 0; j < 2; ++j) {
              u32 b0;
              u32 b1;
              e4m3x4_to_16x2<kBF16>(words[j][t], b0, b1);
              mma_16816<kBF16>(s[j], q_frag[4 * h + t], b0, b1);
            }
          }
        }
      } else {
        for (int ks = 0; ks < kKSteps; ++ks) {
          u32 a[4];
          ldmatrix_x4(a, q_warp + ks * 16);
          u32 b[4];
          ldmatrix_x4(b, Layout::pair_address(k_lane, ks));
          mma_16816<kBF16>(s[0], a, b[0], b[1]);
          mma_16816<kBF16>(s[1], a, b[2], b[3]);
        }
      }

      const bool check_elements = checks_elements(tile_class) || k0 + kDecodeBlockN > kv_end;
      float tile_max[2] = {neg_inf, neg_inf};
      const int key0 = k0 + warp * 16 + quad_col * 2;
      if constexpr (Variant::kRolledMask) {
        // The element part is a loop: one loop over the elements into bits (element_bits.cuh).
        const KeyTerms<Variant>* const no_staged = nullptr;
        const auto bits = tile_element_bits<2, false>(check_elements, variant, args.params, rows,
                                                      key0, kv_end, no_staged);
        score_and_mask<2>(variant, args.params, scale, rows, key0, kv_end, check_elements, s,
                          tile_max, no_staged, bits);
      } else {
        score_and_mask<2>(variant, args.params, scale, rows, key0, kv_end, check_elements, s,
                          tile_max);
      }
      if (has_absent_keys(tile_class)) {
        mask_absent_keys<2, Variant>(scale,
                                     PresentPages<kPageSize>{absent_pages<kDecodeBlockN, kPageSize>(
                                                                 args, block_row, k0, kv_end),
                                                             k0 % kPageSize + (key0 - k0)},
                                     s, tile_max);
      }
      float max_scaled[2];
      for (int r = 0; r < 2; ++r) {
        const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]));
        max_scaled[r] = new_max == neg_inf ? 0.0f : new_max * kLog2e;
        const float rescale = exp2f(row_max[r] * kLog2e - max_scaled[r]);
        row_max[r] = new_max;
        row_sum[r] *= rescale;
        for (int j = 0; j < kNTilesO; ++j) {
          o[j][2 * r] *= rescale;
          o[j][2 * r + 1] *= rescale;
        }
      }
      for (int j = 0; j < 2; ++j) {
        for (int e = 0; e < 4; ++e) {
          const float p = exp2f(s[j][e] * factor - max_scaled[e / 2]);
          s[j][e] = p;
          row_sum[e / 2] += p;
        }
      }

      // O += P V over the warp's 16 keys: one k16 step.
      u32 p_frag[4];
      p_frag[0] = pack_2x16<kBF16>(s[0][0], s[0][1]);
      p_frag[1] = pack_2x16<kBF16>(s[0][2], s[0][3]);
      p_frag[2] = pack_2x16<kBF16>(s[1][0], s[1][1]);
      p_frag[3] = pack_2x16<kBF16>(s[1][2], s[1][3]);
      if constexpr (kStageFragments) {
        // ldmatrix.trans of the e4m3 stage as 16-bit units: matrix m holds keys 8 (m % 2) + 0..7
        // by the unit pairs of dims chunk 2 dp + m / 2, and lane (quad_row, quad_col) receives
        // keys 2 quad_col, + 1 at dims 2 quad_row, + 1 of them: bytes (k, d), (k, d + 1),
        // (k + 1, d), (k + 1, d + 1). Its pairs apart (e4m3x4_to_16x2<kApart>) are B fragments
        // for dim d and for d + 1: o[2 c] gathers chunk c's even dims, o[2 c + 1] its odd ones
        // (the epilogue puts them back in order).
        using StageLayout = typename Loader::StageLayout;
        const u32 v_stage = k_stage + kStageTileElems * 2;
        const u32 v_row = static_cast<u32>(warp * 16 + lane % 8 + ((lane / 8) % 2) * 8);
        for (int dp = 0; dp < kNTilesO / 4; ++dp) {
          u32 b[4];
          ldmatrix_x4_trans(b, v_stage + StageLayout::unsigned_bytes(
                                             v_row, static_cast<u32>(2 * dp + lane / 16)));
          for (int m = 0; m < 2; ++m) {
            u32 even[2];
            u32 odd[2];
            e4m3x4_to_16x2<kBF16, true>(b[2 * m], even[0], odd[0]);
            e4m3x4_to_16x2<kBF16, true>(b[2 * m + 1], even[1], odd[1]);
            mma_16816<kBF16>(o[4 * dp + 2 * m], p_frag, even[0], even[1]);
            mma_16816<kBF16>(o[4 * dp + 2 * m + 1], p_frag, odd[0], odd[1]);
          }
        }
      } else {
        for (int dp = 0; dp < kNTilesO / 2; ++dp) {
          u32 b[4];
          ldmatrix_x4_trans(b, Layout::pair_address(v_lane, dp));
          mma_16816<kBF16>(o[2 * dp], p_frag, b[0], b[1]);
          mma_16816<kBF16>(o[2 * dp + 1], p_frag, b[2], b[3]);
        }
      }
    }
    cp_async_wait<0>();  // only empty groups can be left; keeps the count simple per batch
  }
  cp_async_wait<0>();  // Q's copies, where no tile was listed

  // Combine the four warps' states through shared memory (the stages are free now). Each warp
  // publishes its rows' max and sum; each thread then scales its accumulators by its warp's
  // share of the row's total and stores them in fragment order (a warp's stores are one
  // contiguous run: no bank conflicts), and warp w sums the four warps' fragments of the output
  // column tiles j = w, w + kWarps, ... (contiguous loads again).
  __syncthreads();
  static_assert(kWarps * kNTilesO * 2 * 32 * 8 + 2 * kWarps * kDecodeRows * 4 <=
                    paged_decode_smem_bytes(kHeadDim, kKvFp8) - 128 - kDecodeRows * kRow * 2,
                "the combine's scratch fits in the stages");
  float2* const warp_o = reinterpret_cast<float2*>(stages);  // [warp][j][r][lane]
  float* const warp_m = reinterpret_cast<float*>(warp_o + kWarps * kNTilesO * 2 * 32);
  float* const warp_l = warp_m + kWarps * kDecodeRows;  // [warp][row], as warp_m
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(row_sum[r]);
    if (quad_col == 0) {
      warp_m[warp * kDecodeRows + quad_row + r * 8] = row_max[r];
      warp_l[warp * kDecodeRows + quad_row + r * 8] = total;
    }
  }
  __syncthreads();
  float row_lse[2];
  for (int r = 0; r < 2; ++r) {
    const int row = quad_row + r * 8;
    float m = neg_inf;
    for (int w = 0; w < kWarps; ++w)
      m = fmaxf(m, warp_m[w * kDecodeRows + row]);
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float weight =
          m == neg_inf ? 0.0f : exp2f((warp_m[w * kDecodeRows + row] - m) * kLog2e);
      total += weight * warp_l[w * kDecodeRows + row];
    }
    const float own = m == neg_inf ? 0.0f : exp2f((row_max[r] - m) * kLog2e);
    // The head's sink joins the row here when the item is the row's only split, else in the
    // merge: split partials leave it out, so that it is counted once.
    const float sink = item.num_splits == 1 ? sink_of(args.sinks, block.head(row0 + row)) : neg_inf;
    const RowFinish finished = finish_row(m, total, sink);
    const float share = own * finished.scale * v_scale;
    row_lse[r] = finished.lse;
    for (int j = 0; j < kNTilesO; ++j) {
      warp_o[((warp * kNTilesO + j) * 2 + r) * 32 + lane] =
          make_float2(o[j][2 * r] * share, o[j][2 * r + 1] * share);
    }
  }
  __syncthreads();
  constexpr int kOwnTiles = (kNTilesO + kWarps - 1) / kWarps;
  static_assert(!kStageFragments || kNTilesO % (2 * kWarps) == 0, "each warp takes whole chunks");
  // The output column tile of the warp's t-th: tiles warp, warp + kWarps, ...; with V's
  // fragments from registers, chunks (tile pairs 2 c, 2 c + 1) warp, warp + kWarps, ...
  const auto own_tile = [&](int t) {
    return kStageFragments ? 2 * (warp + (t / 2) * kWarps) + t % 2 : warp + t * kWarps;
  };
  float2 result[kOwnTiles][2];
  for (int t = 0; t < kOwnTiles; ++t) {
    const int j = own_tile(t);
    for (int r = 0; r < 2; ++r) {
      float2 sum = make_float2(0.0f, 0.0f);
      if (j < kNTilesO) {
        for (int w = 0; w < kWarps; ++w) {
          const float2 x = warp_o[((w * kNTilesO + j) * 2 + r) * 32 + lane];
          sum.x += x.x;
          sum.y += x.y;
        }
      }
      result[t][r] = sum;
    }
  }

  // Output rows: those inside the request only.
  unsigned short* const out = static_cast<unsigned short*>(args.out);
  const auto out_row = [&](int row) {
    const int packed = row0 + row;
    return out + block.token(packed) * args.out_stride_token +
           static_cast<i64>(block.head(packed)) * args.out_stride_head;
  };
  const auto lse_slot = [&](int row) -> float* {
    const int packed = row0 + row;
    return args.lse + block.token(packed) * args.lse_stride_token + block.head(packed);
  };
  const int valid_rows = min(kDecodeRows, packed_rows - row0);
  if (item.num_splits == 1) {
    for (int r = 0; r < 2; ++r) {
      const int row = quad_row + r * 8;
      if (row >= valid_rows) continue;
      u32* const dst = reinterpret_cast<u32*>(out_row(row));
      if constexpr (kStageFragments) {
        // Tiles 2 c and 2 c + 1 hold dims 16 c + 4 quad_col + (0, 2) and + (1, 3).
        for (int t = 0; t < kOwnTiles; t += 2) {
          const int d = own_tile(t) * 8 + quad_col * 4;
          *reinterpret_cast<uint2*>(dst + d / 2) =
              make_uint2(pack_2x16<kBF16>(result[t][r].x, result[t + 1][r].x),
                         pack_2x16<kBF16>(result[t][r].y, result[t + 1][r].y));
        }
      } else {
        for (int t = 0; t < kOwnTiles; ++t) {
          const int j = own_tile(t);
          if (j < kNTilesO) {
            dst[(j * 8 + quad_col * 2) / 2] = pack_2x16<kBF16>(result[t][r].x, result[t][r].y);
          }
        }
      }
      if (args.lse != nullptr && warp == 0 && quad_col == 0) *lse_slot(row) = row_lse[r];
    }
    return;
  }

  // Several splits: publish this one (its rows inside the request), and merge if it is the
  // last of its group.
  const i64 slot = item.partial + item.split;
  for (int r = 0; r < 2; ++r) {
    const int row = quad_row + r * 8;
    if (row >= valid_rows) continue;
    float2* const dst =
        reinterpret_cast<float2*>(decode.partial_out + (slot * kDecodeRows + row) * kHeadDim);
    if constexpr (kStageFragments) {
      for (int t = 0; t < kOwnTiles; t += 2) {
        const int d = own_tile(t) * 8 + quad_col * 4;
        *reinterpret_cast<float4*>(dst + d / 2) =
            make_float4(result[t][r].x, result[t + 1][r].x, result[t][r].y, result[t + 1][r].y);
      }
    } else {
      for (int t = 0; t < kOwnTiles; ++t) {
        const int j = own_tile(t);
        if (j < kNTilesO) dst[(j * 8 + quad_col * 2) / 2] = result[t][r];
      }
    }
    if (warp == 0 && quad_col == 0) decode.partial_lse[slot * kDecodeRows + row] = row_lse[r];
  }
  __threadfence();  // the partial is visible device-wide before the counter says so
  __syncthreads();
  __shared__ int is_last;
  if (threadIdx.x == 0) {
    is_last = atomicAdd(&decode.merge_counters[item.merge], 1) == item.num_splits - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // order the reads of the other splits' partials after the counter

  // Merge in split order (merge_rows): the same sums in the same order whichever split finishes
  // last. Its scratch is the stages (every thread is past the combine).
  const DecodeSplits<kHeadDim> splits{decode, item.partial, block, row0};
  merge_rows<kHeadDim, kBF16>(splits, item.num_splits, valid_rows,
                              reinterpret_cast<float*>(stages));
  if (threadIdx.x == 0) decode.merge_counters[item.merge] = 0;  // ready for the next launch
}

// The kernel: a persistent grid whose CTAs take the work list's items in turn.
template <class Variant, int kHeadDim, bool kBF16, int kPageSize, bool kKvFp8 = false>
__device__ void paged_decode(const PagedDecodeArgs& args) {
  extern __shared__ __align__(16) unsigned char fj_decode_smem[];
  // Tiles start on a 128-byte line (paged_decode_smem_bytes has room for the shift).
  unsigned char* const smem = fj_decode_smem + shared_align_shift<128>(fj_decode_smem);
  const int count = args.work_counts->decode;
  for (int i = blockIdx.x; i < count; i += gridDim.x) {
    const DecodeWorkItem item = args.work_items[i];
    __syncthreads();  // every warp is done with the previous item's shared memory
    decode_item<Variant, kHeadDim, kBF16, kPageSize, kKvFp8>(args, item, smem);
  }
}

}  // namespace fj
