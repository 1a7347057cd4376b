// The CUDA hooks that emit_cuda_variant() writes (compiler/codegen/cuda/emit_cuda.cpp), compiled
// for the host: fj_ops.cuh and variant_base.cuh are host-ready, and the hooks' __device__
// __forceinline__ become plain inline functions. Without a GPU this checks what the kernels
// compute of a mask, for every standard mask and variant, prefix_ranges with its any() written
// as loops, and a sample of issue 29's generated variants (emitted_hook_variants.h):
//
// - mask() and score() (the split into request, query-row, key and element terms, rolled
//   chains, constant-divisor helpers) give the evaluator's value, bit for bit (scores at the
//   positions kernels meet, [0, 2^24): see SplitPositionDifferences in emit_cuda.cpp);
// - kv_range() gives MaskAnalysis' range exactly (both fold the same kv plan);
// - classify() gives MaskAnalysis' class, or Partial: a chain written as a loop combines its
//   terms without the host's narrowing, which may only lose a decision, never make one;
// - element_bits() (templates/element_bits.cuh, the kernels' loop over a tile's elements for
//   kRolledMask variants) holds each element's mask, key terms computed or staged;
// - a mask's group terms (kMaskGroupKeys), taken at the first key of an element's aligned group
//   of keys, give the element hook that takes them the mask's value.
//
// Over random launches (standard parameters, random ones, with the arrays' summaries and
// without) and random tiles near 0, at negative positions and near the int32 ends.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emitted_hook_variants.h"
#include "flexjit/compiler/host_params.h"
#include "random_ir.h"
#include "random_launch.h"

// Host spellings of the CUDA qualifiers the hooks carry (fj_ops.cuh has its own, FJ_HD).
#define __device__
#define __forceinline__ inline
#include "element_bits.cuh"
#include "variant_base.cuh"
// The generated structs derive from fj::VariantBase.
#include "emitted_hooks.inc"
#undef __forceinline__
#undef __device__

namespace flexjit {
namespace {

using namespace testing;

struct Counts {
  int64_t classes = 0, decided = 0, coarser = 0, ranges = 0, masks = 0, scores = 0, bits = 0;
  int64_t uniform_tiles = 0, uniform_scores = 0, grouped = 0;
};

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || fj::float_to_bits(a) == fj::float_to_bits(b);
}

// A point of the tile: a corner or a random position inside it.
int32_t inside(RandomExpr& random, int32_t lo, int32_t hi) {
  const int64_t width = int64_t{hi} - lo;
  switch (random.pick(4)) {
    case 0:
      return lo;
    case 1:
      return static_cast<int32_t>(hi - 1);
    default:
      return static_cast<int32_t>(
          lo + std::uniform_int_distribution<int64_t>(0, width - 1)(random.rng()));
  }
}

// score_kv_uniform (a score s + T whose T may have one value over a tile's keys): where it holds
// for the tile (its head, or it and the next), the score of any element is s plus the score at
// s = 0 and the tile's first key, as score_and_mask computes it then.
template <class Hooks>
void check_score_uniform(const Hooks& hooks, const Tile& tile, const fj::MaskParams& params,
                         RandomExpr& random, Counts& counts) {
  if constexpr (Hooks::kScoreKvUniform) {
    const auto in_kernels = [](int32_t lo, int32_t hi) { return lo >= 0 && hi <= (1 << 24); };
    if (tile.q0 >= tile.q1 || tile.k0 >= tile.k1 || !in_kernels(tile.q0, tile.q1) ||
        !in_kernels(tile.k0, tile.k1)) {
      return;
    }
    const int32_t heads = 1 + random.pick(2);
    if (!hooks.score_kv_uniform(params, tile.b, fj::Interval::range(tile.h, tile.h + heads - 1),
                                fj::Interval::range(tile.q0, tile.q1 - 1),
                                fj::Interval::range(tile.k0, tile.k1 - 1))) {
      return;
    }
    ++counts.uniform_tiles;
    for (int i = 0; i < 4; ++i) {
      const int32_t h = tile.h + random.pick(heads);
      const int32_t q = inside(random, tile.q0, tile.q1);
      const int32_t kv = inside(random, tile.k0, tile.k1);
      const float s = std::uniform_real_distribution<float>(-30.0f, 30.0f)(random.rng());
      const float want = hooks.score(params, s, tile.b, h, q, kv);
      const float got = fj::fadd(s, hooks.score(params, 0.0f, tile.b, h, q, tile.k0));
      // Equal but for the sign of a zero.
      if (!(same_float(got, want) || (got == 0.0f && want == 0.0f))) {
        FAIL("score_kv_uniform " << tile_text(tile) << " (heads " << heads << "): score of " << s
                                 << " at h " << h << " q " << q << " kv " << kv << " is " << want
                                 << ", at the tile's first key " << got);
      }
      ++counts.uniform_scores;
    }
  }
}

// The group terms (kMaskGroupKeys: one value per row and aligned group of G keys) taken at the
// first key of kv's group, as score_and_mask takes them, give the element kv's mask.
template <class Hooks>
void check_group_terms(const Hooks& hooks, const fj::MaskParams& params, const EvalPoint& point,
                       bool want, Counts& counts) {
  if constexpr (Hooks::kMaskGroupKeys > 0) {
    static_assert((Hooks::kMaskGroupKeys & (Hooks::kMaskGroupKeys - 1)) == 0 &&
                  Hooks::kMaskGroupKeys >= 8);
    const int32_t first = point.kv & ~(Hooks::kMaskGroupKeys - 1);  // floor to a multiple of G
    const auto request = hooks.mask_request_terms(params, point.b);
    const auto query = hooks.mask_query_terms(params, point.b, point.h, point.q, request);
    const auto group =
        hooks.mask_group_terms(params, point.b, point.h, point.q, first, request, query,
                               hooks.mask_key_terms(params, point.b, first, request));
    const bool got = hooks.mask(params, point.b, point.h, point.q, point.kv, request, query,
                                hooks.mask_key_terms(params, point.b, point.kv, request), group);
    if (got != want) {
      FAIL("mask with group terms (" << Hooks::kMaskGroupKeys << " keys, taken at " << first
                                     << ") at b " << point.b << " h " << point.h << " q " << point.q
                                     << " kv " << point.kv << ": " << got);
    }
    ++counts.grouped;
  }
}

template <class Hooks>
void check_tile(const Hooks& hooks, const Variant& variant, const MaskAnalysis& analysis,
                const Tile& tile, const fj::MaskParams& params, RandomExpr& random,
                Counts& counts) {
  const TileClass want = analysis.classify(tile, &params);
  const auto got = static_cast<TileClass>(
      hooks.classify(params, tile.b, tile.h, tile.q0, tile.q1, tile.k0, tile.k1));
  if (got != want && got != TileClass::Partial) {
    FAIL("classify " << tile_text(tile) << ": emitted " << tile_class_name(got) << ", MaskAnalysis "
                     << tile_class_name(want));
  }
  ++counts.classes;
  counts.decided += want != TileClass::Partial;
  counts.coarser += got != want;

  const KvRange want_range = analysis.kv_range(tile.b, tile.h, tile.q0, tile.q1, &params);
  const fj::KvRange got_range = hooks.kv_range(params, tile.b, tile.h, tile.q0, tile.q1);
  if (got_range.lo != want_range.lo || got_range.hi != want_range.hi) {
    FAIL("kv_range " << tile_text(tile) << ": emitted [" << got_range.lo << ", " << got_range.hi
                     << "), MaskAnalysis [" << want_range.lo << ", " << want_range.hi << ")");
  }
  ++counts.ranges;

  check_score_uniform(hooks, tile, params, random, counts);
  if (tile.q0 >= tile.q1 || tile.k0 >= tile.k1) return;
  for (int i = 0; i < 4; ++i) {
    const EvalPoint point{tile.b, tile.h, inside(random, tile.q0, tile.q1),
                          inside(random, tile.k0, tile.k1), &params};
    const bool mask = hooks.mask(params, point.b, point.h, point.q, point.kv);
    if (mask != evaluate_mask(variant, point)) {
      FAIL("mask at b " << point.b << " h " << point.h << " q " << point.q << " kv " << point.kv
                        << ": emitted " << mask);
    }
    ++counts.masks;
    check_group_terms(hooks, params, point, mask, counts);
    // Scores where kernels meet them: the score hook computes float(q - kv) as float(q) -
    // float(kv) (SplitPositionDifferences), equal for positions in [0, 2^24).
    const bool kernel_positions =
        point.q >= 0 && point.kv >= 0 && point.q < (1 << 24) && point.kv < (1 << 24);
    if (!variant.has_score() || !kernel_positions) continue;
    const std::vector<float>& specials = float_constants();
    const float s = random.pick(4) == 0
                        ? specials[random.pick(int(specials.size()))]
                        : std::uniform_real_distribution<float>(-30.0f, 30.0f)(random.rng());
    const float score = hooks.score(params, s, point.b, point.h, point.q, point.kv);
    const float expected = evaluate_score(variant, s, point);
    if (!same_float(score, expected)) {
      FAIL("score of " << s << " at b " << point.b << " h " << point.h << " q " << point.q << " kv "
                       << point.kv << ": emitted " << score << ", evaluator " << expected);
    }
    ++counts.scores;
  }
}

// A thread's rows as the kernels hold them (ThreadRows' fields that element_bits reads).
template <class Hooks>
struct Rows {
  int b;
  int q[2];
  int head[2];
  typename Hooks::MaskQueryTerms mask_query[2];
};
template <class Hooks>
struct Staged {
  typename Hooks::MaskKeyTerms mask;
};

// element_bits over kTiles n8 tiles from key0, the rows at q0 and q0 + 8 of one head (or two),
// against the mask element by element.
template <int kTiles, class Hooks>
void check_element_bits(const Hooks& hooks, const fj::MaskParams& params, RandomExpr& random,
                        Counts& counts) {
  Rows<Hooks> rows{};
  rows.b = random.pick(2);
  const int32_t q0 = random.pick(4) ? random.pick(300) : random_start(random);
  // Keys are int32 in the kernels: the tile's last key at most INT32_MAX.
  const int32_t key0 =
      std::min(random.pick(4) ? random.pick(300) : random_start(random), kMax - 8 * kTiles);
  const auto request = hooks.mask_request_terms(params, rows.b);
  for (int r = 0; r < 2; ++r) {
    rows.q[r] = static_cast<int32_t>(std::min<int64_t>(int64_t{q0} + 8 * r, kMax));
    rows.head[r] = random.pick(3);
    rows.mask_query[r] = hooks.mask_query_terms(params, rows.b, rows.head[r], rows.q[r], request);
  }
  const int64_t keys_end = int64_t{key0} + 8 * kTiles;
  const int32_t kv_end = static_cast<int32_t>(
      random.pick(2) ? keys_end : std::max<int64_t>(key0 + 1, keys_end - random.pick(8 * kTiles)));
  std::vector<Staged<Hooks>> staged(8 * kTiles);
  for (int key = 0; key < 8 * kTiles; ++key) {
    const int64_t kv = std::min<int64_t>(int64_t{key0} + key, kv_end - 1);
    staged[key].mask = hooks.mask_key_terms(params, rows.b, static_cast<int32_t>(kv), request);
  }
  const fj::ElementBits<kTiles> computed =
      fj::element_bits<kTiles, false>(hooks, params, rows, key0, kv_end, staged.data());
  const fj::ElementBits<kTiles> read =
      fj::element_bits<kTiles, true>(hooks, params, rows, key0, kv_end, staged.data());
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < kTiles; ++j) {
      for (int c = 0; c < 2; ++c) {
        const int64_t kv = int64_t{key0} + 8 * j + c;
        const bool want = kv < kv_end && hooks.mask(params, rows.b, rows.head[r], rows.q[r],
                                                    static_cast<int32_t>(kv));
        if (computed.keep(r, 8 * j + c) != want || read.keep(r, 8 * j + c) != want) {
          FAIL("element_bits<" << kTiles << "> row " << r << " (q " << rows.q[r] << ", h "
                               << rows.head[r] << ") key " << kv << " (kv_end " << kv_end
                               << "): computed " << computed.keep(r, 8 * j + c) << ", staged "
                               << read.keep(r, 8 * j + c) << ", mask " << want);
        }
        ++counts.bits;
      }
    }
  }
}

template <class Hooks>
void check_hooks(const Hooks& hooks, const Variant& variant, bool standard, RandomExpr& random,
                 Counts& counts) {
  const MaskAnalysis analysis(variant);
  for (int launch = 0; launch < (standard ? 6 : 3); ++launch) {
    const HostParams host = standard ? standard_params(random, variant, launch % 2 == 0)
                                     : random_params(random, variant);
    fj::MaskParams plain = host.params();
    for (fj::ArrayParam& array : plain.array)
      array.summary = nullptr;
    for (int t = 0; t < 40; ++t) {
      const Tile tile = random_tile(random);
      INFO("launch " << launch << ", " << tile_text(tile));
      check_tile(hooks, variant, analysis, tile, host.params(), random, counts);
      check_tile(hooks, variant, analysis, tile, plain, random, counts);
    }
    for (int t = 0; t < 4; ++t) {
      check_element_bits<16>(hooks, host.params(), random, counts);
      check_element_bits<2>(hooks, host.params(), random, counts);
    }
    // Aligned tiles near 0, where the standard masks' parameters place their structure.
    if (!standard) continue;
    const int32_t size = 16 << random.pick(3);
    for (int32_t q0 = 0; q0 < 256; q0 += size) {
      for (int32_t k0 = 0; k0 < 256; k0 += size) {
        const Tile tile{random.pick(2), random.pick(4), q0, q0 + size, k0, k0 + size};
        INFO("launch " << launch << ", " << tile_text(tile));
        check_tile(hooks, variant, analysis, tile, host.params(), random, counts);
      }
    }
  }
}

TEST_CASE("emitted CUDA hooks compute the evaluator's mask and score, MaskAnalysis' ranges",
          "[emit][emitted_hooks]") {
  const std::vector<Variant> variants = emitted_hook_variants();
  REQUIRE(variants.size() == size_t(emitted_hooks::kCount));
  Counts counts;
  const size_t generated = size_t(kEmittedHookGenerated / kEmittedHookStride);
  RandomExpr random(20261128, {});
  emitted_hooks::for_each([&](const auto& hooks, int index) {
    const Variant& variant = variants[index];
    INFO(variant.name << ": mask " << ir::to_string(variant.mask).substr(0, 600));
    REQUIRE(variant.name == emitted_hooks::kNames[index]);  // the build's header is current
    const bool standard = size_t(index) < variants.size() - generated;
    check_hooks(hooks, variant, standard, random, counts);
  });
  INFO(counts.classes << " classes (" << counts.decided << " decided by MaskAnalysis, "
                      << counts.coarser << " left Partial by the hooks), " << counts.ranges
                      << " kv ranges, " << counts.masks << " mask and " << counts.scores
                      << " score values, " << counts.bits << " element bits, "
                      << counts.uniform_tiles << " key-uniform score tiles, " << counts.grouped
                      << " masks with group terms");
  CHECK(counts.decided >= counts.classes / 4);
  CHECK(counts.coarser <= counts.decided / 10);
  CHECK(counts.scores >= counts.masks / 20);
  // The family's T5 bias at least.
  CHECK(counts.uniform_tiles >= 50);
  CHECK(counts.uniform_scores == 4 * counts.uniform_tiles);
  // The family's random_bits at least.
  CHECK(counts.grouped >= 1000);
}

}  // namespace
}  // namespace flexjit
