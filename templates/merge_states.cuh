// Merges two partial attentions over disjoint key sets by their log-sum-exp
// (docs/architecture.md#kernels): what cascade attention, split-KV and context parallelism need.
// For each (token, head) row, with m = max(lse_a, lse_b), w_a = exp(lse_a - m),
// w_b = exp(lse_b - m):
//   out = (w_a out_a + w_b out_b) / (w_a + w_b),  lse = m + log(w_a + w_b).
// A row empty on both sides (both lse -inf) gives out 0 and lse -inf, never NaN. With sinks
// (since 0.7), the row's head's sink joins the merged denominator once: the partials must leave
// it out, and a row empty on both sides gets out 0 and lse = the sink.
#pragma once

#include "fj_device.cuh"
#include "fj_ops.cuh"
#include "kernel_args.cuh"

namespace fj {

// One thread per 8 elements (16 bytes) of one row.
template <bool kBF16>
__device__ __forceinline__ void merge_states(const MergeStatesArgs& args) {
  const i64 chunks_per_row = args.head_dim / 8;
  const i64 chunks = static_cast<i64>(args.num_tokens) * args.num_heads * chunks_per_row;
  const i64 index = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= chunks) return;
  const i64 d = (index % chunks_per_row) * 8;
  const i64 head = (index / chunks_per_row) % args.num_heads;
  const i64 token = index / (chunks_per_row * args.num_heads);

  const float lse_a = args.lse_a[token * args.lse_a_stride_token + head];
  const float lse_b = args.lse_b[token * args.lse_b_stride_token + head];
  const float m = fmaxf(lse_a, lse_b);
  const bool empty = m == negative_infinity();
  const float w_a = empty ? 0.0f : expf(lse_a - m);
  const float w_b = empty ? 0.0f : expf(lse_b - m);
  // With sinks, the head's sink joins the merged denominator (finish_row).
  const RowFinish finished = finish_row(m, w_a + w_b, sink_of(args.sinks, head));
  const float inv = finished.scale;

  const uint4 a = *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(args.out_a) +
                                                  token * args.out_a_stride_token +
                                                  head * args.out_a_stride_head + d);
  const uint4 b = *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(args.out_b) +
                                                  token * args.out_b_stride_token +
                                                  head * args.out_b_stride_head + d);
  const u32 a_words[4] = {a.x, a.y, a.z, a.w};
  const u32 b_words[4] = {b.x, b.y, b.z, b.w};
  u32 merged[4];
  for (int i = 0; i < 4; ++i) {
    float lo = 0.0f, hi = 0.0f;
    // Skip a side whose weight is 0 so garbage (even NaN) in an empty partial cannot leak.
    if (w_a > 0.0f) {
      lo += w_a * to_float<kBF16>(a_words[i] & 0xffffu);
      hi += w_a * to_float<kBF16>(a_words[i] >> 16);
    }
    if (w_b > 0.0f) {
      lo += w_b * to_float<kBF16>(b_words[i] & 0xffffu);
      hi += w_b * to_float<kBF16>(b_words[i] >> 16);
    }
    merged[i] = pack_2x16<kBF16>(lo * inv, hi * inv);
  }
  *reinterpret_cast<uint4*>(static_cast<unsigned short*>(args.out) + token * args.out_stride_token +
                            head * args.out_stride_head + d) =
      make_uint4(merged[0], merged[1], merged[2], merged[3]);
  if (args.lse != nullptr && d == 0) {
    args.lse[token * args.lse_stride_token + head] = finished.lse;
  }
}

// The merge of num_states partial states of up to kDecodeRows rows, in state order, by one CTA
// of kDecodeThreads threads: the split-KV decode kernel's merge of its splits (paged_decode.cuh)
// and fj_merge_states_n's on CUDA (merge_states_n below). The same sums in the same order
// whatever the timing, so the result is deterministic.
//
// kMergeChunk states at a time: the kParts lanes of each row read its states' LSEs (the first
// chunk's once: they keep them in `scratch`), agree on their max, and put the states' weights
// exp(lse - max) in `scratch`. Then each thread sums 16-byte pieces of the rows over the chunk,
// kMergeUnroll states' loads in flight: a merge of tens of states takes a few round trips, not
// one per state. A state of weight 0 (no visible key: lse -inf) is never read, so garbage, even
// NaN, in an empty state cannot leak. The sum of the exponentials is total * exp(max); the row's
// sink joins it once (finish_row), and a row that no state sees gets out 0 and lse -inf (or the
// sink).
//
// States: lse(s, row); piece(s, row, i), 4 floats from column 4 i of state s's row;
// sink(row); out_row(row), the 16-bit output row; lse_slot(row), where the merged LSE goes, or
// null. `scratch` holds merge_rows_scratch_floats() floats.
constexpr int kMergeChunk = 64;
FJ_HD constexpr int merge_rows_scratch_floats() {
  return kDecodeRows * (kMergeChunk + 1);
}
template <int kHeadDim, bool kBF16, class States>
__device__ __forceinline__ void merge_rows(const States& states, int num_states, int valid_rows,
                                           float* scratch) {
  constexpr int kParts = kDecodeThreads / kDecodeRows;
  static_assert(kParts <= 32 && 32 % kParts == 0, "a row's lanes are lanes of one warp");
  constexpr int kPieces = kHeadDim / 4;  // float4 pieces of a row
  constexpr int kOwnPieces = (kDecodeRows * kPieces + kDecodeThreads - 1) / kDecodeThreads;
  // States' loads in flight per piece: 16 where a thread has at most 4 pieces (head dim <= 128),
  // fewer where more would not fit the registers.
  constexpr int kMergeUnroll = kOwnPieces <= 4 ? 16 : 8;
  const float neg_inf = negative_infinity();
  float* const weights = scratch;                             // [row][kMergeChunk]
  float* const merged = weights + kDecodeRows * kMergeChunk;  // [row]: 1 / total, or 0
  const int lse_row = threadIdx.x / kParts;
  const int part = threadIdx.x % kParts;
  const bool lse_row_valid = lse_row < valid_rows;
  float merged_max = neg_inf;
  if (lse_row_valid) {
    for (int s = part; s < num_states; s += kParts) {
      const float lse = states.lse(s, lse_row);
      if (s < kMergeChunk) weights[lse_row * kMergeChunk + s] = lse;  // read back by this lane
      merged_max = fmaxf(merged_max, lse);
    }
  }
  for (int lanes = 1; lanes < kParts; lanes *= 2)
    merged_max = fmaxf(merged_max, __shfl_xor_sync(0xffffffffu, merged_max, lanes));
  float merged_total = 0.0f;
  float4 sum[kOwnPieces];
  for (int p = 0; p < kOwnPieces; ++p)
    sum[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int c0 = 0; c0 < num_states; c0 += kMergeChunk) {
    const int c1 = min(c0 + kMergeChunk, num_states);
    if (lse_row_valid) {
      for (int s = c0 + part; s < c1; s += kParts) {
        const float lse =
            s < kMergeChunk ? weights[lse_row * kMergeChunk + s] : states.lse(s, lse_row);
        const float w = merged_max == neg_inf ? 0.0f : exp2f((lse - merged_max) * kLog2e);
        weights[lse_row * kMergeChunk + s - c0] = w;
        merged_total += w;
      }
    }
    __syncthreads();  // the chunk's weights are visible to every thread
#pragma unroll
    for (int p = 0; p < kOwnPieces; ++p) {
      const int piece = static_cast<int>(threadIdx.x) + p * kDecodeThreads;
      const int row = piece / kPieces;
      if (row >= valid_rows) continue;
#pragma unroll(kMergeUnroll)
      for (int s = c0; s < c1; ++s) {
        const float w = weights[row * kMergeChunk + s - c0];
        if (w > 0.0f) {
          const float4 x = states.piece(s, row, piece % kPieces);
          sum[p].x += w * x.x;
          sum[p].y += w * x.y;
          sum[p].z += w * x.z;
          sum[p].w += w * x.w;
        }
      }
    }
    __syncthreads();  // every thread is done with the weights before the next chunk's
  }
  for (int lanes = 1; lanes < kParts; lanes *= 2)
    merged_total += __shfl_xor_sync(0xffffffffu, merged_total, lanes);
  const RowFinish finished =
      finish_row(merged_max, merged_total, lse_row_valid ? states.sink(lse_row) : neg_inf);
  if (part == 0) merged[lse_row] = finished.scale;
  if (part == 0 && lse_row_valid) {
    if (float* const slot = states.lse_slot(lse_row)) *slot = finished.lse;
  }
  __syncthreads();
  for (int p = 0; p < kOwnPieces; ++p) {
    const int piece = static_cast<int>(threadIdx.x) + p * kDecodeThreads;
    const int row = piece / kPieces;
    if (row >= valid_rows) continue;
    const float inv = merged[row];
    u32* const dst = reinterpret_cast<u32*>(states.out_row(row)) + (piece % kPieces) * 2;
    dst[0] = pack_2x16<kBF16>(sum[p].x * inv, sum[p].y * inv);
    dst[1] = pack_2x16<kBF16>(sum[p].z * inv, sum[p].w * inv);
  }
}

// fj_merge_states_n's states: row r of a CTA is row first_row + r of the call, token
// (first_row + r) / num_heads, head (first_row + r) % num_heads.
template <bool kBF16>
struct StackedStates {
  const MergeStatesNArgs& args;
  i64 first_row;

  __device__ __forceinline__ i64 token(int row) const { return (first_row + row) / args.num_heads; }
  __device__ __forceinline__ i64 head(int row) const { return (first_row + row) % args.num_heads; }
  __device__ __forceinline__ float lse(int s, int row) const {
    return args
        .states_lse[s * args.lse_stride_state + token(row) * args.lse_stride_token + head(row)];
  }
  __device__ __forceinline__ float4 piece(int s, int row, int i) const {
    const uint2 bits = *reinterpret_cast<const uint2*>(
        static_cast<const unsigned short*>(args.states_out) + s * args.out_stride_state +
        token(row) * args.out_stride_token + head(row) * args.out_stride_head + 4 * i);
    return make_float4(to_float<kBF16>(bits.x & 0xffffu), to_float<kBF16>(bits.x >> 16),
                       to_float<kBF16>(bits.y & 0xffffu), to_float<kBF16>(bits.y >> 16));
  }
  __device__ __forceinline__ float sink(int row) const { return sink_of(args.sinks, head(row)); }
  __device__ __forceinline__ unsigned short* out_row(int row) const {
    return static_cast<unsigned short*>(args.out) + token(row) * args.merged_stride_token +
           head(row) * args.merged_stride_head;
  }
  __device__ __forceinline__ float* lse_slot(int row) const {
    return args.lse == nullptr ? nullptr
                               : args.lse + token(row) * args.merged_lse_stride_token + head(row);
  }
};

template <int kHeadDim, bool kBF16>
__device__ __forceinline__ void merge_states_n(const MergeStatesNArgs& args) {
  __shared__ float scratch[merge_rows_scratch_floats()];
  const i64 rows = static_cast<i64>(args.num_tokens) * args.num_heads;
  const i64 first_row = static_cast<i64>(blockIdx.x) * kDecodeRows;
  if (first_row >= rows) return;
  const int valid_rows = static_cast<int>(min(static_cast<i64>(kDecodeRows), rows - first_row));
  merge_rows<kHeadDim, kBF16>(StackedStates<kBF16>{args, first_row}, args.num_states, valid_rows,
                              scratch);
}

}  // namespace fj
