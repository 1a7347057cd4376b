// The mask bits of a thread's elements of one tile, computed by one loop over the elements
// instead of one inlined copy of the mask per element: for masks whose element part is itself a
// loop (an any/all chain the emitter rolls, Variant::kRolledMask). Inlined per element, such a
// loop was most of a kernel's compile (prefix_ranges -D max_ranges=64: ptxas 3 of its 7 s with
// 64 copies at 128-key tiles); the bits then mask the elements as a DiagonalWindow's do.
// Host-ready apart from the qualifiers (tests/compiler/emitted_hooks_test.cpp checks the bits
// against the mask on the host).
#pragma once

#include "variant_base.cuh"

namespace fj {

// Element (row r, key key0 + 8 j + c) of kTiles n8 tiles is bit 2 j + c of bits[r]: keep(r, m)
// takes m = 8 j + c, as score_and_mask's Window does.
template <int kTiles>
struct ElementBits {
  static_assert(2 * kTiles <= 32, "one 32-bit word per row");
  static constexpr bool kActive = true;
  u32 bits[2];
  __device__ __forceinline__ static ElementBits all() { return {{~0u, ~0u}}; }
  __device__ __forceinline__ bool keep(int r, int m) const {
    return ((bits[r] >> ((m >> 3) * 2 + (m & 1))) & 1u) != 0;
  }
};

// The bits of a thread's two rows (rows.q[r], rows.head[r], rows.mask_query[r]) against the keys
// key0 + 8 j + c (j < kTiles, c < 2); keys at or past kv_end are masked. With kStaged the key
// terms are read from staged[8 j + c].mask (a producer's shared memory), else computed (keys
// past the sequence take the last key's terms, as score_and_mask does). One loop, not unrolled:
// the element part is inlined once.
template <int kTiles, bool kStaged, class Variant, class Rows, class Staged>
__device__ __forceinline__ ElementBits<kTiles> element_bits(const Variant& variant,
                                                            const MaskParams& params,
                                                            const Rows& rows, int key0, int kv_end,
                                                            const Staged* staged) {
  const typename Variant::MaskRequestTerms request = variant.mask_request_terms(params, rows.b);
  u32 bits0 = 0;
  u32 bits1 = 0;
#pragma unroll 1
  for (int i = 0; i < 4 * kTiles; ++i) {
    const int r = i & 1;
    const int m = i >> 1;  // bit m: n8 tile m / 2, column m % 2
    const int key = (m >> 1) * 8 + (m & 1);
    const int kv = key0 + key;
    typename Variant::MaskKeyTerms terms;
    if constexpr (kStaged) {
      terms = staged[key].mask;
    } else {
      terms = variant.mask_key_terms(params, rows.b, kv < kv_end ? kv : kv_end - 1, request);
    }
    // The row's query terms by value: `r ? rows.mask_query[1] : rows.mask_query[0]` selects
    // between the two structs' addresses, which put them in local memory (a 32-byte stack frame
    // in 19 of [cliffs-full]'s 240 generated masks).
    typename Variant::MaskQueryTerms query = rows.mask_query[0];
    if (r) query = rows.mask_query[1];
    const bool keep =
        kv < kv_end && variant.mask(params, rows.b, r ? rows.head[1] : rows.head[0],
                                    r ? rows.q[1] : rows.q[0], kv, request, query, terms);
    const u32 bit = static_cast<u32>(keep) << m;
    if (r) {
      bits1 |= bit;
    } else {
      bits0 |= bit;
    }
  }
  return {{bits0, bits1}};
}

// element_bits where the tile checks its elements, else every bit set (a Full tile inside the
// sequence). Kernels name the bits' type only through this call (`const auto`), so that kernels
// of other variants never instantiate ElementBits: its constant would join their PTX.
template <int kTiles, bool kStaged, class Variant, class Rows, class Staged>
__device__ __forceinline__ ElementBits<kTiles> tile_element_bits(bool check_elements,
                                                                 const Variant& variant,
                                                                 const MaskParams& params,
                                                                 const Rows& rows, int key0,
                                                                 int kv_end, const Staged* staged) {
  if (!check_elements) return ElementBits<kTiles>::all();
  return element_bits<kTiles, kStaged>(variant, params, rows, key0, kv_end, staged);
}

}  // namespace fj
