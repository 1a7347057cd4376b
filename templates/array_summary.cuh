// Min/max summaries of position-indexed arrays (docs/architecture.md#tile-analysis; the layout is
// fj_ops.cuh's "Summaries"): the device twin of build_summary (compiler/analysis/host_params.cpp),
// enqueued ahead of an attention kernel whose variant reads `doc[b, kv]` and the like, so that the
// kernel's tile classifier bounds a tile's reads without reading every element.
//
// Two launches of one kernel. The first (upper_levels == 0) has one CTA per chunk of
// kSummaryChunk positions of a line: each thread reduces 16 elements to a level-1 pair, each
// half-warp 16 of those to a level-2 pair, the CTA its 16 level-2 pairs to one level-3 pair.
// Only lines longer than one chunk have levels 4 and up; the second launch (upper_levels == 1,
// one CTA per line) builds them from level 3 as build_summary does, level after level.
//
// The argument struct is shared with the host launcher (g++); the kernel is device code.
#pragma once

#include "fj_ops.cuh"

namespace fj {

constexpr int kSummaryThreads = 256;
constexpr int kSummaryChunk = kSummaryThreads * kSummaryFanout;  // 4096 positions per CTA
constexpr int kSummaryChunkLevels = 3;                           // kSummaryFanout^3 == chunk
constexpr int kSummaryMaxGridY = 65535;                          // the first launch's lines

struct ArraySummaryArgs {
  ArrayParam array;  // data, rows, cols, row_stride and summary_axis; `summary` is unused
  i32* summary;      // out: summary_words(rows, cols, summary_axis) int32, 8-byte aligned
  i32 is_float;      // nonzero: the elements are float32 bits, summarised by float_key
  i32 upper_levels;  // 0: levels 1 to 3 (grid: chunks x lines); 1: levels 4 and up (grid: lines)
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace summary {

struct KeyPair {
  i32 lo;
  i32 hi;
};

// The pair of no element: the identity of merge.
__device__ __forceinline__ KeyPair empty_pair() {
  return {kInt32Max, kInt32Min};
}

__device__ __forceinline__ KeyPair merge(KeyPair a, KeyPair b) {
  return {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}

// Merges the pairs of the 16 lanes of each half-warp; every lane gets its half-warp's pair.
// Every lane of the warp must call it.
__device__ __forceinline__ KeyPair merge_half_warp(KeyPair pair) {
  for (int lane_mask = 1; lane_mask < kSummaryFanout; lane_mask *= 2) {
    const KeyPair other = {__shfl_xor_sync(0xffffffffu, pair.lo, lane_mask),
                           __shfl_xor_sync(0xffffffffu, pair.hi, lane_mask)};
    pair = merge(pair, other);
  }
  return pair;
}

__device__ __forceinline__ void store_pair(i32* entries, i64 index, KeyPair pair) {
  *reinterpret_cast<int2*>(entries + 2 * index) = make_int2(pair.lo, pair.hi);
}

// Levels 1 to 3 of chunk blockIdx.x of lines blockIdx.y, blockIdx.y + gridDim.y, ...
__device__ __forceinline__ void summarise_chunks(const ArraySummaryArgs& args) {
  // The chunk's keys; position p at p + p / 16, so that thread t's 16 keys (17 t + j) fall in
  // 16 different banks across a warp.
  __shared__ i32 keys[kSummaryChunk + kSummaryChunk / kSummaryFanout];
  __shared__ KeyPair level2[kSummaryThreads / kSummaryFanout];

  const ArrayParam& array = args.array;
  const bool is_float = args.is_float != 0;
  const i64 length = summary_length(array);
  const i64 lines = summary_lines(array);
  const int levels = summary_levels(length);
  const i64 line_pairs = summary_line_pairs(length);
  const i64 level1_pairs = summary_level_pairs(length, 1);
  const i64 level2_pairs = summary_level_pairs(length, 2);
  const i64 level3_pairs = summary_level_pairs(length, 3);
  const i64 level2_offset = summary_level_offset(length, 2);
  const i64 level3_offset = summary_level_offset(length, 3);

  const int t = threadIdx.x;
  const i64 chunk = blockIdx.x;
  const i64 first = chunk * kSummaryChunk;  // the chunk's first position
  const i64 level1_index = chunk * kSummaryThreads + t;
  const i64 level2_index = chunk * (kSummaryThreads / kSummaryFanout) + t / kSummaryFanout;
  // Positions of this thread's level-1 pair that the line has: 0 to 16.
  const i64 past_own = length - level1_index * kSummaryFanout;
  const int own = past_own <= 0 ? 0 : past_own >= kSummaryFanout ? kSummaryFanout : (int)past_own;

  for (i64 line = blockIdx.y; line < lines; line += gridDim.y) {
    // Consecutive threads read consecutive positions (coalesced along columns).
#pragma unroll
    for (int k = 0; k < kSummaryFanout; ++k) {
      const int p = k * kSummaryThreads + t;
      if (first + p < length) {
        keys[p + p / kSummaryFanout] = summary_element_key(array, is_float, (i32)line, first + p);
      }
    }
    __syncthreads();

    KeyPair pair = empty_pair();
#pragma unroll
    for (int j = 0; j < kSummaryFanout; ++j) {
      if (j < own) {
        const i32 key = keys[t * (kSummaryFanout + 1) + j];
        pair = merge(pair, {key, key});
      }
    }
    i32* pairs = args.summary + 2 * line * line_pairs;
    if (level1_index < level1_pairs) store_pair(pairs, level1_index, pair);

    // Pairs past the line are empty, so they leave the merges unchanged.
    pair = merge_half_warp(pair);
    if (t % kSummaryFanout == 0) {
      level2[t / kSummaryFanout] = pair;
      if (levels >= 2 && level2_index < level2_pairs) {
        store_pair(pairs + 2 * level2_offset, level2_index, pair);
      }
    }
    __syncthreads();

    if (t < 32) {
      pair = t < kSummaryThreads / kSummaryFanout ? level2[t] : empty_pair();
      pair = merge_half_warp(pair);
      if (t == 0 && levels >= 3 && chunk < level3_pairs) {
        store_pair(pairs + 2 * level3_offset, chunk, pair);
      }
    }
    __syncthreads();  // keys and level2 are refilled for the next line
  }
}

// Levels 4 and up of lines blockIdx.x, blockIdx.x + gridDim.x, ..., each from the level below
// it (level 3 written by the first launch), as build_summary does.
__device__ __forceinline__ void summarise_upper_levels(const ArraySummaryArgs& args) {
  const ArrayParam& array = args.array;
  const i64 length = summary_length(array);
  const i64 lines = summary_lines(array);
  const int levels = summary_levels(length);
  const i64 line_pairs = summary_line_pairs(length);

  for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
    i32* pairs = args.summary + 2 * line * line_pairs;
    for (int level = kSummaryChunkLevels + 1; level <= levels; ++level) {
      // Plain loads, not __ldg: this CTA wrote the level below in the previous iteration.
      const i32* below = pairs + 2 * summary_level_offset(length, level - 1);
      const i64 below_count = summary_level_pairs(length, level - 1);
      i32* entries = pairs + 2 * summary_level_offset(length, level);
      const i64 count = summary_level_pairs(length, level);
      for (i64 i = threadIdx.x; i < count; i += blockDim.x) {
        KeyPair pair = empty_pair();
        const i64 end =
            below_count < (i + 1) * kSummaryFanout ? below_count : (i + 1) * kSummaryFanout;
        for (i64 j = i * kSummaryFanout; j < end; ++j)
          pair = merge(pair, {below[2 * j], below[2 * j + 1]});
        store_pair(entries, i, pair);
      }
      __syncthreads();  // the next level reads this one
    }
  }
}

}  // namespace summary

__device__ __forceinline__ void array_summary(const ArraySummaryArgs& args) {
  if (args.upper_levels != 0) {
    summary::summarise_upper_levels(args);
  } else {
    summary::summarise_chunks(args);
  }
}

#endif  // device code

}  // namespace fj
