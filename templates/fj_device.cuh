// Device helpers shared by the kernel templates: shared-memory copies, ldmatrix, tensor-core
// MMA, 16-bit float packing and warp reductions. Device code only (NVRTC).
#pragma once

#include "fj_ops.cuh"

namespace fj {

__device__ __forceinline__ u32 smem_address(const void* pointer) {
  return static_cast<u32>(__cvta_generic_to_shared(pointer));
}
// Bytes from `base` up to the next multiple of kAlignment in the shared address space (dynamic
// shared memory starts only 16-byte aligned; the caller sizes it with room for the shift).
template <u32 kAlignment>
__device__ __forceinline__ u32 shared_align_shift(const void* base) {
  const u32 raw = smem_address(base);
  return ((raw + kAlignment - 1u) & ~(kAlignment - 1u)) - raw;
}

// 16-byte asynchronous copy global -> shared address `smem`; when `valid` is false the
// destination is zeroed and nothing is read.
__device__ __forceinline__ void cp_async_16_shared(u32 smem, const void* global, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(global),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  cp_async_16_shared(smem_address(smem), global, valid);
}

// A barrier of the whole CTA that threads may reach at different instructions (PTX
// `barrier.sync` without .aligned; __syncthreads is the aligned form, which every thread must
// reach at the same instruction): the warp-specialized kernel's roles sync from their own code.
__device__ __forceinline__ void cta_barrier() {
  asm volatile("barrier.sync 0;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}

// Closes the group of cp.async copies issued since the last commit (an empty group is fine:
// pipelines commit one group per step so that wait counts stay in step).
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// The same from a generic pointer into shared memory.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* smem) {
  ldmatrix_x4(r, smem_address(smem));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const void* smem) {
  ldmatrix_x4_trans(r, smem_address(smem));
}

// c += a * b for one m16n8k16 tile.
template <bool kBF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (kBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to nearest into one register of two 16-bit values, `lo` in the low half.
template <bool kBF16>
__device__ __forceinline__ u32 pack_2x16(float lo, float hi) {
  u32 packed;
  if constexpr (kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  }
  return packed;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 16-bit float (bf16 or fp16, as raw bits) to float.
template <bool kBF16>
__device__ __forceinline__ float to_float(unsigned short bits) {
  if constexpr (kBF16) {
    return __uint_as_float(static_cast<u32>(bits) << 16);
  } else {
    float value;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(value) : "h"(bits));
    return value;
  }
}

}  // namespace fj
