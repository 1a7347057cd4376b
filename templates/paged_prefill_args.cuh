// Arguments of the paged prefill kernel, passed by value as its only parameter. Included by
// the kernel (NVRTC) and by the host launcher (g++), so the layout is written once.
// Only fixed-width scalars and pointers: both compilers lay the struct out identically.
#pragma once

#include "fj_ops.cuh"

namespace fj {

// Tile shape of the paged prefill kernel: one CTA of four warps computes kPrefillBlockM packed
// query rows (16 per warp) against K/V tiles of kPrefillBlockN keys.
constexpr int kPrefillBlockM = 64;
constexpr int kPrefillBlockN = 64;
constexpr int kPrefillThreads = 128;

// Shared memory: Q, K and V tiles of 16-bit elements, rows padded by 16 bytes so that
// ldmatrix's eight row addresses fall in different banks.
FJ_HD constexpr int prefill_smem_row_elems(int head_dim) {
  return head_dim + 8;
}
FJ_HD constexpr int paged_prefill_smem_bytes(int head_dim) {
  return 3 * kPrefillBlockM * prefill_smem_row_elems(head_dim) * 2;
}

struct PagedPrefillArgs {
  const void* q;        // [num_tokens, num_heads, head_dim], head_dim contiguous
  void* out;            // same shape as q
  const void* k_cache;  // paged: element (block, slot, kv_head, d) at the strides below
  const void* v_cache;
  const i32* query_start_loc;  // [num_reqs + 1]
  const i32* seq_lens;         // [num_reqs], keys of each request (new tokens included)
  const i32* block_table;      // [num_reqs][block_table_stride]
  float* lse;                  // optional [num_tokens, num_heads] natural-log LSE, or null

  i64 q_stride_token, q_stride_head;  // in elements
  i64 out_stride_token, out_stride_head;
  i64 k_stride_block, k_stride_slot, k_stride_head;
  i64 v_stride_block, v_stride_slot, v_stride_head;
  i64 block_table_stride;
  i64 lse_stride_token;  // lse[token * lse_stride_token + head]

  i32 num_reqs;
  i32 num_heads;
  i32 num_kv_heads;
  i32 max_blocks_per_req;  // keys at or past max_blocks_per_req * page size are never read
  float scale;             // softmax scale applied to q·k before score_mod

  MaskParams params;
};

}  // namespace fj
