// Paged prefill attention over a vLLM-style KV cache (docs/architecture.md#call-contract), for any
// query length: a decode step is a prefill of one token. With kPageSize == 0 the same kernel serves
// encoders: K and V packed like q (rows of request r start at query_start_loc[r]), positions
// 0-based. One CTA of four warps computes BLOCK_M packed query rows of one request against one kv
// head: with GQA the rows are (token, head-in-group) pairs, so the query heads that share a kv head
// share every K/V tile the CTA loads.
//
// The kernel calls only the variant's hooks (docs/architecture.md#kernel-contract): `kv_range`
// bounds the K/V tiles the CTA visits, `classify` decides per visited tile whether it is skipped
// (Empty: never loaded), computed without per-element mask (Full), or masked element by element
// (Partial);
// `score` and `mask` apply to single elements.
//
// Numerics: bf16/fp16 operands on tensor cores (mma.sync m16n8k16), fp32 accumulation, fp32
// online softmax. A row with no visible key writes 0 and LSE -inf.
#pragma once

#include "element_bits.cuh"
#include "fj_device.cuh"
#include "fj_ops.cuh"
#include "kernel_args.cuh"
#include "sharded_variant.cuh"

namespace fj {

// Class of the K/V tile [k0, k1) for the CTA's query positions [q_lo, q_hi] and its heads.
// A tile is Empty only if it is Empty for every head of the group, Full only if Full for all.
template <class Variant>
__device__ __forceinline__ TileClass classify_for_heads(const Variant& variant,
                                                        const MaskParams& params, int b,
                                                        int head_lo, int head_hi, int q_lo,
                                                        int q_hi, int k0, int k1) {
  if constexpr (!Variant::kUsesHead) {
    return variant.classify(params, b, head_lo, q_lo, q_hi + 1, k0, k1);
  } else {
    bool all_empty = true;
    bool all_full = true;
    for (int h = head_lo; h <= head_hi; ++h) {
      const TileClass c = variant.classify(params, b, h, q_lo, q_hi + 1, k0, k1);
      all_empty = all_empty && c == TileClass::Empty;
      all_full = all_full && c == TileClass::Full;
    }
    return all_empty ? TileClass::Empty : (all_full ? TileClass::Full : TileClass::Partial);
  }
}

// Keys [lo, hi) that the CTA's query positions [q_lo, q_hi] may see, over its heads.
template <class Variant>
__device__ __forceinline__ KvRange kv_range_for_heads(const Variant& variant,
                                                      const MaskParams& params, int b, int head_lo,
                                                      int head_hi, int q_lo, int q_hi) {
  if constexpr (!Variant::kUsesHead) {
    return variant.kv_range(params, b, head_lo, q_lo, q_hi + 1);
  } else {
    KvRange range = {0, 0};
    for (int h = head_lo; h <= head_hi; ++h) {
      const KvRange head = variant.kv_range(params, b, h, q_lo, q_hi + 1);
      if (head.lo >= head.hi) continue;
      range = range.lo >= range.hi ? head : KvRange{min(range.lo, head.lo), max(range.hi, head.hi)};
    }
    return range;
  }
}

// The launch's debug word (flexjit.h's bad_index): every array slot holds the same pointer
// (prepare_arrays, runtime/launch), so slot 0's takes the kernels' own reports too.
__device__ __forceinline__ i32* debug_word(const PagedPrefillArgs& args) {
  return args.params.array[0].bad_index;
}

// The largest block id in the cache: num_blocks - 1, or 2^32 - 1, which no id exceeds, where
// the launch checks nothing (num_blocks 0). Each chunk the copies (KvTileCopy::copy,
// load_kv_tile) read compares its block id with it (page_in_cache), one instruction, on every
// tile rather than only those listed kAbsentKeysClass: each way of testing only those (a second
// copy in a branch, a replacement of their entries by block 0 with V's rows zeroed after, a flag in
// the test) cost the wgmma kernels 2-8% and the fp8 decode 4%, where the one comparison costs 0-2%
// (bench/history/2026-11-29-bad-blocks.md).
__device__ __forceinline__ u32 last_block_of(const PagedPrefillArgs& args) {
  return args.num_blocks - 1u;
}

// Whether block id `id` lies in the cache whose last block is `last_block` (last_block_of): one
// unsigned comparison, which also rejects negative ids.
__device__ __forceinline__ bool page_in_cache(i32 id, u32 last_block) {
  return static_cast<u32>(id) <= last_block;
}

// The class a visited tile is listed with when a page of its keys lies outside the cache (a
// block id outside [0, num_blocks)): after Empty, Full and Partial (TileClass, shared with the
// host), the value that tile lists' `tile * 4 + class` has free. Its absent keys are masked as
// if the mask were false there (mask_absent_keys), so it checks every element whatever the
// mask's class; the copies zero-fill those keys' rows instead of reading them (last_block_of).
// Tiles whose pages are all in the cache are listed and masked as they always were.
enum : int { kAbsentKeysClass = 3 };
__device__ __forceinline__ bool has_absent_keys(TileClass c) {
  return static_cast<int>(c) == kAbsentKeysClass;
}
// Whether a listed (not Empty) tile of class `c` masks element by element.
__device__ __forceinline__ bool checks_elements(TileClass c) {
  return c != TileClass::Full;
}

// classify_for_heads for the tile of keys [k0, k1) (at most kKeys, k1 <= kv_end) of a paged
// request, which then, where the launch checks block ids (num_blocks != 0) and the tile is
// visited, reads the block-table entries of its pages: a tile with one outside the cache is
// listed kAbsentKeysClass, and the first such entry reported (DebugReport::BlockId: request,
// logical block, id). Tiles the mask calls Empty are never read, and not looked at. (Loaded
// before the mask classifies, to overlap the two, the entries spilled the wgmma consumers of
// document 4-292 bytes.)
template <int kKeys, int kPageSize, class Variant>
__device__ __forceinline__ TileClass classify_tile(const Variant& variant,
                                                   const PagedPrefillArgs& args,
                                                   const i32* block_row, int b, int head_lo,
                                                   int head_hi, int q_lo, int q_hi, int k0,
                                                   int k1) {
  const TileClass c =
      classify_for_heads(variant, args.params, b, head_lo, head_hi, q_lo, q_hi, k0, k1);
  if constexpr (kPageSize != 0) {
    if (c != TileClass::Empty && args.num_blocks != 0) {
      // Pages of a tile: kKeys / kPageSize where one divides the other, one more otherwise.
      constexpr int kPages = (kKeys - 1) / kPageSize + 2;
      const int first = k0 / kPageSize;
      const int last = (k1 - 1) / kPageSize;
      i32 ids[kPages];
#pragma unroll
      for (int j = 0; j < kPages; ++j)
        ids[j] = first + j <= last ? block_row[first + j] : 0;
      int bad = -1;
#pragma unroll
      for (int j = kPages - 1; j >= 0; --j)
        bad = first + j <= last && !page_in_cache(ids[j], last_block_of(args)) ? j : bad;
      if (bad >= 0) {
        report_debug(debug_word(args), DebugReport::BlockId, b, first + bad,
                     block_row[first + bad]);
        return static_cast<TileClass>(kAbsentKeysClass);
      }
    }
  }
  return c;
}

// Packed query rows [row0, row0 + rows) of one request against one kv head (GQA packing). Token
// major (the default): row r is query token r / group with query head kv_head * group +
// r % group, so a block of rows spans few tokens of every head. Head major (masks that read
// `h`, Variant::kUsesHead): row r is token r % query_len of head kv_head * group +
// r / query_len, so a block spans one head (two where it crosses a head's last row), and
// kv_range and classify see that head's tiles, not the hull of the group's (per-head windows).
// The prefill and decode kernels take their work in such blocks.
struct PackedRows {
  int group;
  int query_len;
  bool head_major;
  int token_begin;     // the request's first query row in q and out
  int packed_rows;     // query tokens times group
  int seq_len;         // keys of the request (its new tokens included)
  int q_offset;        // logical position of the request's first query token (see
                       // docs/architecture.md#call-contract)
  int key_begin;       // contiguous K/V: the request's first key row
  i64 q_batch_offset;  // contiguous: where the request's q rows begin (its batch stride)
  int kv_head;
  int row0;
  int last_row;  // the block's last row inside the request

  // Token and head in the group of a row inside the request.
  __device__ __forceinline__ int token_of(int packed) const {
    return head_major ? packed % query_len : packed / group;
  }
  __device__ __forceinline__ int head_of(int packed) const {
    return head_major ? packed / query_len : packed % group;
  }
  // The block's query positions and heads: where its rows span two tokens' heads (token major)
  // or two heads (head major), every head or every position from the first to the last.
  __device__ __forceinline__ bool spans_heads() const {
    return head_major ? head_of(last_row) > head_of(row0) : token_of(last_row) > token_of(row0);
  }
  __device__ __forceinline__ int q_lo() const {
    return q_offset + (head_major && spans_heads() ? 0 : token_of(row0));
  }
  __device__ __forceinline__ int q_hi() const {
    return q_offset + (head_major && spans_heads() ? query_len - 1 : token_of(last_row));
  }
  __device__ __forceinline__ int head_lo() const {
    return kv_head * group + (!head_major && spans_heads() ? 0 : head_of(row0));
  }
  __device__ __forceinline__ int head_hi() const {
    return kv_head * group + (!head_major && spans_heads() ? group - 1 : head_of(last_row));
  }
  // Position and head of a row. Rows past the request compute a copy of its last row (their
  // output is never written), so the mask and score only ever see positions and heads of the
  // request: an array read indexed by q stays in range, and a debug bounds report means a real
  // bad index.
  __device__ __forceinline__ int position(int packed) const {
    return q_offset + token_of(min(packed, packed_rows - 1));
  }
  __device__ __forceinline__ int head(int packed) const {
    return query_head(min(packed, packed_rows - 1));
  }
  // The row of q and out, and the query head, of a row inside the request (packed < packed_rows).
  __device__ __forceinline__ i64 token(int packed) const { return token_begin + token_of(packed); }
  __device__ __forceinline__ int query_head(int packed) const {
    return kv_head * group + head_of(packed);
  }
};

__device__ __forceinline__ PackedRows packed_rows_of(const PagedPrefillArgs& args, int request,
                                                     int kv_head, int row0, int rows,
                                                     bool contiguous, bool head_major = false) {
  PackedRows block;
  block.group = args.num_heads / args.num_kv_heads;
  block.token_begin = args.query_start_loc[request];
  block.query_len = args.query_start_loc[request + 1] - block.token_begin;
  block.head_major = head_major;
  // Contiguous sequences have keys of their own (as many as queries without key_start_loc),
  // and queries from position 0 whatever their number.
  block.seq_len = contiguous ? contiguous_key_count(args, request) : args.seq_lens[request];
  block.packed_rows = block.query_len * block.group;
  block.q_offset = contiguous ? 0 : block.seq_len - block.query_len;
  block.key_begin = contiguous ? contiguous_key_begin(args, request) : 0;
  block.q_batch_offset = contiguous ? request * args.q_stride_batch : 0;
  block.kv_head = kv_head;
  block.row0 = row0;
  block.last_row = min(row0 + rows, block.packed_rows) - 1;
  return block;
}

// A thread's two rows of an MMA accumulator (quad_row and quad_row + 8 of its warp's 16) with
// the hooks' terms of each row, computed once per block of rows: the generated hooks are split
// by what their terms read (emit_cuda.cpp, SplitHook), so that the per-element part only
// combines them. The request's terms are not kept here but recomputed per tile by
// score_and_mask (the mask's only for tiles that check elements): a mask such as
// prefix_ranges has a dozen of them, registers the head-dim-256 kernel does not have.
template <class Variant>
struct ThreadRows {
  int b;
  int q[2];
  int head[2];
  typename Variant::MaskQueryTerms mask_query[2];
  typename Variant::ScoreQueryTerms score_query[2];

  // Packed rows `first` and first + 8 of `block`.
  __device__ __forceinline__ void set(const Variant& variant, const MaskParams& params, int request,
                                      const PackedRows& block, int first) {
    b = request;
    const auto mask_request = variant.mask_request_terms(params, b);
    const auto score_request = variant.score_request_terms(params, b);
    for (int i = 0; i < 2; ++i) {
      q[i] = block.position(first + i * 8);
      head[i] = block.head(first + i * 8);
      mask_query[i] = variant.mask_query_terms(params, b, head[i], q[i], mask_request);
      score_query[i] = variant.score_query_terms(params, b, head[i], q[i], score_request);
    }
  }
};

// Element e of a thread's n8 tile j of S, in either accumulator shape.
template <int kTiles>
__device__ __forceinline__ float& s_element(float (&s)[kTiles][4], int j, int e) {
  return s[j][e];
}
template <int kElements>
__device__ __forceinline__ float& s_element(float (&s)[kElements], int j, int e) {
  return s[4 * j + e];
}
// wgmma accumulators of 64 keys each: tile j is tile j % 8 of accumulator j / 8.
template <int kAccumulators>
__device__ __forceinline__ float& s_element(float (&s)[kAccumulators][32], int j, int e) {
  return s[j / 8][4 * (j % 8) + e];
}

// Whether score_and_mask leaves S unscaled, the softmax scale folded into the exponent's FFMA
// (one multiply per element less): without a score hook, for a positive scale (the maximum of
// the raw products is then the scaled maximum; zero or negative scales are legal and keep the
// multiply).
template <class Variant>
__device__ __forceinline__ bool fold_scale(float scale) {
  return !Variant::kHasScore && scale > 0.0f;
}
// The factor of exp2's argument for the values score_and_mask leaves in S.
template <class Variant>
__device__ __forceinline__ float exp2_factor(float scale) {
  return fold_scale<Variant>(scale) ? scale * kLog2e : kLog2e;
}

// The key terms of the mask and the score hooks for one key, as a kernel stages them in shared
// memory (kStagedKeyTerms).
template <class Variant>
struct KeyTerms {
  typename Variant::MaskKeyTerms mask;
  typename Variant::ScoreKeyTerms score;
};

// Whether a kernel computes each key's terms once per tile into shared memory, for the threads
// that check the tile's elements to read, rather than each of them computing the keys it meets:
// where the terms hold a loop (Variant::kKeyTermsLoop: a rolled any/all of the key, hundreds of
// operations a key, which inlined beside the tile's accumulators made ptxas spill them), in
// every kernel that checks elements of tiles; where they read arrays (kKeyTermsLoad:
// doc[b, kv]) in the wgmma kernel, whose producer takes the loads off the consumers' path.
template <class Variant, bool kWgmma>
constexpr bool kStagedKeyTerms = Variant::kKeyTermsLoop || (kWgmma && Variant::kKeyTermsLoad);

// Element operations from which a mask's Partial tiles take the branch-free select and, for
// kDiagonal masks, the diagonal window (paged_prefill_sm90.cuh). Below it nvcc already makes the
// element's mask predicated code, and the window's fixed cost (three evaluations, three ballots,
// the shifts) does not pay: sliding 1024 ran 5% slower with both (bench/history/hopper-notes.md).
constexpr int kMaskedSelectMinOperations = 5;
// Whether score_and_mask selects -inf by the mask's value (branch-free) rather than branching
// around the element: for masks of a few operations that read no arrays. Either evaluates the
// same mask; the branch keeps fewer values live, which masks with array reads or many terms
// (document, prefix_ranges) need at head dim 64 and 128 to stay clear of spills.
template <class Variant>
constexpr bool kSelectMasked =
    !Variant::kKeyTermsLoad && Variant::kElementOperations >= kMaskedSelectMinOperations &&
    Variant::kElementOperations <= 16;

// No diagonal window: score_and_mask evaluates the mask per element.
struct NoDiagonalWindow {
  static constexpr bool kActive = false;
  __device__ __forceinline__ bool keep(int, int) const { return true; }
};

// A thread's mask bits of one tile of a translation-invariant mask (Variant::kDiagonal), for
// kTiles n8 tiles of keys: bit kTiles * 8 - 7 - m of row r's bits is the element of row r and
// key key0 + m (m = 8 j + e % 2), so each element is a test of a bit whose place the compiler
// knows. The wgmma consumer builds them (paged_prefill_sm90.cuh, kDiagonalMask) from one mask
// evaluation per diagonal of the tile; the tile must lie inside the sequence.
template <int kTiles>
struct DiagonalWindow {
  static constexpr bool kActive = true;
  static constexpr int kWords = kTiles / 4;
  u32 bits[2][kWords];
  __device__ __forceinline__ bool keep(int r, int m) const {
    const int index = kTiles * 8 - 7 - m;
    return ((bits[r][index / 32] >> (index % 32)) & 1u) != 0;
  }
};

// The keys of a tile listed kAbsentKeysClass whose page is in the cache: the thread's key
// key0 + m (m = 8 j + c, as in score_and_mask) is on bit (from_page + m) / kPageSize of `absent`
// (absent_pages), from_page being key0's offset in the tile's first page; the two keys of a
// pair share a page (pages hold a multiple of 16 keys, key0 is even).
template <int kPageSize>
struct PresentPages {
  static constexpr bool kActive = true;
  u32 absent;
  int from_page;
  static constexpr int kPage = kPageSize > 0 ? kPageSize : 1;  // 0: contiguous, never absent
  __device__ __forceinline__ bool present(int m) const {
    return ((absent >> ((from_page + m) / kPage)) & 1u) == 0u;
  }
};
// The PresentPages of a thread whose keys start `offset` (< 8) keys into a tile of kKeys keys
// from k0 (a multiple of kKeys). Where pages hold whole tiles or tiles whole pages, the offset
// never moves a key to the next page (8 j + offset stays within 8 j's page): from_page is then
// 0, and each key's bit a constant.
template <int kKeys, int kPageSize>
__device__ __forceinline__ PresentPages<kPageSize> present_pages(u32 absent, int k0, int offset) {
  constexpr int kPage = PresentPages<kPageSize>::kPage;
  if constexpr (kKeys % kPage == 0 || kPage % kKeys == 0) {
    return {absent, 0};
  } else {
    return {absent, k0 % kPage + offset};
  }
}

// Whether S is a wgmma kernel's accumulators (float[accumulators][32]) rather than mma.sync's
// n8 tiles (float[tiles][4]).
template <class Scores>
struct IsWgmmaScores {
  static constexpr bool kValue = false;
};
template <int kAccumulators>
struct IsWgmmaScores<float[kAccumulators][32]> {
  static constexpr bool kValue = true;
};

// The group terms' type of a variant where a kernel computes them (kMaskGroupKeys), else an
// empty struct (no variant's member is named).
template <class Variant, bool kGroups>
struct GroupTermsOf {
  struct type {};
};
template <class Variant>
struct GroupTermsOf<Variant, true> {
  using type = typename Variant::MaskGroupTerms;
};

template <bool kFoldScale, bool kUniformScore, int kTiles, int kKeyBatch, bool kStaged,
          class Variant, class Scores, class Window>
__device__ __forceinline__ void score_and_mask_impl(const Variant& variant,
                                                    const MaskParams& params, float scale,
                                                    const ThreadRows<Variant>& rows, int key0,
                                                    int kv_end, bool check_elements,
                                                    const KeyTerms<Variant>* staged, Scores& s,
                                                    float (&tile_max)[2], const Window& window) {
  typename Variant::MaskRequestTerms mask_request{};
  typename Variant::ScoreRequestTerms score_request{};
  if constexpr (Variant::kHasScore) score_request = variant.score_request_terms(params, rows.b);
  if (check_elements && !Window::kActive) mask_request = variant.mask_request_terms(params, rows.b);
  // Tiles go kBatch at a time: the key terms of a batch's keys first, so that their loads are
  // in flight together. Keys past the sequence take the last key's terms (their elements are
  // masked regardless, and the tile is only visited when kv_end > 0): no branch separates the
  // loads.
  constexpr int kBatch = kKeyBatch < kTiles ? kKeyBatch : kTiles;
  static_assert(kTiles % kBatch == 0, "whole batches of n8 tiles");
  // kUniformScore: the score is s plus a term that score_kv_uniform found to have one value
  // over the thread's keys, so the term is computed once per row, at key0 (the score with s = 0),
  // and each element adds it.
  float uniform_term[2] = {0.0f, 0.0f};
  if constexpr (kUniformScore) {
    const typename Variant::ScoreKeyTerms key =
        kStaged ? staged[0].score
                : variant.score_key_terms(params, rows.b, min(key0, kv_end - 1), score_request);
    for (int r = 0; r < 2; ++r) {
      uniform_term[r] = variant.score(params, 0.0f, rows.b, rows.head[r], rows.q[r], key0,
                                      score_request, rows.score_query[r], key);
    }
  }
  // Group terms (Variant::kMaskGroupKeys): the mask's per-element loads that read kv only
  // through kv / G, once per row and aligned group of G keys of the tile instead of once per
  // element. The keys' first, key0 & ~7, is a multiple of 8 kTiles (every caller's), and G and
  // 8 kTiles are powers of two, so n8 tile j lies in group 8 j / G, or all in one. A group that
  // starts past the sequence takes the last key's terms (its elements are masked).
  constexpr bool kGroups = Variant::kMaskGroupKeys > 0 && !Window::kActive;
  constexpr int kGroupKeys = kGroups ? Variant::kMaskGroupKeys : 8 * kTiles;
  constexpr int kGroupCount = kGroupKeys < 8 * kTiles ? 8 * kTiles / kGroupKeys : 1;
  typename GroupTermsOf<Variant, kGroups>::type group[2][kGroupCount] = {};
  if constexpr (kGroups) {
    if (check_elements) {
      const int first = key0 & ~7;  // key0 less the thread's column
      for (int g = 0; g < kGroupCount; ++g) {
        const int kv = min(first + g * kGroupKeys, kv_end - 1);
        const typename Variant::MaskKeyTerms key =
            kStaged ? staged[kv - key0].mask
                    : variant.mask_key_terms(params, rows.b, kv, mask_request);
        for (int r = 0; r < 2; ++r) {
          group[r][g] = variant.mask_group_terms(params, rows.b, rows.head[r], rows.q[r], kv,
                                                 mask_request, rows.mask_query[r], key);
        }
      }
    }
  }
  const auto batch = [&](int j0) {
    typename Variant::MaskKeyTerms mask_key[kBatch][2] = {};
    typename Variant::ScoreKeyTerms score_key[kBatch][2] = {};
    for (int b = 0; b < kBatch; ++b) {
      for (int c = 0; c < 2; ++c) {
        if constexpr (kStaged) {
          const KeyTerms<Variant>& terms = staged[(j0 + b) * 8 + c];
          if constexpr (!kUniformScore) score_key[b][c] = terms.score;
          if (check_elements && !Window::kActive) mask_key[b][c] = terms.mask;
        } else {
          const int kv = min(key0 + (j0 + b) * 8 + c, kv_end - 1);
          if constexpr (!kUniformScore)
            score_key[b][c] = variant.score_key_terms(params, rows.b, kv, score_request);
          if (check_elements && !Window::kActive)
            mask_key[b][c] = variant.mask_key_terms(params, rows.b, kv, mask_request);
        }
      }
    }
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b;
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int kv = key0 + j * 8 + e % 2;
        // kUniformScore: the scaled product and the term in one fma (the score hook rounds the
        // product first; well inside the kernels' tolerance).
        float x = kFoldScale      ? s_element(s, j, e)
                  : kUniformScore ? fmaf(s_element(s, j, e), scale, uniform_term[r])
                                  : s_element(s, j, e) * scale;
        if constexpr (Variant::kHasScore && !kUniformScore) {
          x = variant.score(params, x, rows.b, rows.head[r], rows.q[r], kv, score_request,
                            rows.score_query[r], score_key[b][e % 2]);
        }
        if (Window::kActive) {
          x = window.keep(r, j * 8 + e % 2) ? x : negative_infinity();
        } else if constexpr (kGroups) {
          if (check_elements) {
            const bool keep =
                (kv < kv_end) & variant.mask(params, rows.b, rows.head[r], rows.q[r], kv,
                                             mask_request, rows.mask_query[r], mask_key[b][e % 2],
                                             pick(group[r], 8 * j / kGroupKeys));
            x = keep ? x : negative_infinity();
          }
        } else if (check_elements && kSelectMasked<Variant>) {
          // A select, not a branch around the mask's instructions: & evaluates both sides.
          const bool keep =
              (kv < kv_end) & variant.mask(params, rows.b, rows.head[r], rows.q[r], kv,
                                           mask_request, rows.mask_query[r], mask_key[b][e % 2]);
          x = keep ? x : negative_infinity();
        } else if (check_elements &&
                   (kv >= kv_end ||
                    !variant.mask(params, rows.b, rows.head[r], rows.q[r], kv, mask_request,
                                  rows.mask_query[r], mask_key[b][e % 2]))) {
          x = negative_infinity();
        }
        s_element(s, j, e) = x;
        tile_max[r] = fmaxf(tile_max[r], x);
      }
    }
  };
  if constexpr (IsWgmmaScores<Scores>::kValue || Variant::kFloatModulo) {
    // wgmma kernels unroll it whatever the element's size: nvcc kept a loop over j for a T5
    // bias's loads (the path of the tiles where its term is not uniform), and for random_bits'
    // and bigbird's at head dim 64 (128-key tiles), which indexed S and so put it in local
    // memory for the whole kernel (256-288-byte stack frames; the wgmma accumulators are then
    // copied in and out). mma.sync kernels leave it to nvcc: forced there, document's sm_80
    // head-dim-256 kernel spilled 120 bytes instead of 76. But not around a float `%`
    // (kFloatModulo): its fmodf loop kept nvcc's rolled, S indexed by j went to local memory
    // (128-byte stack frames in five of [cliffs-full]'s generated variants at sm_80).
#pragma unroll
    for (int j0 = 0; j0 < kTiles; j0 += kBatch)
      batch(j0);
  } else {
    for (int j0 = 0; j0 < kTiles; j0 += kBatch)
      batch(j0);
  }
  if constexpr (kFoldScale) {
    tile_max[0] *= scale;
    tile_max[1] *= scale;
  }
}

// Applies the scale, the score hook and, with check_elements (a Partial tile, or one past the
// sequence), the mask to the thread's kTiles n8 tiles of S, and keeps each row's maximum of
// the scaled values in tile_max. With fold_scale S is left unscaled (exp2_factor says how to
// read it). Element e of tile j is row e / 2 and key key0 + 8 j + e % 2 (key0 holds the
// thread's quad column, key0 & ~7 is a multiple of 8 kTiles: the group terms rely on it).
// Key terms are computed once per key, kKeyBatch n8 tiles' keys at a
// time; keys past the sequence reuse the last key's terms and are masked. With kStaged they are
// read instead from `staged`, whose element 8 j + c holds key key0 + 8 j + c's (shared memory
// that a producer filled; past the sequence, the last key's terms). With a DiagonalWindow (a
// Partial tile inside the sequence of a kDiagonal mask) the mask's values are its bits.
// A variant with score_kv_uniform (Variant::kScoreKvUniform) asks it for the thread's rows and
// keys; where it holds, the score's parts are computed once per row (kUniformScore).
template <int kTiles, int kKeyBatch = 1, bool kStaged = false, class Variant, class Scores,
          class Window = NoDiagonalWindow>
__device__ __forceinline__ void score_and_mask(const Variant& variant, const MaskParams& params,
                                               float scale, const ThreadRows<Variant>& rows,
                                               int key0, int kv_end, bool check_elements, Scores& s,
                                               float (&tile_max)[2],
                                               const KeyTerms<Variant>* staged = nullptr,
                                               const Window& window = Window{}) {
  if constexpr (Variant::kScoreKvUniform) {
    const Interval heads =
        Interval::range(min(rows.head[0], rows.head[1]), max(rows.head[0], rows.head[1]));
    const Interval queries = Interval::range(min(rows.q[0], rows.q[1]), max(rows.q[0], rows.q[1]));
    const Interval keys = Interval::range(key0, static_cast<i64>(key0) + 8 * (kTiles - 1) + 1);
    if (variant.score_kv_uniform(params, rows.b, heads, queries, keys)) {
      score_and_mask_impl<false, true, kTiles, kKeyBatch, kStaged>(
          variant, params, scale, rows, key0, kv_end, check_elements, staged, s, tile_max, window);
      return;
    }
  }
  if (fold_scale<Variant>(scale)) {
    score_and_mask_impl<true, false, kTiles, kKeyBatch, kStaged>(
        variant, params, scale, rows, key0, kv_end, check_elements, staged, s, tile_max, window);
  } else {
    score_and_mask_impl<false, false, kTiles, kKeyBatch, kStaged>(
        variant, params, scale, rows, key0, kv_end, check_elements, staged, s, tile_max, window);
  }
}

// For a tile listed kAbsentKeysClass, keys [k0, k0 + kKeys) (k0 a multiple of kKeys): bit p
// set where page k0 / kPageSize + p of them lies outside the cache. Warp-wide (every lane of the
// warp calls it, the tile's class being uniform): lane p reads entry p, and one ballot gathers
// them, which keeps the registers it takes beside a live S to a few.
template <int kKeys, int kPageSize>
__device__ __forceinline__ u32 absent_pages(const PagedPrefillArgs& args, const i32* block_row,
                                            int k0, int kv_end) {
  static_assert(kPageSize == 0 || (kKeys - 1) / (kPageSize == 0 ? 1 : kPageSize) + 2 <= 32,
                "a lane per page of the tile");
  if constexpr (kPageSize == 0) {
    return 0u;
  } else {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int page = k0 / kPageSize + lane;
    const bool bad = page <= (min(k0 + kKeys, kv_end) - 1) / kPageSize &&
                     !page_in_cache(block_row[page], last_block_of(args));
    return __ballot_sync(0xffffffffu, bad);
  }
}

// After score_and_mask, for a tile listed kAbsentKeysClass: the thread's elements whose key is
// not on a page of `keys` (present_pages) become -inf, as if the mask were false there, and the
// rows' maxima are taken again (scaled as score_and_mask leaves them). A pass of its own rather
// than a term of score_and_mask's: a second copy of that for these tiles spilled the wgmma
// consumers of masks with key terms or a score hook (document, causal_alibi) at head dim 128.
template <int kTiles, class Variant, class Scores, int kPageSize>
__device__ __forceinline__ void mask_absent_keys(float scale, const PresentPages<kPageSize>& keys,
                                                 Scores& s, float (&tile_max)[2]) {
  tile_max[0] = tile_max[1] = negative_infinity();
  for (int j = 0; j < kTiles; ++j) {
    const bool present = keys.present(8 * j);
    for (int e = 0; e < 4; ++e) {
      float& x = s_element(s, j, e);
      x = present ? x : negative_infinity();
      tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
    }
  }
  if (fold_scale<Variant>(scale)) {
    tile_max[0] *= scale;
    tile_max[1] *= scale;
  }
}

// The online-softmax step of a thread's two rows (quad_row and quad_row + 8 of an m16 tile) for
// a tile whose per-thread maxima are `tile_max`: the rows' new maxima (over the quad), those
// maxima in log2 units (P = exp2(x * log2e - max_scaled)), and the factor that the running sums
// (rescaled here) and the output accumulators take.
__device__ __forceinline__ void update_row_max(const float (&tile_max)[2], float (&row_max)[2],
                                               float (&row_sum)[2], float (&max_scaled)[2],
                                               float (&rescale)[2]) {
  for (int i = 0; i < 2; ++i) {
    const float new_max = fmaxf(row_max[i], quad_max(tile_max[i]));
    // Until a row has seen a visible key its max is -inf: keep the scale finite so that
    // exp2(-inf - max) is 0 rather than NaN.
    max_scaled[i] = new_max == negative_infinity() ? 0.0f : new_max * kLog2e;
    rescale[i] = exp2f(row_max[i] * kLog2e - max_scaled[i]);
    row_max[i] = new_max;
    row_sum[i] *= rescale[i];
  }
}

// Keys of a request of seq_len keys that the block table can address: a seq_len beyond it reads
// nothing past the table.
template <int kPageSize>
__device__ __forceinline__ int kv_end_of(const PagedPrefillArgs& args, int seq_len) {
  const i64 capacity = static_cast<i64>(args.max_blocks_per_req) * kPageSize;
  return kPageSize == 0 || capacity >= seq_len ? seq_len : static_cast<int>(capacity);
}

// Shared-memory layout of the mma.sync kernels' tiles: rows of prefill_smem_row_elems(kHeadDim)
// elements. A layout gives the element offset of the 8-element chunk `chunk` of row `row`.
template <int kHeadDim>
struct PaddedRows {
  static __device__ __forceinline__ int offset(int row, int chunk) {
    return row * prefill_smem_row_elems(kHeadDim) + chunk * 8;
  }
  static __device__ __forceinline__ u32 bytes(int row, int chunk) {
    return static_cast<u32>(offset(row, chunk)) * 2u;
  }
  // The shared address of chunk 2 * j + h of a row, from `first` = the tile's address plus
  // bytes(row, h), h = 0 or 1 (what an ldmatrix lane reads at k16 step j).
  static __device__ __forceinline__ u32 pair_address(u32 first, int j) { return first + j * 32u; }
  // bytes() in unsigned arithmetic, for indices known not to be negative (the fp8 conversion's,
  // whose divisions by constants then become shifts).
  static FJ_HD constexpr u32 unsigned_bytes(u32 row, u32 chunk) {
    return (row * static_cast<u32>(prefill_smem_row_elems(kHeadDim)) + chunk * 8u) * 2u;
  }
};

// The 128-byte-swizzled layout of a tile of kRows rows (the wgmma operand layout, fj_wgmma.cuh):
// 64-column chunks of kRows * 128 bytes; in a chunk, row r at r * 128 with its eight 16-byte units
// permuted by unit ^ (r % 8). Unpadded: a 128-byte piece of a row is one aligned line of shared
// memory, so a warp's 16-byte copies of whole rows write whole lines (a padded row spans three,
// and the copies then read some global sectors twice). The permutation keeps ldmatrix's eight row
// addresses in different banks. Tiles start on a 128-byte boundary (1024 for wgmma operands).
template <int kRows>
struct Swizzled128Rows {
  static __device__ __forceinline__ u32 bytes(int row, int chunk) {
    return static_cast<u32>((chunk / 8) * kRows * 128 + row * 128 +
                            (((chunk % 8) ^ (row % 8)) * 16));
  }
  static __device__ __forceinline__ int offset(int row, int chunk) {
    return static_cast<int>(bytes(row, chunk) / 2);
  }
  static FJ_HD constexpr u32 unsigned_bytes(u32 row, u32 chunk) {
    return (chunk / 8u) * static_cast<u32>(kRows) * 128u + row * 128u +
           (((chunk % 8u) ^ (row % 8u)) * 16u);
  }
  // As PaddedRows::pair_address: the units' permutation is an XOR of bits 4-6, so step j's part
  // is a constant (the tile on a 128-byte boundary).
  static __device__ __forceinline__ u32 pair_address(u32 first, int j) {
    return (first + static_cast<u32>((j / 4) * kRows * 128)) ^ static_cast<u32>((j % 4) * 32);
  }
};

// Rows of kChunks 16-byte chunks, unpadded and unswizzled: the e4m3 rows (head_dim bytes) of
// an fp8 cache's stages in the wgmma kernel, which the copies write and the conversion reads a
// row per lanes in step (convert_e4m3_chunk), so that neither meets a bank conflict.
template <int kChunks>
struct DenseRows {
  static FJ_HD constexpr u32 unsigned_bytes(u32 row, u32 chunk) {
    return (row * static_cast<u32>(kChunks) + chunk) * 16u;
  }
  static __device__ __forceinline__ u32 bytes(int row, int chunk) {
    return unsigned_bytes(static_cast<u32>(row), static_cast<u32>(chunk));
  }
  static __device__ __forceinline__ int offset(int row, int chunk) {
    return static_cast<int>(bytes(row, chunk) / 2);
  }
};

// Rows of kChunks 16-byte chunks, unpadded, with each 128-byte line's eight units permuted so
// that eight consecutive rows' same chunk lie in eight different units: unit ^ (row % 8) where
// a row fills a line or more (kChunks 8, 16), unit ^ (row / 2 % 4) where two rows share one
// (kChunks 4). The decode kernel's e4m3 stages: ldmatrix over eight keys' same chunk (V's
// fragments) and lanes reading four chunks of two rows (K's) both meet no bank conflict.
template <int kChunks>
struct SwizzledDenseRows {
  static_assert(kChunks == 4 || kChunks % 8 == 0, "rows of half a line or whole lines");
  static FJ_HD constexpr u32 unsigned_bytes(u32 row, u32 chunk) {
    const u32 permute = kChunks == 4 ? (row / 2u) % 4u : row % 8u;
    return (row * static_cast<u32>(kChunks) + (chunk ^ permute)) * 16u;
  }
  static __device__ __forceinline__ u32 bytes(int row, int chunk) {
    return unsigned_bytes(static_cast<u32>(row), static_cast<u32>(chunk));
  }
};

// One thread's share of copying K/V tiles of kRows keys into shared memory laid out by Layout
// (its bytes(row, chunk)), kThreads threads together: 16-byte chunk `chunk` of rows row0 +
// pass * kRowsPerPass. What does not change from tile to tile (the chunk, the rows, the head's
// column) is computed once, and a tile's block-table entries are read once for K and V.
template <int kHeadDim, int kRows, int kThreads, int kPageSize, class Layout,
          bool kPageMajorAllowed = true>
struct KvTileCopy {
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static_assert(kRows % kRowsPerPass == 0, "passes cover the tile");
  int row0;
  int chunk;
  const unsigned short* base;  // the cache plus the head's and the chunk's column

  __device__ __forceinline__ KvTileCopy(int thread, const unsigned short* cache, i64 head_offset) {
    chunk = thread % kChunksPerRow;
    row0 = thread / kChunksPerRow;
    base = cache + head_offset + chunk * 8;
  }

  // Block-table entries a tile needs per thread: with pages that divide the tile (or tiles
  // that divide the pages; tiles start at multiples of kRows) a thread's passes share
  // kRows / kPageSize entries (one); otherwise one per pass.
  static constexpr bool kWholePages =
      kPageSize != 0 && (kRows % kPageSize == 0 || kPageSize % kRows == 0);
  static constexpr int kPages =
      kPageSize == 0 ? 1 : (kWholePages ? (kPageSize >= kRows ? 1 : kRows / kPageSize) : kPasses);
  // The entry of pass `pass`: keys k0 + row0 + pass * kRowsPerPass, k0 a multiple of kRows.
  // row0 < kRowsPerPass, so where a page holds whole passes the entry depends on the pass
  // alone: a constant in an unrolled loop.
  __device__ __forceinline__ int page_of(int pass) const {
    if constexpr (!kWholePages) {
      return pass;
    } else if constexpr (kPageSize >= kRows) {
      return 0;
    } else if constexpr (kPageSize % kRowsPerPass == 0) {
      return pass * kRowsPerPass / kPageSize;
    } else {
      return (row0 + pass * kRowsPerPass) / kPageSize;
    }
  }
  // Tiles of whole pages, pages of whole passes (keys k0 + row0 + pass * kRowsPerPass with k0 a
  // multiple of the page): copy() goes page by page.
  // kPageMajorAllowed: false where the copying threads lack the registers (the wgmma producer
  // of a sharded kernel: 36 bytes of spills).
  static constexpr bool kPageMajor = kPageMajorAllowed && kPageSize != 0 &&
                                     kRows % kPageSize == 0 && kPageSize % kRowsPerPass == 0 &&
                                     (kRowsPerPass % 8 == 0 || 8 % kRowsPerPass == 0);

  // The block-table entries of this thread's rows of keys [k0, k0 + kRows) (0 past kv_end;
  // nothing to read for a contiguous cache).
  __device__ __forceinline__ void read_pages(i32 (&pages)[kPages], const i32* block_row, int k0,
                                             int kv_end) const {
    if constexpr (kPageSize != 0) {
#pragma unroll
      for (int j = 0; j < kPages; ++j) {
        // The first key of entry j (of pass j when pages are not whole).
        const int key = kWholePages ? k0 + j * kPageSize : k0 + row0 + j * kRowsPerPass;
        pages[j] = key < kv_end ? block_row[static_cast<u32>(key) / kPageSize] : 0;
      }
    }
  }

  // Keys [k0, k0 + kRows) into the tile at shared address `tile`, with their pages from
  // read_pages; keys at or past kv_end, and those whose block id lies past `last_block`
  // (last_block_of: outside the cache), are zeroed and read nothing. kPageSize == 0: key j is
  // row first_row + j. Keys are never negative: the slot is an unsigned remainder.
  __device__ __forceinline__ void copy(u32 tile, i64 stride_block, i64 stride_slot,
                                       const i32 (&pages)[kPages], i64 first_row, int k0,
                                       int kv_end, u32 last_block) const {
    if constexpr (kPageMajor) {
      // Page by page, each page's passes from its address: a copy is a 64-bit add, a bounds
      // test, a select and the cp.async, its shared offset a constant. The pass loop unrolled
      // by four (head dim 128, 128-key tiles: each page's entry picked by selects, each offset
      // computed again with signed remainders) took ~24 instructions a copy, and the producer
      // warps issued as many instructions as the consumer warps (ncu, causal 16k).
      constexpr int kPassesPerPage = kPageSize / kRowsPerPass;
      // Rows 8 apart share the layout's permutation: pass p's chunk lies (rows / 8) times a
      // constant past that of the first pass of its phase (rows % 8; one phase where passes
      // are a multiple of 8 rows, 8 / kRowsPerPass where they divide 8).
      constexpr int kPhases = kRowsPerPass % 8 == 0 ? 1 : 8 / kRowsPerPass;
      constexpr u32 kEightRows = Layout::unsigned_bytes(8u, 0u) - Layout::unsigned_bytes(0u, 0u);
      u32 first[kPhases];
#pragma unroll
      for (int phase = 0; phase < kPhases; ++phase) {
        first[phase] = tile + Layout::unsigned_bytes(static_cast<u32>(row0 + phase * kRowsPerPass),
                                                     static_cast<u32>(chunk));
      }
      const i64 pass_step = static_cast<i64>(kRowsPerPass) * stride_slot;
      const i64 row0_slot = static_cast<i64>(row0) * stride_slot;
#pragma unroll
      for (int j = 0; j < kPages; ++j) {
        const i32 page = pages[j];
        const bool page_ok = page_in_cache(page, last_block);
        const unsigned short* src =
            base + static_cast<i64>(static_cast<u32>(page)) * stride_block + row0_slot;
#pragma unroll
        for (int q = 0; q < kPassesPerPage; ++q) {
          const int pass = j * kPassesPerPage + q;
          const bool valid = page_ok && k0 + row0 + pass * kRowsPerPass < kv_end;
          const u32 eights = static_cast<u32>((pass / kPhases) * kRowsPerPass * kPhases / 8);
          cp_async_16_shared(first[pass % kPhases] + eights * kEightRows, valid ? src : base,
                             valid);
          src += pass_step;
        }
      }
    } else {
      // Fully unrolled up to 8 passes; at head dim 256 (16) by four, which keeps the producer
      // within its 56 registers.
#pragma unroll(kPasses > 8 ? 4 : kPasses)
      for (int pass = 0; pass < kPasses; ++pass) {
        const int row = row0 + pass * kRowsPerPass;
        const int key = k0 + row;
        i64 offset;
        bool valid = key < kv_end;
        if constexpr (kPageSize == 0) {
          offset = (first_row + key) * stride_slot;
        } else {
          const i32 page = pick(pages, page_of(pass));
          valid = valid && page_in_cache(page, last_block);
          offset = static_cast<i64>(static_cast<u32>(page)) * stride_block +
                   static_cast<i64>(static_cast<u32>(key) % kPageSize) * stride_slot;
        }
        cp_async_16_shared(tile + Layout::bytes(row, chunk), valid ? base + offset : base, valid);
      }
    }
  }
};

// Issues the cp.async copies of the block's kRows query rows into `q_tile`, laid out by Layout;
// rows past the request are zeroed. The caller commits.
template <int kHeadDim, int kRows, int kThreads, class Layout = PaddedRows<kHeadDim>,
          bool kContiguous = false>
__device__ __forceinline__ void load_q_rows(unsigned short* q_tile, const PagedPrefillArgs& args,
                                            const PackedRows& block) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  const unsigned short* q = static_cast<const unsigned short*>(args.q);
  if constexpr (kContiguous) q += block.q_batch_offset;
  for (int c = threadIdx.x; c < kRows * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    const int packed = block.row0 + row;
    const bool valid = packed < block.packed_rows;
    const unsigned short* src = q;
    if (valid) {
      const i64 token = block.token(packed);
      const i64 head = block.query_head(packed);
      src = q + token * args.q_stride_token + head * args.q_stride_head + chunk * 8;
    }
    cp_async_16(q_tile + Layout::offset(row, chunk), src, valid);
  }
}

// Copies kPrefillBlockN rows of one kv head starting at key k0 into shared memory; rows at or
// past `kv_end`, and those whose block id lies past `last_block` (last_block_of), are zeroed
// (never read), so block-table entries past the sequence are untouched. kPageSize == 0 is the
// contiguous (encoder) layout: key j of the request is row `first_row + j` at `stride_slot`, and
// there is no block table.
template <int kHeadDim, int kPageSize>
__device__ __forceinline__ void load_kv_tile(unsigned short* tile, const unsigned short* cache,
                                             i64 stride_block, i64 stride_slot, i64 head_offset,
                                             const i32* block_row, i64 first_row, int k0,
                                             int kv_end, u32 last_block) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kChunks = kPrefillBlockN * kChunksPerRow;
  // From 8 passes (head dim 128 and up; fp8 256) unrolled by two, below not at all. Left to
  // the compiler (by four), the sm_80 head-dim-256 kernels spilled 24-112 bytes, and causal
  // with softcap at head dim 64 4 bytes.
  constexpr int kPasses = kChunks / kPrefillThreads;
#pragma unroll(kPasses >= 8 ? 2 : 1)
  for (int c = threadIdx.x; c < kChunks; c += kPrefillThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    const int key = k0 + row;
    bool valid = key < kv_end;
    const unsigned short* src = cache;
    if (valid) {
      if constexpr (kPageSize == 0) {
        src = cache + (first_row + key) * stride_slot + head_offset + chunk * 8;
      } else {
        const i32 block = block_row[key / kPageSize];
        valid = page_in_cache(block, last_block);
        src = valid ? cache + static_cast<i64>(block) * stride_block +
                          (key % kPageSize) * stride_slot + head_offset + chunk * 8
                    : cache;
      }
    }
    cp_async_16(tile + PaddedRows<kHeadDim>::offset(row, chunk), src, valid);
  }
}

// A direct launch's grid has the rows of args.max_query_len query tokens per request: a
// request with more (the host's copy was wrong) would leave rows unwritten. Its rows are zeroed
// instead of computed (out 0, lse -inf, as rows with no visible key), and it is reported
// (DebugReport::QueryLength: request, query rows, max_query_len). Every CTA of the request and
// kv head (its row block `block`, read by packed_rows_of) zeroes row blocks blockIdx.x,
// blockIdx.x + gridDim.x, ... of the kv head's rows, with all its threads (every role of the
// wgmma kernel). Returns whether the request is too long; planned launches are never.
template <int kBlockM, int kHeadDim, int kPageSize>
__device__ __forceinline__ bool zero_long_request(const PagedPrefillArgs& args,
                                                  const PackedRows& block, int request) {
  const int query_len = block.packed_rows / block.group;
  if (args.work_items != nullptr || query_len <= args.max_query_len) return false;
  if (blockIdx.x == 0 && block.kv_head == 0 && threadIdx.x == 0) {
    report_debug(debug_word(args), DebugReport::QueryLength, request, query_len,
                 args.max_query_len);
  }
  constexpr int kChunksPerRow = kHeadDim / 8;
  unsigned short* out =
      static_cast<unsigned short*>(args.out) + out_batch_offset<kPageSize>(args, request);
  for (int row0 = static_cast<int>(blockIdx.x) * kBlockM; row0 < block.packed_rows;
       row0 += static_cast<int>(gridDim.x) * kBlockM) {
    for (int c = threadIdx.x; c < kBlockM * kChunksPerRow; c += blockDim.x) {
      const int packed = row0 + c / kChunksPerRow;
      if (packed >= block.packed_rows) break;
      const i64 token = block.token(packed);
      const i64 head = block.head(packed);
      *reinterpret_cast<uint4*>(out + token * args.out_stride_token + head * args.out_stride_head +
                                (c % kChunksPerRow) * 8) = make_uint4(0u, 0u, 0u, 0u);
      if (args.lse != nullptr && c % kChunksPerRow == 0) {
        args.lse[token * args.lse_stride_token + head] = negative_infinity();
      }
    }
  }
  return true;
}

// Packed query rows [row0, row0 + kPrefillBlockM) of `request` against kv head `kv_head`.
template <class Variant, int kHeadDim, bool kBF16, int kPageSize, bool kKvFp8>
__device__ void prefill_block(const PagedPrefillArgs& args, const int request, const int kv_head,
                              const int row0) {
  static_assert(kHeadDim % 16 == 0, "head dim must be a multiple of 16");
  static_assert(kPageSize % 16 == 0, "page size must be a multiple of 16 (0: contiguous)");
  constexpr int kRow = prefill_smem_row_elems(kHeadDim);
  constexpr int kTileElems = kPrefillBlockM * kRow;
  constexpr int kKSteps = kHeadDim / 16;        // k16 steps of Q·K^T
  constexpr int kNTilesS = kPrefillBlockN / 8;  // n8 tiles of S
  constexpr int kNTilesO = kHeadDim / 8;        // n8 tiles of O

  extern __shared__ __align__(16) unsigned char fj_prefill_smem[];
  unsigned short* q_tile = reinterpret_cast<unsigned short*>(fj_prefill_smem);
  unsigned short* k_tile = q_tile + kTileElems;
  unsigned short* v_tile = k_tile + kTileElems;
  // An fp8 cache: its e4m3 K and V tiles (padded rows of head_dim bytes, in 16-bit units),
  // which each thread converts, the chunks it copied, into the 16-bit tiles.
  constexpr int kUnit = kKvFp8 ? 2 : 1;  // cache elements per 16-bit unit
  constexpr int kFp8TileElems = kPrefillBlockM * prefill_smem_row_elems(kHeadDim / 2);
  unsigned short* const k_copy_tile = kKvFp8 ? v_tile + kTileElems : k_tile;
  unsigned short* const v_copy_tile = kKvFp8 ? k_copy_tile + kFp8TileElems : v_tile;

  const Variant variant = variant_for<Variant>(args);
  const PackedRows block = packed_rows_of(args, request, kv_head, row0, kPrefillBlockM,
                                          kPageSize == 0, Variant::kUsesHead);
  if (row0 >= block.packed_rows) return;
  if (zero_long_request<kPrefillBlockM, kHeadDim, kPageSize>(args, block, request)) return;
  const int key_begin = block.key_begin;
  const int packed_rows = block.packed_rows;
  const int seq_len = block.seq_len;
  const int q_lo = block.q_lo();
  const int q_hi = block.q_hi();
  const int head_lo = block.head_lo();
  const int head_hi = block.head_hi();

  load_q_rows<kHeadDim, kPrefillBlockM, kPrefillThreads, PaddedRows<kHeadDim>, kPageSize == 0>(
      q_tile, args, block);
  // Only the tiles of the keys the mask's kv range admits are visited
  // (docs/architecture.md#tile-analysis); inside it, classify() still skips Empty tiles. Computed
  // while Q's copies are in flight, before Q's fragments and O take registers: a range of long
  // any/all chains spilled beside them.
  const KvRange range =
      kv_range_for_heads(variant, args.params, request, head_lo, head_hi, q_lo, q_hi);
  cp_async_wait_all();
  __syncthreads();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quad_row = lane / 4;  // row within the 8-row half of the warp's 16 rows
  const int quad_col = lane % 4;

  // This thread's two packed rows (quad_row and quad_row + 8 of the warp's 16).
  const int first_row = row0 + warp * 16 + quad_row;
  bool row_valid[2];
  for (int i = 0; i < 2; ++i)
    row_valid[i] = first_row + i * 8 < packed_rows;
  ThreadRows<Variant> rows;
  const float scale = score_scale<kKvFp8>(args, kv_head);
  const float factor = exp2_factor<Variant>(scale);  // of exp2's argument
  rows.set(variant, args.params, request, block, first_row);

  // Q fragments stay in registers across the K/V loop up to head dim 128; beyond, the O
  // accumulator needs those registers and Q is re-read from shared memory for each tile.
  constexpr bool kQInRegisters = kHeadDim <= 128;
  constexpr int kQRegSteps = kQInRegisters ? kKSteps : 1;
  const unsigned short* q_warp = q_tile + (warp * 16 + lane % 16) * kRow + (lane / 16) * 8;
  u32 q_frag[kQRegSteps][4];
  if constexpr (kQInRegisters) {
    for (int ks = 0; ks < kKSteps; ++ks)
      ldmatrix_x4(q_frag[ks], q_warp + ks * 16);
  }

  float o[kNTilesO][4];
  for (int j = 0; j < kNTilesO; ++j)
    o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  const float neg_inf = negative_infinity();
  float row_max[2] = {neg_inf, neg_inf};
  float row_sum[2] = {0.0f, 0.0f};

  const i32* block_row =
      kPageSize == 0 ? nullptr
                     : args.block_table + static_cast<i64>(request) * args.block_table_stride;
  const unsigned short* k_cache = static_cast<const unsigned short*>(args.k_cache);
  const unsigned short* v_cache = static_cast<const unsigned short*>(args.v_cache);
  const i64 k_head_offset = (static_cast<i64>(kv_head) * args.k_stride_head +
                             kv_batch_offset<kPageSize>(args.k_stride_block, request)) /
                            kUnit;
  const i64 v_head_offset = (static_cast<i64>(kv_head) * args.v_stride_head +
                             kv_batch_offset<kPageSize>(args.v_stride_block, request)) /
                            kUnit;

  const int kv_end = kv_end_of<kPageSize>(args, seq_len);
  const int visible_end = min(range.hi, kv_end);
  const int first_tile = range.lo / kPrefillBlockN;
  const int end_tile =
      range.lo < visible_end ? (visible_end + kPrefillBlockN - 1) / kPrefillBlockN : first_tile;
  // Tiles are classified kPrefillThreads at a time, one per thread, into shared memory: the
  // CTA's threads share the work instead of each repeating it for every tile (a classify that
  // reads array summaries costs tens of loads).
  __shared__ TileClass tile_classes[kPrefillThreads];
  // Each key's terms of the current tile, where the variant's are staged (kStagedKeyTerms).
  constexpr bool kStageKeys = kStagedKeyTerms<Variant, false>;
  __shared__ KeyTerms<Variant> staged_keys[kStageKeys ? kPrefillBlockN : 1];
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * kPrefillBlockN;
    const int slot = (tile - first_tile) % kPrefillThreads;
    if (slot == 0) {
      __syncthreads();  // every thread is done with the previous batch of classes
      const int own = tile + static_cast<int>(threadIdx.x);
      if (own < end_tile) {
        const int own_k0 = own * kPrefillBlockN;
        tile_classes[threadIdx.x] = classify_tile<kPrefillBlockN, kPageSize>(
            variant, args, block_row, request, head_lo, head_hi, q_lo, q_hi, own_k0,
            min(own_k0 + kPrefillBlockN, kv_end));
      }
      __syncthreads();
    }
    const TileClass tile_class = tile_classes[slot];
    if (tile_class == TileClass::Empty) continue;

    __syncthreads();  // every warp is done reading the previous K/V tile
    load_kv_tile<kHeadDim / kUnit, kPageSize>(k_copy_tile, k_cache, args.k_stride_block / kUnit,
                                              args.k_stride_slot / kUnit, k_head_offset, block_row,
                                              key_begin, k0, kv_end, last_block_of(args));
    load_kv_tile<kHeadDim / kUnit, kPageSize>(v_copy_tile, v_cache, args.v_stride_block / kUnit,
                                              args.v_stride_slot / kUnit, v_head_offset, block_row,
                                              key_begin, k0, kv_end, last_block_of(args));
    // Read before S is live: at head dim 256 the kernel has no register to spare beside it.
    const u32 absent = has_absent_keys(tile_class)
                           ? absent_pages<kPrefillBlockN, kPageSize>(args, block_row, k0, kv_end)
                           : 0u;
    cp_async_wait_all();
    if constexpr (kKvFp8) {
      // The chunks this thread copied (load_kv_tile's order), now landed, into 16-bit rows.
      using From = PaddedRows<kHeadDim / 2>;
      using To = PaddedRows<kHeadDim>;
      constexpr int kChunks = kHeadDim / 16;  // 16-byte chunks of an e4m3 row
      constexpr u32 kItems = kPrefillBlockN * kChunks;
#pragma unroll 1  // unrolled, the head-dim-96 kernel spills
      for (u32 c = threadIdx.x; c < kItems; c += kPrefillThreads) {
        const u32 row = c / kChunks;
        const u32 chunk = c % kChunks;
        const u32 from = From::unsigned_bytes(row, chunk);
        const u32 low = To::unsigned_bytes(row, 2 * chunk);
        const u32 high = To::unsigned_bytes(row, 2 * chunk + 1);
        convert_e4m3_chunk<kBF16>(smem_address(k_copy_tile) + from, smem_address(k_tile) + low,
                                  smem_address(k_tile) + high);
        convert_e4m3_chunk<kBF16>(smem_address(v_copy_tile) + from, smem_address(v_tile) + low,
                                  smem_address(v_tile) + high);
      }
    }
    const bool check_elements = checks_elements(tile_class) || k0 + kPrefillBlockN > kv_end;
    if constexpr (kStageKeys) {
      // Key k's terms by thread k, for every warp that meets the key (the score's on every
      // tile, the mask's where elements are checked); keys past the sequence take the last
      // key's, as score_and_mask's own do. The barrier below publishes them.
      if (threadIdx.x < kPrefillBlockN && (check_elements || Variant::kHasScore)) {
        const int kv = min(k0 + static_cast<int>(threadIdx.x), kv_end - 1);
        KeyTerms<Variant> terms{};
        terms.score = variant.score_key_terms(args.params, request, kv,
                                              variant.score_request_terms(args.params, request));
        if (check_elements) {
          terms.mask = variant.mask_key_terms(args.params, request, kv,
                                              variant.mask_request_terms(args.params, request));
        }
        staged_keys[threadIdx.x] = terms;
      }
    }
    __syncthreads();

    // S = Q K^T for the warp's 16 rows and the tile's 64 keys.
    float s[kNTilesS][4];
    for (int j = 0; j < kNTilesS; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    for (int ks = 0; ks < kKSteps; ++ks) {
      u32 q_smem_frag[4];
      if constexpr (!kQInRegisters) ldmatrix_x4(q_smem_frag, q_warp + ks * 16);
      const u32(&a)[4] = kQInRegisters ? q_frag[kQInRegisters ? ks : 0] : q_smem_frag;
      for (int jp = 0; jp < kNTilesS / 2; ++jp) {
        u32 b[4];
        const unsigned short* address =
            k_tile + (jp * 16 + lane % 8 + (lane / 16) * 8) * kRow + ks * 16 + ((lane / 8) % 2) * 8;
        ldmatrix_x4(b, address);
        mma_16816<kBF16>(s[2 * jp], a, b[0], b[1]);
        mma_16816<kBF16>(s[2 * jp + 1], a, b[2], b[3]);
      }
    }

    // Scale, score_mod, mask (per element only where the tile is Partial or runs past the
    // sequence), then the online-softmax update.
    float tile_max[2] = {neg_inf, neg_inf};
    // The staged terms of the thread's keys k0 + quad_col * 2 + 8 j + c (unused unless staged).
    const KeyTerms<Variant>* const staged = kStageKeys ? staged_keys + quad_col * 2 : nullptr;
    if constexpr (Variant::kRolledMask) {
      // The element part is a loop: one loop over the elements into bits (element_bits.cuh).
      const auto bits = tile_element_bits<kNTilesS, kStageKeys>(
          check_elements, variant, args.params, rows, k0 + quad_col * 2, kv_end, staged);
      score_and_mask<kNTilesS, 1, kStageKeys>(variant, args.params, scale, rows, k0 + quad_col * 2,
                                              kv_end, check_elements, s, tile_max, staged, bits);
    } else {
      score_and_mask<kNTilesS, 1, kStageKeys>(variant, args.params, scale, rows, k0 + quad_col * 2,
                                              kv_end, check_elements, s, tile_max, staged);
    }
    if (kPageSize != 0 && has_absent_keys(tile_class)) {
      mask_absent_keys<kNTilesS, Variant>(
          scale, present_pages<kPrefillBlockN, kPageSize>(absent, k0, quad_col * 2), s, tile_max);
    }
    float rescale[2];
    float max_scaled[2];
    update_row_max(tile_max, row_max, row_sum, max_scaled, rescale);
    for (int j = 0; j < kNTilesO; ++j) {
      o[j][0] *= rescale[0];
      o[j][1] *= rescale[0];
      o[j][2] *= rescale[1];
      o[j][3] *= rescale[1];
    }
    for (int j = 0; j < kNTilesS; ++j) {
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[j][e] * factor - max_scaled[e / 2]);
        s[j][e] = p;
        row_sum[e / 2] += p;
      }
    }

    // O += P V: the S accumulator layout is the A-operand layout of the next MMA, two n8 tiles
    // of S forming one k16 step.
    for (int kk = 0; kk < kPrefillBlockN / 16; ++kk) {
      u32 p_frag[4];
      p_frag[0] = pack_2x16<kBF16>(s[2 * kk][0], s[2 * kk][1]);
      p_frag[1] = pack_2x16<kBF16>(s[2 * kk][2], s[2 * kk][3]);
      p_frag[2] = pack_2x16<kBF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p_frag[3] = pack_2x16<kBF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      for (int dp = 0; dp < kNTilesO / 2; ++dp) {
        u32 b[4];
        const unsigned short* address =
            v_tile + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kRow + dp * 16 + (lane / 16) * 8;
        ldmatrix_x4_trans(b, address);
        mma_16816<kBF16>(o[2 * dp], p_frag, b[0], b[1]);
        mma_16816<kBF16>(o[2 * dp + 1], p_frag, b[2], b[3]);
      }
    }
  }

  // Normalise and write. Each quad holds a full row; the row sum is reduced across it.
  unsigned short* out =
      static_cast<unsigned short*>(args.out) + out_batch_offset<kPageSize>(args, request);
  for (int i = 0; i < 2; ++i) {
    const float total = quad_sum(row_sum[i]);
    if (!row_valid[i]) continue;
    const int packed = row0 + warp * 16 + quad_row + i * 8;
    const i64 token = block.token(packed);
    const RowFinish finished = finish_row(row_max[i], total, sink_of(args.sinks, rows.head[i]));
    const float inv = finished.scale * value_scale<kKvFp8>(args, kv_head);
    u32* out_row = reinterpret_cast<u32*>(out + token * args.out_stride_token +
                                          static_cast<i64>(rows.head[i]) * args.out_stride_head);
    for (int j = 0; j < kNTilesO; ++j) {
      out_row[j * 4 + quad_col] = pack_2x16<kBF16>(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
    if (args.lse != nullptr && quad_col == 0) {
      args.lse[token * args.lse_stride_token + rows.head[i]] = finished.lse;
    }
  }
}

// Runs `block(request, kv_head, row0)` for the CTA's work: one block of kBlockM rows per CTA of
// the grid (row tile, request, kv head), or, for a planned launch, a persistent grid whose CTAs
// take the work list's items in turn.
// `block` has one call site, so that it is inlined once.
template <int kBlockM, class Block>
__device__ __forceinline__ void run_prefill_work(const PagedPrefillArgs& args, const Block& block) {
  const bool planned = args.work_items != nullptr;
  const int count = planned ? args.work_counts->prefill : 1;
  const int step = planned ? static_cast<int>(gridDim.x) : 1;
  for (int i = planned ? static_cast<int>(blockIdx.x) : 0; i < count; i += step) {
    int request = static_cast<int>(blockIdx.y);
    int kv_head = static_cast<int>(blockIdx.z);
    // Direct launches take a request's blocks last first: under a causal mask the blocks
    // that see the most keys start first, and short ones fill the last wave.
    int row0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * kBlockM;
    if (planned) {
      const PrefillWorkItem item = args.work_items[i];
      request = item.request;
      kv_head = item.kv_head;
      row0 = item.row0;
      cta_barrier();  // every warp is done with the previous item's shared memory
    }
    block(request, kv_head, row0);
  }
}

// The mma.sync kernel (sm_80 and later).
template <class Variant, int kHeadDim, bool kBF16, int kPageSize, bool kKvFp8 = false>
__device__ void paged_prefill(const PagedPrefillArgs& args) {
  run_prefill_work<kPrefillBlockM>(args, [&](int request, int kv_head, int row0) {
    prefill_block<Variant, kHeadDim, kBF16, kPageSize, kKvFp8>(args, request, kv_head, row0);
  });
}

}  // namespace fj
