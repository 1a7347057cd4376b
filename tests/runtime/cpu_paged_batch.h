// One valid paged call of a CPU kernel (arch "cpu") over host memory, which tests edit into
// invalid ones: cpu_capi_test.cpp and tests/capi/capi_args_test.cpp.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "flexjit/flexjit.h"

// 64-byte aligned host memory.
template <class T>
struct Buffer {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> memory;
  explicit Buffer(size_t count, T fill = T{})
      : memory(static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64))) {
    REQUIRE(memory != nullptr);
    std::fill(memory.get(), memory.get() + count, fill);
  }
  T* get() const { return memory.get(); }
};

// One request of 4 new tokens after 16 cached ones (two pages of 16), 8 heads over 2 kv heads,
// head dim 128, NHD cache of 3 blocks; q and K/V hold small bf16 values.
struct PagedBatch {
  Buffer<uint16_t> q{4 * 8 * 128, 0x3f80};  // 1.0
  Buffer<uint16_t> out{4 * 8 * 128, 0xffff};
  Buffer<uint16_t> k{3 * 16 * 2 * 128, 0x3f00};  // 0.5
  Buffer<uint16_t> v{3 * 16 * 2 * 128, 0x3f80};
  Buffer<float> lse{4 * 8, 0.0f};
  Buffer<int32_t> qsl{2}, seq_lens{1}, table{4};
  Buffer<float> k_scale{2, 1.0f}, v_scale{2, 1.0f};  // use_fp8_cache's, one per kv head
  int32_t window = 8;
  fj_paged_attention_args args{};

  // Makes the call one for a kernel of an fp8 cache (kv_dtype FJ_DTYPE_FP8_E4M3): the caches'
  // bytes become e4m3 K = 0.5 (0x30) and V = 1.0 (0x38) at the same shape in bytes (so the call
  // computes what the 16-bit one does), with scales 1 per kv head.
  void use_fp8_cache() {
    std::fill(k.get(), k.get() + 3 * 16 * 2 * 128, uint16_t{0x3030});
    std::fill(v.get(), v.get() + 3 * 16 * 2 * 128, uint16_t{0x3838});
    args.k_stride_block = args.v_stride_block = 16 * 2 * 128;
    args.k_stride_slot = args.v_stride_slot = 2 * 128;
    args.k_stride_head = args.v_stride_head = 128;
    args.k_scale = k_scale.get();
    args.v_scale = v_scale.get();
    args.kv_scale_stride = 1;
  }

  PagedBatch() {
    qsl.get()[0] = 0;
    qsl.get()[1] = 4;
    seq_lens.get()[0] = 20;
    table.get()[0] = 2;
    table.get()[1] = 0;
    table.get()[2] = 0x7fffff00;  // never read
    table.get()[3] = -5;          // never read
    args.struct_size = sizeof(args);
    args.q = q.get();
    args.out = out.get();
    args.k_cache = k.get();
    args.v_cache = v.get();
    args.query_start_loc = qsl.get();
    args.seq_lens = seq_lens.get();
    args.block_table = table.get();
    args.lse = lse.get();
    args.num_tokens = 4;
    args.num_reqs = 1;
    args.num_heads = 8;
    args.num_kv_heads = 2;
    args.max_query_len = 4;
    args.max_blocks_per_req = 2;
    args.q_stride_token = args.out_stride_token = 8 * 128;
    args.q_stride_head = args.out_stride_head = 128;
    args.k_stride_block = args.v_stride_block = 16 * 2 * 128;
    args.k_stride_slot = args.v_stride_slot = 2 * 128;
    args.k_stride_head = args.v_stride_head = 128;
    args.block_table_stride = 4;
    args.lse_stride_token = 8;
    args.params = &window;
    args.num_params = 1;
    args.num_blocks = 3;
  }
};
