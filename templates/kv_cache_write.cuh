// KV-cache write (docs/architecture.md#call-contract): copies the keys and values of new tokens
// into their cache slots. slot_mapping[t] = block * page_size + offset; a negative slot (vLLM's
// padding, -1) or one past the cache is skipped, so no index writes outside the cache. A pure
// 16-byte copy: the same kernel serves bf16 and fp16.
#pragma once

#include "fj_ops.cuh"
#include "kernel_args.cuh"

namespace fj {

// One thread per 16-byte chunk of one (token, kv head) row, for keys and values alike.
__device__ __forceinline__ void kv_cache_write(const KvCacheWriteArgs& args) {
  const i64 chunks_per_row = args.head_dim / 8;
  const i64 chunks = static_cast<i64>(args.num_tokens) * args.num_kv_heads * chunks_per_row;
  const i64 index = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= chunks) return;
  const i64 chunk = index % chunks_per_row;
  const i64 head = (index / chunks_per_row) % args.num_kv_heads;
  const i64 token = index / (chunks_per_row * args.num_kv_heads);
  const i64 slot = args.slot_mapping[token];
  if (slot < 0 || slot >= args.num_slots) return;
  const i64 block = slot / args.page_size;
  const i64 offset = slot % args.page_size;
  using Chunk = uint4;
  const unsigned short* key = static_cast<const unsigned short*>(args.key);
  const unsigned short* value = static_cast<const unsigned short*>(args.value);
  unsigned short* k_cache = static_cast<unsigned short*>(args.k_cache);
  unsigned short* v_cache = static_cast<unsigned short*>(args.v_cache);
  const i64 d = chunk * 8;
  *reinterpret_cast<Chunk*>(k_cache + block * args.k_stride_block + offset * args.k_stride_slot +
                            head * args.k_stride_head + d) =
      *reinterpret_cast<const Chunk*>(key + token * args.key_stride_token +
                                      head * args.key_stride_head + d);
  *reinterpret_cast<Chunk*>(v_cache + block * args.v_stride_block + offset * args.v_stride_slot +
                            head * args.v_stride_head + d) =
      *reinterpret_cast<const Chunk*>(value + token * args.value_stride_token +
                                      head * args.value_stride_head + d);
}

}  // namespace fj
