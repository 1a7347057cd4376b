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

}  // namespace fj
