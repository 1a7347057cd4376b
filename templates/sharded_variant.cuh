// Context parallelism in the CUDA kernels (docs/context_parallel.md): a call that holds one shard
// of each request's keys runs the kernels of ShardedVariant<V>, which presents the shard to the
// kernels as an ordinary variant whose keys are the shard's keys (0 to its seq_len) and which
// hands the mask and score V's true positions. The kernels themselves are unchanged: they tile,
// load and classify shard keys as they would a whole request's, and every place they consult
// the variant goes through the map below.
//
// - Keys: shard key j sits at position offsets[b] + (j / I) * N * I + R * I + j % I
//   (ShardPositions, kernel_args.cuh). The map is increasing, so a run of keys [k0, k1) lies
//   inside the positions [position(k0), position(k1 - 1)], and classify on that hull is sound:
//   Full or Empty over the hull is Full or Empty over the keys inside it.
// - Queries: the kernel places a request's queries at the end of its own keys (seq_len); the
//   request's true end is global_seq_lens[b], so positions shift by the difference.
// - kv_range: V's range of positions [lo, hi) maps back to the keys whose positions lie in it,
//   [keys_below(lo), keys_below(hi)).
// - A translation-invariant mask (kDiagonal) is not one over shard keys: the flag is off, and
//   Partial tiles evaluate the mask per element.
// - A key-uniform score (kScoreKvUniform): V's test on the hull of the keys' positions, as
//   classify; its term is then taken at the tile's first key, whose position its key terms hold.
// The positions of one request are computed with its terms (mask_request_terms and
// score_request_terms carry the request's offset and query shift), a key's position once with
// its key terms.
#pragma once

#include "fj_ops.cuh"
#include "kernel_args.cuh"

namespace fj {

// The variant a kernel runs for its arguments: V itself, or (ShardedVariant) one that reads the
// call's shard layout.
template <class V>
struct VariantFor {
  __device__ __forceinline__ static V make(const PagedPrefillArgs&) { return V{}; }
};
template <class V>
__device__ __forceinline__ V variant_for(const PagedPrefillArgs& args) {
  return VariantFor<V>::make(args);
}

// Where one request's shard keys and query rows sit in the whole request, in 32-bit arithmetic
// (positions are below the request's global length, itself an int32).
struct ShardMap {
  i32 offset;   // the position of the request's first position (offsets[b], or 0)
  i32 q_shift;  // global_seq_lens[b] - seq_lens[b]: a query row's position minus its local one
};

template <class V>
struct ShardedVariant {
  const i32* offsets;  // null: every shard starts at position 0
  const i32* global_seq_lens;
  const i32* seq_lens;
  i32 rank_base;  // rank * interleave
  i32 period;     // count * interleave
  i32 interleave;
  V inner;

  static constexpr bool kHasScore = V::kHasScore;
  static constexpr bool kUsesHead = V::kUsesHead;
  static constexpr bool kDiagonal = false;
  static constexpr int kElementOperations = V::kElementOperations;
  static constexpr bool kKeyTermsLoad = V::kKeyTermsLoad;
  // 64-key tiles: the shard map's key terms beside a 128-key tile's S made ptxas spill
  // (chunked 36 bytes, causal_alibi 24 at head dim 128).
  static constexpr bool kWideKeyTiles = false;
  // At head dim 64, 128-key tiles as before the variants chose (V's choice reads positions'
  // structure, which shards interleave).
  static constexpr bool kNarrowKeyTilesHd64 = false;
  static constexpr bool kRolledMask = V::kRolledMask;
  static constexpr bool kKeyTermsLoop = V::kKeyTermsLoop;
  static constexpr bool kScoreKvUniform = V::kScoreKvUniform;
  // No group terms: the shard map does not keep groups of keys aligned.
  static constexpr int kMaskGroupKeys = 0;
  static constexpr bool kFloatModulo = V::kFloatModulo;
  // The copies by passes: page by page the producer of causal at head dim 128 spilled 36 bytes.
  static constexpr bool kPageMajorCopies = false;

  __device__ __forceinline__ ShardMap map(int b) const {
    return ShardMap{offsets != nullptr ? __ldg(offsets + b) : 0,
                    __ldg(global_seq_lens + b) - __ldg(seq_lens + b)};
  }
  __device__ __forceinline__ int position(const ShardMap& m, int key) const {
    const int run = key / interleave;
    return m.offset + run * period + rank_base + (key - run * interleave);
  }
  // The shard's keys whose positions lie below `position` (ShardPositions::keys_below).
  __device__ __forceinline__ int keys_below(const ShardMap& m, i64 position) const {
    const i64 relative = position - m.offset;
    if (relative <= 0) return 0;
    const i64 in_period = relative % period - rank_base;
    const i64 keys = relative / period * interleave + (in_period < 0            ? 0
                                                       : in_period > interleave ? interleave
                                                                                : in_period);
    return keys > 0x7fffffff ? 0x7fffffff : static_cast<int>(keys);
  }

  template <class Inner>
  struct RequestTerms {
    Inner inner;
    ShardMap map;
  };
  template <class Inner>
  struct KeyTerms {
    Inner inner;
    int kv;  // the key's position
  };
  using MaskRequestTerms = RequestTerms<typename V::MaskRequestTerms>;
  using MaskQueryTerms = typename V::MaskQueryTerms;
  using MaskKeyTerms = KeyTerms<typename V::MaskKeyTerms>;
  using ScoreRequestTerms = RequestTerms<typename V::ScoreRequestTerms>;
  using ScoreQueryTerms = typename V::ScoreQueryTerms;
  using ScoreKeyTerms = KeyTerms<typename V::ScoreKeyTerms>;

  __device__ __forceinline__ MaskRequestTerms mask_request_terms(const MaskParams& p, int b) const {
    return MaskRequestTerms{inner.mask_request_terms(p, b), map(b)};
  }
  __device__ __forceinline__ MaskQueryTerms mask_query_terms(const MaskParams& p, int b, int h,
                                                             int q,
                                                             const MaskRequestTerms& r) const {
    return inner.mask_query_terms(p, b, h, q + r.map.q_shift, r.inner);
  }
  __device__ __forceinline__ MaskKeyTerms mask_key_terms(const MaskParams& p, int b, int kv,
                                                         const MaskRequestTerms& r) const {
    const int position_kv = position(r.map, kv);
    return MaskKeyTerms{inner.mask_key_terms(p, b, position_kv, r.inner), position_kv};
  }
  __device__ __forceinline__ ScoreRequestTerms score_request_terms(const MaskParams& p,
                                                                   int b) const {
    return ScoreRequestTerms{inner.score_request_terms(p, b), map(b)};
  }
  __device__ __forceinline__ ScoreQueryTerms score_query_terms(const MaskParams& p, int b, int h,
                                                               int q,
                                                               const ScoreRequestTerms& r) const {
    return inner.score_query_terms(p, b, h, q + r.map.q_shift, r.inner);
  }
  __device__ __forceinline__ ScoreKeyTerms score_key_terms(const MaskParams& p, int b, int kv,
                                                           const ScoreRequestTerms& r) const {
    const int position_kv = position(r.map, kv);
    return ScoreKeyTerms{inner.score_key_terms(p, b, position_kv, r.inner), position_kv};
  }

  // The element hooks: q as the kernel placed it, the key's position from its terms.
  __device__ __forceinline__ bool mask(const MaskParams& p, int b, int h, int q, int,
                                       const MaskRequestTerms& r, const MaskQueryTerms& query,
                                       const MaskKeyTerms& key) const {
    return inner.mask(p, b, h, q + r.map.q_shift, key.kv, r.inner, query, key.inner);
  }
  __device__ __forceinline__ float score(const MaskParams& p, float s, int b, int h, int q, int,
                                         const ScoreRequestTerms& r, const ScoreQueryTerms& query,
                                         const ScoreKeyTerms& key) const {
    return inner.score(p, s, b, h, q + r.map.q_shift, key.kv, r.inner, query, key.inner);
  }
  __device__ __forceinline__ bool mask(const MaskParams& p, int b, int h, int q, int kv) const {
    const ShardMap m = map(b);
    return inner.mask(p, b, h, q + m.q_shift, position(m, kv));
  }
  __device__ __forceinline__ float score(const MaskParams& p, float s, int b, int h, int q,
                                         int kv) const {
    const ShardMap m = map(b);
    return inner.score(p, s, b, h, q + m.q_shift, position(m, kv));
  }

  // Queries [q0, q1) against shard keys [k0, k1): V's class over the hull of their positions.
  __device__ __forceinline__ TileClass classify(const MaskParams& p, int b, int h, int q0, int q1,
                                                int k0, int k1) const {
    if (q0 >= q1 || k0 >= k1) return TileClass::Empty;
    const ShardMap m = map(b);
    return inner.classify(p, b, h, q0 + m.q_shift, q1 + m.q_shift, position(m, k0),
                          position(m, k1 - 1) + 1);
  }
  // Whether V's score term is one value over the positions of shard keys `kv` (their hull) for
  // the query rows `q` (local, shifted as classify's) and heads `h`.
  __device__ __forceinline__ bool score_kv_uniform(const MaskParams& p, int b, Interval h,
                                                   Interval q, Interval kv) const {
    const ShardMap m = map(b);
    return inner.score_kv_uniform(p, b, h, Interval::range(q.lo + m.q_shift, q.hi + m.q_shift),
                                  Interval::range(position(m, static_cast<int>(kv.lo)),
                                                  position(m, static_cast<int>(kv.hi))));
  }
  // Shard keys [lo, hi) whose positions V's kv_range allows queries [q0, q1).
  __device__ __forceinline__ KvRange kv_range(const MaskParams& p, int b, int h, int q0,
                                              int q1) const {
    if (q0 >= q1) return {0, 0};
    const ShardMap m = map(b);
    const KvRange positions = inner.kv_range(p, b, h, q0 + m.q_shift, q1 + m.q_shift);
    if (positions.lo >= positions.hi) return {0, 0};
    return {keys_below(m, positions.lo), keys_below(m, positions.hi)};
  }
};

template <class V>
struct VariantFor<ShardedVariant<V>> {
  __device__ __forceinline__ static ShardedVariant<V> make(const PagedPrefillArgs& args) {
    const KvShard& shard = args.shard;
    return ShardedVariant<V>{shard.offsets,
                             shard.global_seq_lens,
                             args.seq_lens,
                             shard.rank * shard.interleave,
                             shard.count * shard.interleave,
                             shard.interleave,
                             V{}};
  }
};

}  // namespace fj
