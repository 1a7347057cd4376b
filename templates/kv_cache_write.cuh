// KV-cache write (docs/architecture.md#call-contract): copies the keys and values of new tokens
// into their cache slots. slot_mapping[t] = block * page_size + offset; a negative slot (vLLM's
// padding, -1) or one past the cache is skipped, so no index writes outside the cache. A pure
// 16-byte copy: the same kernel serves bf16 and fp16.
#pragma once

#include "fj_device.cuh"
#include "fj_ops.cuh"
#include "kernel_args.cuh"

namespace fj {

// One thread's share of the write: 8 elements (d, d + 8) of one (token, kv head) row, and the
// cache slot (block, offset) its token goes to. Threads past the rows, and tokens whose slot is
// skipped (negative, or past the cache), have none.
struct CacheWriteItem {
  i64 token, head, d, block, offset;
};

__device__ __forceinline__ bool cache_write_item(const KvCacheWriteArgs& args,
                                                 CacheWriteItem& item) {
  const i64 pieces_per_row = args.head_dim / 8;
  const i64 pieces = static_cast<i64>(args.num_tokens) * args.num_kv_heads * pieces_per_row;
  const i64 index = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= pieces) return false;
  const i64 piece = index % pieces_per_row;
  item.head = (index / pieces_per_row) % args.num_kv_heads;
  item.token = index / (pieces_per_row * args.num_kv_heads);
  const i64 slot = args.slot_mapping[item.token];
  if (slot < 0 || slot >= args.num_slots) return false;
  item.block = slot / args.page_size;
  item.offset = slot % args.page_size;
  item.d = piece * 8;
  return true;
}

// One thread per 16-byte chunk of one (token, kv head) row, for keys and values alike.
__device__ __forceinline__ void kv_cache_write(const KvCacheWriteArgs& args) {
  CacheWriteItem item;
  if (!cache_write_item(args, item)) return;
  const auto [token, head, d, block, offset] = item;
  using Chunk = uint4;
  const unsigned short* key = static_cast<const unsigned short*>(args.key);
  const unsigned short* value = static_cast<const unsigned short*>(args.value);
  unsigned short* k_cache = static_cast<unsigned short*>(args.k_cache);
  unsigned short* v_cache = static_cast<unsigned short*>(args.v_cache);
  *reinterpret_cast<Chunk*>(k_cache + block * args.k_stride_block + offset * args.k_stride_slot +
                            head * args.k_stride_head + d) =
      *reinterpret_cast<const Chunk*>(key + token * args.key_stride_token +
                                      head * args.key_stride_head + d);
  *reinterpret_cast<Chunk*>(v_cache + block * args.v_stride_block + offset * args.v_stride_slot +
                            head * args.v_stride_head + d) =
      *reinterpret_cast<const Chunk*>(value + token * args.value_stride_token +
                                      head * args.value_stride_head + d);
}

// Into an fp8 (e4m3) cache: one thread per 8 elements of one (token, kv head) row, for keys
// and values alike: x / scale rounded to the nearest e4m3 and saturated (e4m3_from_float, the
// rounding the CPU backend and the check harness share), from bf16 or fp16 inputs.
template <bool kBF16>
__device__ __forceinline__ void kv_cache_write_fp8(const KvCacheWriteArgs& args) {
  CacheWriteItem item;
  if (!cache_write_item(args, item)) return;
  const auto [token, head, d, block, offset] = item;
  const auto quantize = [&](const void* input, i64 input_offset, void* cache, i64 cache_offset,
                            float scale) {
    const uint4 in =
        *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(input) + input_offset);
    const u32 words[4] = {in.x, in.y, in.z, in.w};
    u32 packed[2] = {0u, 0u};
    for (int e = 0; e < 8; ++e) {
      const unsigned short bits = static_cast<unsigned short>(words[e / 2] >> (16 * (e % 2)));
      const u32 byte = e4m3_from_float(to_float<kBF16>(bits) / scale);
      packed[e / 4] |= byte << (8 * (e % 4));
    }
    *reinterpret_cast<uint2*>(static_cast<unsigned char*>(cache) + cache_offset) =
        make_uint2(packed[0], packed[1]);
  };
  const float k_scale = args.k_scale[head * args.kv_scale_stride];
  const float v_scale = args.v_scale[head * args.kv_scale_stride];
  quantize(
      args.key, token * args.key_stride_token + head * args.key_stride_head + d, args.k_cache,
      block * args.k_stride_block + offset * args.k_stride_slot + head * args.k_stride_head + d,
      k_scale);
  quantize(
      args.value, token * args.value_stride_token + head * args.value_stride_head + d, args.v_cache,
      block * args.v_stride_block + offset * args.v_stride_slot + head * args.v_stride_head + d,
      v_scale);
}

}  // namespace fj
