// Paged prefill attention on Hopper (sm_90a) with warpgroup MMA, for head dims 64, 128, 256:
// the contract, the hooks and the numerics are those of paged_prefill.cuh, only the tiling
// differs. One CTA computes kWgmmaBlockM packed query rows of one request against one kv head
// with three warpgroups: a producer copies K/V tiles and two consumers (64 rows each) compute.
// - Q, K and V live in shared memory in the 128-byte-swizzled layout of fj_wgmma.cuh; S = Q K^T
//   reads both operands from there, O += P V takes P from registers (the S accumulator, rounded
//   to 16 bits, is already in the A-operand layout) and V from shared memory.
// - The consumers first list the K/V tiles the CTA visits (inside kv_range, not Empty, with
//   their class) into shared memory. The producer then gathers the listed tiles from the pages
//   (cp.async) into a ring of wgmma_stages() K/V stages; an mbarrier per stage says when a stage
//   is full (the producer arrives once its copies have landed) and another when both
//   consumers are done with it. The consumers never wait for each other, so one's softmax runs
//   beside the other's MMAs. Key terms that read arrays (doc[b, kv]) go through the ring too:
//   the producer loads them and stores them beside the stage (wgmma_key_term_slots).
// - Each consumer also overlaps its own work: S_i = Q K_i^T runs on the tensor cores with
//   O += P_{i-1} V_{i-1}, and the softmax of S_i with the latter.
#pragma once

#include "fj_wgmma.cuh"
#include "paged_prefill.cuh"

namespace fj {

// What the roles share, at namespace scope (a static __shared__ array in the block function
// would exist once per role's instantiation; the translation unit holds this one kernel).
// Stage s of the K/V ring is full when mbarrier s completes a phase (the producer's copies
// have landed), free when mbarrier kWgmmaMaxStages + s does (both consumers are done reading it).
__shared__ __align__(8) unsigned long long fj_wgmma_barriers[4 * kWgmmaMaxStages];
__shared__ int fj_wgmma_tile_list[kWgmmaTileList];  // tile * 4 + TileClass
__shared__ int fj_wgmma_warp_counts[(kWgmmaThreads - kWgmmaProducerThreads) / kWarpThreads];
// A block's kv range, computed by one role for the other, one slot per block parity
// (KvPipeline).
__shared__ KvRange fj_wgmma_kv_range[2];

// Which role computes a block's kv range: the consumers (0, the default build) or the producer
// (1). The runtime compiles the second where ptxas's report on the first shows serialized wgmma
// or spills, and keeps the better (KernelSpec::fallbacks, compile_spec): the range's
// interval code beside the consumers' accumulators made ptxas serialize the Longformer mask's
// wgmma ("WG.AR in divergent path"), and in the producer's 72 registers it spills for long
// any/all chains; neither can be told from the mask.
#ifndef FJ_WGMMA_PRODUCER_KV_RANGE
#define FJ_WGMMA_PRODUCER_KV_RANGE 0
#endif
// 1: 64-key tiles whatever Variant::kWideKeyTiles says. The runtime's fallbacks for a variant
// that takes 128-key tiles at head dim 128, after the producer's kv range: the wider S spills
// for some masks that were clean at 64 (generated ones of issue 29's [cliffs-full]).
#ifndef FJ_WGMMA_NARROW_KEY_TILES
#define FJ_WGMMA_NARROW_KEY_TILES 0
#endif

// The K/V ring as each thread sees it: `tiles` counts the tiles that have gone through it, so
// the i-th tile overall uses stage i % stages in phase i / stages, for producer and
// consumers alike, across blocks of a persistent launch.
//
// With four stages one ring holds each tile's K and V: full once the producer's copies of both
// have landed (it waits for them, a tile behind), empty once both consumers' PV of it is done.
// With two (head dim 256; kSplitRings) K and V have rings of their own: the producer arrives on
// K's and V's full barriers as its copies land (cp.async.mbarrier.arrive, never waiting for
// them), a consumer frees K's stage once its S is done (after the softmax where key terms are
// staged beside K) and V's after its PV; so K of the next tile is copied while V of this one
// is still read. full() and empty() are K's barriers there.
struct KvPipeline {
  u32 tiles = 0;
  u32 blocks = 0;  // blocks begun, for the kv range's slot
  __device__ __forceinline__ u32 full(int stage) const {
    return smem_address(fj_wgmma_barriers) + 8u * stage;
  }
  __device__ __forceinline__ u32 empty(int stage) const {
    return smem_address(fj_wgmma_barriers) + 8u * (kWgmmaMaxStages + stage);
  }
  __device__ __forceinline__ u32 v_full(int stage) const {
    return smem_address(fj_wgmma_barriers) + 8u * (2 * kWgmmaMaxStages + stage);
  }
  __device__ __forceinline__ u32 v_empty(int stage) const {
    return smem_address(fj_wgmma_barriers) + 8u * (3 * kWgmmaMaxStages + stage);
  }
};

// Whether a kernel's K and V take rings of their own (KvPipeline): with two stages, where one
// ring keeps a single tile in flight (causal hd256 ran 15-17% faster split, at four stages 3-13%
// slower, bench/history/2026-11-27.md). The fp8 producer's converted parts keep one ring.
FJ_HD constexpr bool split_kv_rings(int stages, bool kv_fp8) {
  return stages < 3 && !kv_fp8;
}

// Keys per K/V tile of a variant's kernel (wgmma_block_n).
template <class Variant, int kHeadDim, bool kKvFp8>
FJ_HD constexpr int wgmma_variant_block_n() {
  return wgmma_block_n(
      kHeadDim, Variant::kElementOperations, kKvFp8,
      wgmma_wide_allowed(kHeadDim, Variant::kWideKeyTiles, Variant::kNarrowKeyTilesHd64) &&
          FJ_WGMMA_NARROW_KEY_TILES == 0);
}

// Where the key terms read arrays (Variant::kKeyTermsLoad: doc[b, kv]) or hold a loop
// (kKeyTermsLoop; kStagedKeyTerms) the producer stages each tile's in shared memory beside its
// K/V stage, so that a consumer's Partial tile reads them there instead of waiting on global
// loads, or running the loop per key it meets, between its S and its softmax: one slot per key
// of each stage, else one unused slot.
template <class Variant, int kHeadDim, bool kKvFp8>
FJ_HD constexpr int wgmma_key_term_slots() {
  constexpr int block_n = wgmma_variant_block_n<Variant, kHeadDim, kKvFp8>();
  return kStagedKeyTerms<Variant, true> ? wgmma_stages(kHeadDim, block_n) * block_n : 1;
}

template <class Variant, int kHeadDim, bool kBF16, int kPageSize, bool kKvFp8, bool kProducer>
__device__ __forceinline__ void prefill_block_sm90(const PagedPrefillArgs& args, const int request,
                                                   const int kv_head, const int row0,
                                                   KvPipeline& pipe, KeyTerms<Variant>* key_terms) {
  static_assert(kHeadDim % kChunkColumns == 0,
                "the wgmma kernel takes head dims in 64-column chunks");
  static_assert(kPageSize % 16 == 0, "page size must be a multiple of 16 (0: contiguous)");
  constexpr int kBlockM = kWgmmaBlockM;
  constexpr int kBlockN = wgmma_variant_block_n<Variant, kHeadDim, kKvFp8>();
  constexpr int kSAccumulators = kBlockN / kChunkColumns;  // m64n64 accumulators of S
  constexpr int kStages = wgmma_stages(kHeadDim, kBlockN);
  constexpr int kConsumerThreads = kWgmmaThreads - kWgmmaProducerThreads;
  constexpr int kConsumerWarps = kConsumerThreads / kWarpThreads;
  constexpr int kQBytes = kBlockM * kHeadDim * 2;
  constexpr int kTileBytes = kBlockN * kHeadDim * 2;  // one K or V tile
  constexpr int kKSteps = kHeadDim / 16;              // k16 steps of Q·K^T
  constexpr int kOChunks = kHeadDim / kChunkColumns;  // 64-column accumulators of O
  constexpr int kKeyBatch = kHeadDim <= 128 && kBlockN == 64 ? 4 : 1;  // score_and_mask's
  constexpr bool kStageKeyTerms = kStagedKeyTerms<Variant, true>;
  constexpr bool kSplitRings = split_kv_rings(kStages, kKvFp8);

  extern __shared__ __align__(16) unsigned char fj_prefill_smem[];
  // The swizzle pattern repeats every 1024 bytes: tiles start on such a boundary.
  unsigned char* const smem = fj_prefill_smem + shared_align_shift<1024>(fj_prefill_smem);
  unsigned short* const q_tile = reinterpret_cast<unsigned short*>(smem);
  // Stage s: K at kv_stages + s * 2 * kTileBytes, V kTileBytes after it.
  const u32 stages_address = smem_address(smem + kQBytes);
  int* const tile_list = fj_wgmma_tile_list;
  int* const warp_counts = fj_wgmma_warp_counts;

  const Variant variant = variant_for<Variant>(args);
  const PackedRows block =
      packed_rows_of(args, request, kv_head, row0, kBlockM, kPageSize == 0, Variant::kUsesHead);
  if (row0 >= block.packed_rows) return;
  const int key_begin = block.key_begin;
  const int seq_len = block.seq_len;
  const int q_lo = block.q_lo();
  const int q_hi = block.q_hi();
  const int head_lo = block.head_lo();
  const int head_hi = block.head_hi();
  const int kv_end = kv_end_of<kPageSize>(args, seq_len);
  const i32* block_row =
      kPageSize == 0 ? nullptr
                     : args.block_table + static_cast<i64>(request) * args.block_table_stride;

  // Q, by every thread; visible to the consumers' wgmma after the listing's barriers. Up to
  // head dim 128 its copies land while the first listing round classifies (before its first
  // barrier); at 256 before the listing (ptxas spills otherwise).
  constexpr bool kQDuringListing = kHeadDim <= 128;
  load_q_rows<kHeadDim, kBlockM, kWgmmaThreads, Swizzled128Rows<kBlockM>, kPageSize == 0>(
      q_tile, args, block);
  if constexpr (!kQDuringListing) {
    cp_async_wait_all();
    fence_proxy_async_shared();
  }

  // Only the tiles of the keys the mask's kv range admits are visited
  // (docs/architecture.md#tile-analysis); inside it, classify() drops Empty tiles from the list.
  // One role computes the range (FJ_WGMMA_PRODUCER_KV_RANGE) and hands it to the other through
  // shared memory. A slot is written again two blocks later, after a barrier that the reading
  // role reaches only once it has read it.
  constexpr bool kRangeByProducer = FJ_WGMMA_PRODUCER_KV_RANGE != 0;
  KvRange range{};
  const int range_slot = static_cast<int>(pipe.blocks++ % 2);
  if constexpr (kProducer == kRangeByProducer) {
    range = kv_range_for_heads(variant, args.params, request, head_lo, head_hi, q_lo, q_hi);
    if (threadIdx.x == (kRangeByProducer ? 0 : kWgmmaProducerThreads)) {
      fj_wgmma_kv_range[range_slot] = range;
    }
  }
  cta_barrier();
  if constexpr (kProducer != kRangeByProducer) range = fj_wgmma_kv_range[range_slot];
  const int visible_end = min(range.hi, kv_end);
  const int first_tile = range.lo / kBlockN;
  const int end_tile = range.lo < visible_end ? (visible_end + kBlockN - 1) / kBlockN : first_tile;

  const int warp = static_cast<int>(threadIdx.x) / kWarpThreads;
  const int lane = static_cast<int>(threadIdx.x) % kWarpThreads;

  // Consumer state (unused by the producer's instantiation).
  // 0..7: rows 16 * consumer_warp of the block; consumer 0, 1: rows 64 * consumer.
  const int consumer_warp = warp - kWgmmaProducerThreads / kWarpThreads;
  // Through a shuffle from lane 0, which ptxas knows to be one value per warp: the consumer's
  // Q descriptors are then built in uniform registers, where a per-thread value took five
  // instructions per S wgmma (64-bit adds and two register moves to the uniform datapath).
  const int consumer =
      __shfl_sync(0xffffffffu, consumer_warp / (kWarpgroupThreads / kWarpThreads), 0);
  const int quad_row = lane / 4;  // row within the 8-row half of the warp's 16 rows
  const int quad_col = lane % 4;
  // This thread's two packed rows, quad_row and quad_row + 8, with the hooks' terms (unused by
  // the producer).
  ThreadRows<Variant> rows;
  const float scale = score_scale<kKvFp8>(args, kv_head);
  const float factor = exp2_factor<Variant>(scale);  // of exp2's argument
  float o[kOChunks][kAccumulatorFloats];
  const float neg_inf = negative_infinity();
  float row_max[2] = {neg_inf, neg_inf};
  float row_sum[2] = {0.0f, 0.0f};
  if constexpr (!kProducer) {
    rows.set(variant, args.params, request, block, row0 + consumer_warp * 16 + quad_row);
    for (int c = 0; c < kOChunks; ++c)
      for (int e = 0; e < kAccumulatorFloats; ++e)
        o[c][e] = 0.0f;
  }
  // A mask that reads q and kv only through q - kv (Variant::kDiagonal) and not the head takes
  // its Partial tiles' bits from one evaluation per diagonal: the warp's rows span at most
  // kDiagonalSpan + 1 positions (16 packed rows), so a tile's diagonals fit kDiagonalWords
  // words, bit t standing for q - kv == diagonal_lo - k0 - (kBlockN - 1) + t. Row r's bits
  // start diagonal_shift[r] into them (DiagonalWindow). A warp whose rows span more
  // (not seen: rows past the request repeat its last) checks elements.
  constexpr bool kDiagonalMask = Variant::kDiagonal && !Variant::kUsesHead &&
                                 Variant::kElementOperations >= kMaskedSelectMinOperations;
  constexpr int kDiagonalSpan = 25;  // keeps each row's shift under 32
  constexpr int kDiagonalWords = (kBlockN + 24) / 32 + 1;
  int diagonal_lo = 0;
  int diagonal_shift[2] = {0, 0};
  bool diagonal = false;
  if constexpr (kDiagonalMask && !kProducer) {
    int lo = min(rows.q[0], rows.q[1]);
    int hi = max(rows.q[0], rows.q[1]);
    for (int offset = 16; offset > 0; offset /= 2) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
    }
    diagonal_lo = lo;
    diagonal = hi - lo <= kDiagonalSpan;
    for (int r = 0; r < 2; ++r)
      diagonal_shift[r] = rows.q[r] - lo + 6 - 2 * quad_col;
  }

  for (int next = first_tile; next < end_tile;) {
    // List the next tiles to visit, in order: each consumer thread classifies one tile per
    // round; the producer keeps step with the barriers.
    int listed = 0;
    while (next < end_tile && listed + kConsumerThreads <= kWgmmaTileList) {
      const int own = next + static_cast<int>(threadIdx.x) - kWgmmaProducerThreads;
      TileClass own_class = TileClass::Empty;
      if (!kProducer && own < end_tile) {
        const int own_k0 = own * kBlockN;
        own_class =
            classify_tile<kBlockN, kPageSize>(variant, args, block_row, request, head_lo, head_hi,
                                              q_lo, q_hi, own_k0, min(own_k0 + kBlockN, kv_end));
      }
      if (kQDuringListing && next == first_tile) {
        cp_async_wait_all();
        fence_proxy_async_shared();
      }
      const bool keep = own_class != TileClass::Empty;
      const unsigned kept = __ballot_sync(0xffffffffu, keep);
      if (!kProducer && lane == 0) warp_counts[consumer_warp] = __popc(kept);
      cta_barrier();
      int before = listed;
      for (int w = 0; w < kConsumerWarps; ++w) {
        before += w < consumer_warp ? warp_counts[w] : 0;
        listed += warp_counts[w];
      }
      if (keep) {
        tile_list[before + __popc(kept & ((1u << lane) - 1u))] =
            own * 4 + static_cast<int>(own_class);
      }
      next += kConsumerThreads;
      cta_barrier();  // the list is visible and warp_counts free for the next round
    }

    // Thread k's key terms of key k0 + k of listed tile i (the mask's where the consumers check
    // elements), which the producer stages beside the tile's stage.
    const auto own_key_terms = [&](int i) {
      KeyTerms<Variant> own_terms{};
      if constexpr (kStageKeyTerms) {
        const int own_key = static_cast<int>(threadIdx.x);
        const int k0 = tile_list[i] / 4 * kBlockN;
        if (own_key < kBlockN) {
          const int kv = min(k0 + own_key, kv_end - 1);
          own_terms.score = variant.score_key_terms(
              args.params, request, kv, variant.score_request_terms(args.params, request));
          if (checks_elements(static_cast<TileClass>(tile_list[i] % 4)) || k0 + kBlockN > kv_end) {
            own_terms.mask = variant.mask_key_terms(
                args.params, request, kv, variant.mask_request_terms(args.params, request));
          }
        }
      }
      return own_terms;
    };
    if constexpr (kProducer && kKvFp8) {
      // An fp8 cache: part p of the listed tiles (K of tile p / 2 for even p, its V for odd p)
      // is copied into slot p % kSlots of the e4m3 ring, and converted into the tile's 16-bit
      // stage kSlots - 1 parts later, once its copies have landed: each thread converts the
      // chunks it copied, so no barrier of the producer is needed. A tile is reported full
      // once its V is converted; its stage is waited for (free) before its K is.
      using Fp8Rows = DenseRows<kHeadDim / 16>;
      using Fp8Copy = KvTileCopy<kHeadDim / 2, kBlockN, kWgmmaProducerThreads, kPageSize, Fp8Rows>;
      constexpr int kSlots = wgmma_fp8_slots(kHeadDim);
      constexpr int kPartBytes = kBlockN * kHeadDim;
      const u32 fp8_address = stages_address + wgmma_stage_bytes();
      // Byte strides and offsets in the copies' 16-bit units.
      // Each thread copies, then converts, the chunks of item e4m3_item(thread): its stores
      // into the stage meet no bank conflict.
      const int item = static_cast<int>(e4m3_item<kHeadDim / 16>(threadIdx.x));
      const Fp8Copy k_copy(item, static_cast<const unsigned short*>(args.k_cache),
                           static_cast<i64>(kv_head) * args.k_stride_head / 2);
      const Fp8Copy v_copy(item, static_cast<const unsigned short*>(args.v_cache),
                           static_cast<i64>(kv_head) * args.v_stride_head / 2);
      static_assert(Fp8Copy::kRowsPerPass % 8 == 0, "the passes share the swizzle");
      using StageLayout = Swizzled128Rows<kBlockN>;
      const u32 convert_from = Fp8Rows::unsigned_bytes(k_copy.row0, k_copy.chunk);
      const u32 convert_low = StageLayout::unsigned_bytes(k_copy.row0, 2 * k_copy.chunk);
      const u32 convert_high = StageLayout::unsigned_bytes(k_copy.row0, 2 * k_copy.chunk + 1);
      i32 pages[Fp8Copy::kPages];
      const auto issue = [&](int p) {
        const int k0 = tile_list[p / 2] / 4 * kBlockN;
        const u32 slot = fp8_address + (p % kSlots) * kPartBytes;
        if (p % 2 == 0) {
          k_copy.read_pages(pages, block_row, k0, kv_end);
          k_copy.copy(slot, args.k_stride_block / 2, args.k_stride_slot / 2, pages, key_begin, k0,
                      kv_end, last_block_of(args));
        } else {
          v_copy.copy(slot, args.v_stride_block / 2, args.v_stride_slot / 2, pages, key_begin, k0,
                      kv_end, last_block_of(args));
        }
      };
      const auto convert = [&](int p) {
        const int i = p / 2;
        const u32 t = pipe.tiles + i;
        const int stage = static_cast<int>(t % kStages);
        if (p % 2 == 0) {
          const KeyTerms<Variant> own_terms = own_key_terms(i);
          const int own_key = static_cast<int>(threadIdx.x);
          if (t >= kStages) mbarrier_wait(pipe.empty(stage), (t / kStages - 1) % 2);
          if constexpr (kStageKeyTerms) {
            if (own_key < kBlockN) key_terms[stage * kBlockN + own_key] = own_terms;
          }
        }
        // The passes' rows are kRowsPerPass (a multiple of 8) apart: the swizzle of every pass
        // is the first's, and its addresses are the first's plus a constant.
        const u32 from = fp8_address + (p % kSlots) * kPartBytes + convert_from;
        const u32 to = stages_address + stage * 2 * kTileBytes + (p % 2) * kTileBytes;
        // Unrolled whole (4 passes, 8 at head dim 256): the passes' shared loads are in flight
        // together, where two at a time left the producer waiting on them (fp8 causal 16k 6.08 ->
        // 5.70 ms; bench/history/2026-11-30.md).
#pragma unroll
        for (int pass = 0; pass < Fp8Copy::kPasses; ++pass) {
          const u32 step = pass * Fp8Copy::kRowsPerPass;
          convert_e4m3_chunk<kBF16>(from + step * (kHeadDim / 16) * 16u,
                                    to + convert_low + step * 128u,
                                    to + convert_high + step * 128u);
        }
        // Like the cp.async copies of the 16-bit kernel, these stores reach wgmma through the
        // consumers' proxy fence after their wait on the barrier.
        if (p % 2 == 1) mbarrier_arrive(pipe.full(stage));
      };
      const int parts = 2 * listed;
      for (int p = 0; p < parts + kSlots - 1; ++p) {
        if (p < parts) issue(p);
        cp_async_commit();
        if (p >= kSlots - 1) {
          cp_async_wait<kSlots - 1>();
          convert(p - (kSlots - 1));
        }
      }
    } else if constexpr (kProducer) {
      using TileCopy = KvTileCopy<kHeadDim, kBlockN, kWgmmaProducerThreads, kPageSize,
                                  Swizzled128Rows<kBlockN>, Variant::kPageMajorCopies>;
      const TileCopy k_copy(static_cast<int>(threadIdx.x),
                            static_cast<const unsigned short*>(args.k_cache),
                            static_cast<i64>(kv_head) * args.k_stride_head +
                                kv_batch_offset<kPageSize>(args.k_stride_block, request));
      const TileCopy v_copy(static_cast<int>(threadIdx.x),
                            static_cast<const unsigned short*>(args.v_cache),
                            static_cast<i64>(kv_head) * args.v_stride_head +
                                kv_batch_offset<kPageSize>(args.v_stride_block, request));
      // Each tile's copies form one cp.async group; the producer reports a tile full once the
      // next tile's copies are out, so two tiles' copies are in flight at a time. Keys on
      // pages outside the cache are zeroed, not read (last_block_of).
      const u32 last_block = last_block_of(args);
      for (int i = 0; i < listed; ++i) {
        const u32 t = pipe.tiles + i;
        const int stage = static_cast<int>(t % kStages);
        const int k0 = tile_list[i] / 4 * kBlockN;
        i32 pages[TileCopy::kPages];
        k_copy.read_pages(pages, block_row, k0, kv_end);
        // Loaded before the wait for the stage, stored after it.
        const KeyTerms<Variant> own_terms = own_key_terms(i);
        const int own_key = static_cast<int>(threadIdx.x);
        if constexpr (kSplitRings) {
          // K once its stage is free, then V once its own is: each full barrier is arrived on
          // as the copies land.
          const u32 reuse_phase = (t / kStages - 1) % 2;  // of the stage's previous tile
          const u32 k_tile = stages_address + stage * 2 * kTileBytes;
          if (t >= kStages) mbarrier_wait(pipe.empty(stage), reuse_phase);
          k_copy.copy(k_tile, args.k_stride_block, args.k_stride_slot, pages, key_begin, k0, kv_end,
                      last_block);
          cp_async_mbarrier_arrive(pipe.full(stage));
          if constexpr (kStageKeyTerms) {
            // The key terms travel with K: stored once its stage is free, published by an
            // ordinary arrive (a release), which K's full barrier counts besides the copies'.
            if (own_key < kBlockN) key_terms[stage * kBlockN + own_key] = own_terms;
            mbarrier_arrive(pipe.full(stage));
          }
          if (t >= kStages) mbarrier_wait(pipe.v_empty(stage), reuse_phase);
          v_copy.copy(k_tile + kTileBytes, args.v_stride_block, args.v_stride_slot, pages,
                      key_begin, k0, kv_end, last_block);
          cp_async_mbarrier_arrive(pipe.v_full(stage));
          continue;
        }
        // The consumers free tile t - kStages's stage while they compute tile t - kStages + 1,
        // which the producer reports full after tile t - kStages + 2's copies are out: with
        // fewer than three stages that is tile t itself, so the tile in flight is reported
        // before the wait instead.
        const bool report_first = kStages < 3 && t >= kStages && i > 0;
        if (report_first) {
          cp_async_wait<0>();
          mbarrier_arrive(pipe.full((t + kStages - 1) % kStages));
        }
        if (t >= kStages) mbarrier_wait(pipe.empty(stage), (t / kStages - 1) % 2);
        if constexpr (kStageKeyTerms) {
          // Published with the tile's full barrier (the arrive releases the stores).
          if (own_key < kBlockN) key_terms[stage * kBlockN + own_key] = own_terms;
        }
        const u32 k_tile = stages_address + stage * 2 * kTileBytes;
        k_copy.copy(k_tile, args.k_stride_block, args.k_stride_slot, pages, key_begin, k0, kv_end,
                    last_block);
        v_copy.copy(k_tile + kTileBytes, args.v_stride_block, args.v_stride_slot, pages, key_begin,
                    k0, kv_end, last_block);
        cp_async_commit();
        if (i > 0 && !report_first) {
          cp_async_wait<1>();
          mbarrier_arrive(pipe.full((t + kStages - 1) % kStages));
        }
      }
      if (!kSplitRings && listed > 0) {
        cp_async_wait<0>();
        mbarrier_arrive(pipe.full((pipe.tiles + listed - 1) % kStages));
      }
    } else {
      // Descriptors move with the address in their low bits (16-byte units), so each
      // instruction's is a base plus a constant.
      const unsigned long long q_desc =
          wgmma_desc_sw128(smem_address(q_tile) + consumer * kWgmmaConsumerRows * kSwizzleRowBytes,
                           kSwizzleAtomBytes, kSwizzleAtomBytes);
      const unsigned long long stage_desc =
          wgmma_desc_sw128(stages_address, kSwizzleAtomBytes, kSwizzleAtomBytes);
      const unsigned long long stage_pair_desc =
          wgmma_desc_sw128(stages_address, kBlockN * kSwizzleRowBytes, kSwizzleAtomBytes);
      // S = Q K^T for the consumer's 64 rows and the keys of K stage `stage`, 64 keys per
      // accumulator (rows 64 a of the K tile), one instruction per k16 step; committed.
      const auto issue_s = [&](float(&s)[kSAccumulators][kAccumulatorFloats], int stage) {
        const unsigned long long k_desc = stage_desc + ((stage * 2 * kTileBytes) >> 4);
        for (int ks = 0; ks < kKSteps; ++ks) {
          const int step = (ks % kKStepsPerChunk) * kKStepBytes;
          const unsigned long long a_desc =
              q_desc + (((ks / kKStepsPerChunk) * kSwizzleRowBytes * kBlockM + step) >> 4);
          if constexpr (kSAccumulators == 2) {
            wgmma_64x128x16_ss<kBF16>(
                s[0], s[1], a_desc,
                k_desc + (((ks / kKStepsPerChunk) * kSwizzleRowBytes * kBlockN + step) >> 4),
                ks > 0);
          } else {
            wgmma_64x64x16_ss<kBF16>(
                s[0], a_desc,
                k_desc + (((ks / kKStepsPerChunk) * kSwizzleRowBytes * kBlockN + step) >> 4),
                ks > 0);
          }
        }
        wgmma_commit();
      };
      // O += P V for V stage `stage`, committed: each pair of O's 64-column chunks takes one
      // m64n128 instruction per k16 step, whose B spans two chunks of the V tile, kBlockN * 128
      // bytes apart (the descriptor's leading offset); an odd last chunk takes an m64n64.
      const auto issue_pv = [&](const u32(&p)[kBlockN / 16][4], int stage) {
        const unsigned long long v_desc =
            stage_pair_desc + ((stage * 2 * kTileBytes + kTileBytes) >> 4);
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          for (int c = 0; c < kOChunks; c += 2) {
            const unsigned long long b =
                v_desc + ((c * kSwizzleRowBytes * kBlockN + kk * 16 * kSwizzleRowBytes) >> 4);
            if constexpr (kOChunks % 2 == 0) {
              wgmma_64x128x16_rs_mn<kBF16>(o[c], o[c + 1], p[kk], b);
            } else {
              wgmma_64x64x16_rs_mn<kBF16>(o[c], p[kk], b);
            }
          }
        }
        wgmma_commit();
      };
      // O *= the rows' rescale factors (skipped when no row's max moved).
      const auto rescale_o = [&](const float(&rescale)[2]) {
        if (rescale[0] != 1.0f || rescale[1] != 1.0f) {
          for (int c = 0; c < kOChunks; ++c) {
            for (int e = 0; e < kAccumulatorFloats; ++e)
              o[c][e] *= rescale[(e / 2) % 2];
          }
        }
      };

      u32 p_prev[kBlockN / 16][4];  // P_{i-1}, the A operand of the PV in flight
      for (int i = 0; i < listed; ++i) {
        const u32 t = pipe.tiles + i;
        const int stage = static_cast<int>(t % kStages);
        const int previous = static_cast<int>((t + kStages - 1) % kStages);
        const int tile = tile_list[i] / 4;
        const TileClass tile_class = static_cast<TileClass>(tile_list[i] % 4);
        const int k0 = tile * kBlockN;
        mbarrier_wait(pipe.full(stage), (t / kStages) % 2);
        // Split rings: V_{i-1} too, for the PV issued beside S_i (copied before K_i: seldom a
        // wait).
        if (kSplitRings && i > 0) mbarrier_wait(pipe.v_full(previous), ((t - 1) / kStages) % 2);
        fence_proxy_async_shared();

        float s[kSAccumulators][kAccumulatorFloats];
        wgmma_fence();
        issue_s(s, stage);
        if (i > 0) {
          issue_pv(p_prev, previous);
          wgmma_wait<1>();
        } else {
          wgmma_wait<0>();
        }
        for (int a = 0; a < kSAccumulators; ++a)
          fence_registers(s[a]);
        // Split rings: S_i is done, so K_i's stage is free, unless the softmax still reads the
        // key terms staged beside it.
        if constexpr (kSplitRings && !kStageKeyTerms) mbarrier_arrive(pipe.empty(stage));

        // Scale, score_mod, mask (per element only where the tile is Partial or runs past the
        // sequence), then the online-softmax update. Element e of n8 tile j (s_element: s[j / 8]
        // [4 (j % 8) + e]) is row quad_row + 8 * (e / 2), key k0 + 8j + 2 * quad_col + e % 2.
        float tile_max[2] = {neg_inf, neg_inf};
        // Full tiles inside the sequence skip the per-element mask (a separate, uniform path).
        // Key terms load four n8 tiles at a time where the registers allow (not at head dim
        // 256, nor with 128-key tiles: ptxas spills).
        const int key0 = k0 + quad_col * 2;
        const KeyTerms<Variant>* const staged = key_terms + stage * kBlockN + quad_col * 2;
        if (kDiagonalMask && diagonal && tile_class == TileClass::Partial &&
            k0 + kBlockN <= kv_end) {
          // Lane l evaluates diagonals l, l + 32, ... of the tile; each row then shifts its
          // kBlockN bits out of the words (a funnel shift by less than 32).
          const int first_diagonal = diagonal_lo - k0 - (kBlockN - 1);
          u32 words[kDiagonalWords];
          for (int w = 0; w < kDiagonalWords; ++w) {
            words[w] = __ballot_sync(0xffffffffu, variant.mask(args.params, rows.b, rows.head[0],
                                                               first_diagonal + 32 * w + lane, 0));
          }
          DiagonalWindow<kBlockN / 8> window;
          for (int r = 0; r < 2; ++r) {
            for (int i = 0; i < kBlockN / 32; ++i)
              window.bits[r][i] = __funnelshift_r(words[i], words[i + 1], diagonal_shift[r]);
          }
          score_and_mask<kBlockN / 8, kKeyBatch, kStageKeyTerms>(
              variant, args.params, scale, rows, key0, kv_end, true, s, tile_max, staged, window);
        } else if (checks_elements(tile_class) || k0 + kBlockN > kv_end) {
          // Partial tiles, those past the sequence, and those with absent keys.
          if constexpr (Variant::kRolledMask) {
            // The element part is a loop: one loop over the elements into bits.
            const auto bits = element_bits<kBlockN / 8, kStageKeyTerms>(variant, args.params, rows,
                                                                        key0, kv_end, staged);
            score_and_mask<kBlockN / 8, kKeyBatch, kStageKeyTerms>(
                variant, args.params, scale, rows, key0, kv_end, true, s, tile_max, staged, bits);
          } else {
            score_and_mask<kBlockN / 8, kKeyBatch, kStageKeyTerms>(
                variant, args.params, scale, rows, key0, kv_end, true, s, tile_max, staged);
          }
          if (kPageSize != 0 && has_absent_keys(tile_class)) {
            // PV_{i-1} first, so that its P's registers are free for the pass (which took 8-96
            // bytes of spills from head-dim-256 consumers beside them).
            wgmma_wait<0>();
            for (int c = 0; c < kOChunks; ++c)
              fence_registers(o[c]);
            for (int kk = 0; kk < kBlockN / 16; ++kk)
              fence_registers(p_prev[kk]);
            mask_absent_keys<kBlockN / 8, Variant>(
                scale,
                present_pages<kBlockN, kPageSize>(
                    absent_pages<kBlockN, kPageSize>(args, block_row, k0, kv_end), k0,
                    quad_col * 2),
                s, tile_max);
          }
        } else {
          score_and_mask<kBlockN / 8, kKeyBatch, kStageKeyTerms>(
              variant, args.params, scale, rows, key0, kv_end, false, s, tile_max, staged);
        }
        if constexpr (kSplitRings && kStageKeyTerms) mbarrier_arrive(pipe.empty(stage));
        float max_scaled[2];
        float rescale[2];
        update_row_max(tile_max, row_max, row_sum, max_scaled, rescale);
        // exp of S_i in place while PV_{i-1} runs; rounded to 16 bits into P only once that PV
        // is done, so that P_{i-1} and P_i never take registers together.
        for (int j = 0; j < kBlockN / 8; ++j) {
          for (int e = 0; e < 4; ++e) {
            float& x = s_element(s, j, e);
            x = fast_exp2(x * factor - max_scaled[e / 2]);
            row_sum[e / 2] += x;
          }
        }

        // PV_{i-1} is done: its stage is free; rescale O to the new maxima for P_i V_i.
        wgmma_wait<0>();
        for (int c = 0; c < kOChunks; ++c)
          fence_registers(o[c]);
        for (int kk = 0; kk < kBlockN / 16; ++kk)
          fence_registers(p_prev[kk]);
        if (i > 0) mbarrier_arrive(kSplitRings ? pipe.v_empty(previous) : pipe.empty(previous));
        rescale_o(rescale);
        // P_i in the A layout: k16 step kk takes n8 tiles 2kk and 2kk + 1.
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          for (int f = 0; f < 4; ++f) {
            const int j = 2 * kk + f / 2;
            p_prev[kk][f] =
                pack_2x16<kBF16>(s_element(s, j, 2 * (f % 2)), s_element(s, j, 2 * (f % 2) + 1));
          }
        }
      }
      if (listed > 0) {
        // The last tile's PV.
        const u32 t_last = pipe.tiles + listed - 1;
        const int last = static_cast<int>(t_last % kStages);
        if constexpr (kSplitRings) {
          mbarrier_wait(pipe.v_full(last), (t_last / kStages) % 2);
          fence_proxy_async_shared();
        }
        wgmma_fence();
        issue_pv(p_prev, last);
        wgmma_wait<0>();
        for (int c = 0; c < kOChunks; ++c)
          fence_registers(o[c]);
        mbarrier_arrive(kSplitRings ? pipe.v_empty(last) : pipe.empty(last));
      }
    }
    pipe.tiles += listed;
    cta_barrier();  // every role is done with the list before it is refilled
  }
  if (kQDuringListing && first_tile >= end_tile) {
    // No listing waited for Q: its copies land before the epilogue reuses the tile.
    cp_async_wait_all();
    cta_barrier();
  }
  if constexpr (!kProducer) {
    // Normalise and write. Each quad holds a full row; the row sum is reduced across it.
    unsigned short* out =
        static_cast<unsigned short*>(args.out) + out_batch_offset<kPageSize>(args, request);
    const float v_scale = value_scale<kKvFp8>(args, kv_head);
    const auto finish = [&](int r) {
      RowFinish finished =
          finish_row(row_max[r], quad_sum(row_sum[r]), sink_of(args.sinks, rows.head[r]));
      finished.scale *= v_scale;
      return finished;
    };
    const auto write_lse = [&](int r, float lse) {
      const int packed = row0 + consumer_warp * 16 + quad_row + r * 8;
      if (args.lse != nullptr && quad_col == 0 && packed < block.packed_rows) {
        const i64 token = block.token(packed);
        args.lse[token * args.lse_stride_token + rows.head[r]] = lse;
      }
    };
    if constexpr (kHeadDim <= 128) {
      // The warp's 16 rows go through its own rows of the Q tile (no wgmma reads them any
      // more: the warpgroup's last S is done), so that they leave in 16-byte stores of whole
      // rows. (At head dim 256 the consumers have no registers to spare for it: ptxas spills.)
      RowFinish finished[2];
      float inv[2];
      for (int r = 0; r < 2; ++r) {
        finished[r] = finish(r);
        inv[r] = finished[r].scale;
      }
      using QLayout = Swizzled128Rows<kBlockM>;
      const int warp_row0 = consumer_warp * 16;
      // Matrix m of each stmatrix: rows 8 (m % 2) of the warp's, columns 16 jj + 8 (m / 2).
      for (int jj = 0; jj < kHeadDim / 16; ++jj) {
        u32 pairs[4];
        for (int m = 0; m < 4; ++m) {
          const int j = 2 * jj + m / 2;  // n8 tile
          const float* acc = &o[j / 8][4 * (j % 8) + 2 * (m % 2)];
          pairs[m] = pack_2x16<kBF16>(acc[0] * inv[m % 2], acc[1] * inv[m % 2]);
        }
        const int row = warp_row0 + lane % 8 + 8 * ((lane / 8) % 2);
        stmatrix_x4(smem_address(q_tile + QLayout::offset(row, 2 * jj + lane / 16)), pairs);
      }
      __syncwarp();
      // Lanes take 16-byte chunks of 32 / kChunksPerRow rows at a time (a rolled loop: the
      // addresses of every row at once would take registers the consumers do not have).
      constexpr int kChunksPerRow = kHeadDim / 8;
      constexpr int kRowsPerPass = 32 / kChunksPerRow;
      const int chunk = lane % kChunksPerRow;
#pragma unroll 1
      for (int row = lane / kChunksPerRow; row < 16; row += kRowsPerPass) {
        const int packed = row0 + warp_row0 + row;
        if (packed >= block.packed_rows) continue;
        const i64 token = block.token(packed);
        const i64 head = static_cast<i64>(kv_head) * block.group + block.head_of(packed);
        *reinterpret_cast<uint4*>(out + token * args.out_stride_token +
                                  head * args.out_stride_head + chunk * 8) =
            *reinterpret_cast<const uint4*>(q_tile + QLayout::offset(warp_row0 + row, chunk));
      }
      write_lse(0, finished[0].lse);
      write_lse(1, finished[1].lse);
    } else {
      for (int r = 0; r < 2; ++r) {
        const RowFinish finished = finish(r);
        const int packed = row0 + consumer_warp * 16 + quad_row + r * 8;
        if (packed >= block.packed_rows) continue;
        const i64 token = block.token(packed);
        const float inv = finished.scale;
        u32* out_row =
            reinterpret_cast<u32*>(out + token * args.out_stride_token +
                                   static_cast<i64>(rows.head[r]) * args.out_stride_head);
        for (int j = 0; j < kHeadDim / 8; ++j) {
          const float* acc = &o[j / 8][4 * (j % 8) + 2 * r];
          out_row[j * 4 + quad_col] = pack_2x16<kBF16>(acc[0] * inv, acc[1] * inv);
        }
        write_lse(r, finished.lse);
      }
    }
  }
}

// The kernel: the producer warpgroup hands its registers to the consumers (setmaxnreg), then
// every role runs the CTA's blocks in step.
template <class Variant, int kHeadDim, bool kBF16, int kPageSize, bool kKvFp8 = false>
__device__ void paged_prefill_sm90(const PagedPrefillArgs& args) {
  constexpr int kBlockN = wgmma_variant_block_n<Variant, kHeadDim, kKvFp8>();
  constexpr int kStages = wgmma_stages(kHeadDim, kBlockN);
  // Here, not in the block function: that is instantiated once per role.
  __shared__ KeyTerms<Variant> key_terms[wgmma_key_term_slots<Variant, kHeadDim, kKvFp8>()];
  // Here too, before the roles part: a return inside the block function serialized the wgmma of
  // some kernels (a generated mask at head dim 256).
  if (args.work_items == nullptr) {
    const int request = static_cast<int>(blockIdx.y);
    const PackedRows block =
        packed_rows_of(args, request, static_cast<int>(blockIdx.z),
                       static_cast<int>(gridDim.x - 1 - blockIdx.x) * kWgmmaBlockM, kWgmmaBlockM,
                       kPageSize == 0, Variant::kUsesHead);
    if (zero_long_request<kWgmmaBlockM, kHeadDim, kPageSize>(args, block, request)) return;
  }
  KvPipeline pipe;
  constexpr bool kSplitRings = split_kv_rings(kStages, kKvFp8);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Split rings: K's full barrier also counts the key terms' ordinary arrives where they
      // are staged.
      mbarrier_init(pipe.full(s), (kSplitRings && kStagedKeyTerms<Variant, true> ? 2 : 1) *
                                      kWgmmaProducerThreads);
      mbarrier_init(pipe.empty(s), kWgmmaThreads - kWgmmaProducerThreads);  // the consumers
      if constexpr (kSplitRings) {
        mbarrier_init(pipe.v_full(s), kWgmmaProducerThreads);
        mbarrier_init(pipe.v_empty(s), kWgmmaThreads - kWgmmaProducerThreads);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < kWgmmaProducerThreads) {
    setmaxnreg_dec<wgmma_producer_registers(kHeadDim, kBlockN)>();
    run_prefill_work<kWgmmaBlockM>(args, [&](int request, int kv_head, int row0) {
      prefill_block_sm90<Variant, kHeadDim, kBF16, kPageSize, kKvFp8, true>(args, request, kv_head,
                                                                            row0, pipe, key_terms);
    });
    // Split rings: no copy outlives its thread (the consumers wait for every one anyway).
    if constexpr (kSplitRings) cp_async_wait_all();
  } else {
    setmaxnreg_inc<wgmma_consumer_registers(kHeadDim, kBlockN)>();
    run_prefill_work<kWgmmaBlockM>(args, [&](int request, int kv_head, int row0) {
      prefill_block_sm90<Variant, kHeadDim, kBF16, kPageSize, kKvFp8, false>(args, request, kv_head,
                                                                             row0, pipe, key_terms);
    });
  }
}

}  // namespace fj
