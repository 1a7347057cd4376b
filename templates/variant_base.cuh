// The defaults of the generated variant structs (docs/architecture.md#kernel-contract). The
// emitter (compiler/codegen/cuda/emit_cuda.cpp) writes one struct per (mask, score) that derives
// from VariantBase<itself> and defines only what its mask and score need: the constants that
// differ from these, the term structs and term hooks of the levels that have terms, the mask's
// element hook, the score's where there is one, classify and kv_range. The kernel templates call
// the full set below on every variant.
#pragma once

#include "fj_ops.cuh"

namespace fj {

template <class Derived>
struct VariantBase {
  // Whether the variant has a score (the kernels skip score_mod's hooks otherwise).
  static constexpr bool kHasScore = false;
  // Whether the mask reads `h`: tile classes and kv ranges may differ between heads.
  static constexpr bool kUsesHead = false;
  // Whether the mask reads q and kv only through q - kv (then its value at q, kv is its value at
  // q - kv, 0: one value per diagonal).
  static constexpr bool kDiagonal = false;
  // Operations per element left after the split of the mask and score into terms computed once
  // per request, query row and key (the Hopper kernel's tile width follows it).
  static constexpr int kElementOperations = 0;
  // Whether the key terms read runtime arrays (the Hopper kernel's producer stages them).
  static constexpr bool kKeyTermsLoad = false;
  // Whether the Hopper kernel may take 128-key tiles at head dim 128: no loads per element, and
  // the mask's structure computes little more with them (emit_cuda.cpp, wide_key_tiles).
  static constexpr bool kWideKeyTiles = false;
  // Whether it keeps 64-key tiles at head dim 64, where 128 is the default: a mask whose
  // structure computes much more with 128, or whose element part loads (same place).
  static constexpr bool kNarrowKeyTilesHd64 = false;
  // Each array slot's summary axis (fj::SummaryAxis), which decides how the generated interval
  // hooks bound a read over a tile (fj::ival::load_int<axis>): none by default.
  static constexpr int kArraySummaryAxes[kMaxArrayParams] = {};
  // Whether the mask's element part is a loop (a rolled any/all): the kernels then evaluate a
  // tile's elements by one loop into bits (element_bits.cuh) instead of inlining it per element.
  static constexpr bool kRolledMask = false;
  // Whether the key terms hold a loop (a rolled any/all of the key alone): the kernels then
  // compute each key's once per tile into shared memory (kStagedKeyTerms, paged_prefill.cuh).
  static constexpr bool kKeyTermsLoop = false;
  // Whether the score is s plus (or minus) a term that does not read s, and the variant has its
  // own score_kv_uniform for that term (emit_cuda.cpp, KvUniformCheck).
  static constexpr bool kScoreKvUniform = false;
  // Keys per group of the mask's group terms (emit_cuda.cpp, SplitHook): element operations
  // that read arrays and read kv only through kv / C for powers of two C >= 8 (random_bits'
  // `bits[q, kv / 32]`), so one value per row and aligned group of this many keys. 0: none.
  // Only a variant with group terms has MaskGroupTerms, mask_group_terms and the element hook
  // that takes them; the kernels name them under kMaskGroupKeys > 0.
  static constexpr int kMaskGroupKeys = 0;
  // Whether the key terms or element parts take a float `%` (fmod_floor: fmodf, a loop in
  // libdevice): nvcc then keeps a kernel's loop over a tile's n8 tiles rolled, and the kernels
  // unroll it themselves (score_and_mask).
  static constexpr bool kFloatModulo = false;
  // Whether the wgmma producer may copy K/V page by page (KvTileCopy::kPageMajor), and the
  // decode kernel at head dims over 128; the sharded wrapper's copying threads spilled with it.
  static constexpr bool kPageMajorCopies = true;

  // Terms of one request, of one query row, of one key, for the mask and for the score: none
  // unless the variant defines its own.
  struct MaskRequestTerms {};
  struct MaskQueryTerms {};
  struct MaskKeyTerms {};
  struct ScoreRequestTerms {};
  struct ScoreQueryTerms {};
  struct ScoreKeyTerms {};
  __device__ __forceinline__ MaskRequestTerms mask_request_terms(const MaskParams&, int) const {
    return MaskRequestTerms{};
  }
  template <class RequestTerms>  // the variant's own, where it has request terms
  __device__ __forceinline__ MaskQueryTerms mask_query_terms(const MaskParams&, int, int, int,
                                                             const RequestTerms&) const {
    return MaskQueryTerms{};
  }
  template <class RequestTerms>
  __device__ __forceinline__ MaskKeyTerms mask_key_terms(const MaskParams&, int, int,
                                                         const RequestTerms&) const {
    return MaskKeyTerms{};
  }
  __device__ __forceinline__ ScoreRequestTerms score_request_terms(const MaskParams&, int) const {
    return ScoreRequestTerms{};
  }
  template <class RequestTerms>
  __device__ __forceinline__ ScoreQueryTerms score_query_terms(const MaskParams&, int, int, int,
                                                               const RequestTerms&) const {
    return ScoreQueryTerms{};
  }
  template <class RequestTerms>
  __device__ __forceinline__ ScoreKeyTerms score_key_terms(const MaskParams&, int, int,
                                                           const RequestTerms&) const {
    return ScoreKeyTerms{};
  }

  // The score without a score_mod: the scaled dot product itself.
  __device__ __forceinline__ float score(const MaskParams&, float s, int, int, int, int,
                                         const ScoreRequestTerms&, const ScoreQueryTerms&,
                                         const ScoreKeyTerms&) const {
    return s;
  }

  // Whether the score's term reads kv only through parts that have one value over keys kv, for
  // queries q of heads h (then a tile's elements add the term taken at one of its keys once per
  // row: score_and_mask).
  __device__ __forceinline__ bool score_kv_uniform(const MaskParams&, int, Interval, Interval,
                                                   Interval) const {
    return false;
  }

  // The mask and score of one element from scratch: its terms, then the element hook (the
  // variant's, which takes the terms).
  __device__ __forceinline__ bool mask(const MaskParams& p, int b, int h, int q, int kv) const {
    const Derived& self = static_cast<const Derived&>(*this);
    const auto request = self.mask_request_terms(p, b);
    return self.mask(p, b, h, q, kv, request, self.mask_query_terms(p, b, h, q, request),
                     self.mask_key_terms(p, b, kv, request));
  }
  __device__ __forceinline__ float score(const MaskParams& p, float s, int b, int h, int q,
                                         int kv) const {
    const Derived& self = static_cast<const Derived&>(*this);
    const auto request = self.score_request_terms(p, b);
    return self.score(p, s, b, h, q, kv, request, self.score_query_terms(p, b, h, q, request),
                      self.score_key_terms(p, b, kv, request));
  }
};

}  // namespace fj
