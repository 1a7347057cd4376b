// Device helpers shared by the kernel templates: shared-memory copies, ldmatrix, tensor-core
// MMA, 16-bit float packing and warp reductions. Device code only (NVRTC).
#pragma once

#include "fj_ops.cuh"

namespace fj {

// Type A where kCondition holds, else B (NVRTC has no <type_traits>).
template <bool kCondition, class A, class B>
struct Select {
  using Type = A;
};
template <class A, class B>
struct Select<false, A, B> {
  using Type = B;
};

// values[i] (i < kCount) by selects: an index that is not a constant puts the array in local
// memory wherever nvcc leaves the loop around the read rolled.
template <int kCount, class T>
__device__ __forceinline__ T pick(const T (&values)[kCount], int i) {
  T picked = values[0];
#pragma unroll
  for (int k = 1; k < kCount; ++k)
    picked = i == k ? values[k] : picked;
  return picked;
}

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

// An fp8 (e4m3) K/V cache (FJ_DTYPE_FP8_E4M3) is read into the kernels' 16-bit tiles: four
// e4m3 bytes (element i in byte i) become elements 0, 1 in `lo` and 2, 3 in `hi` (bf16 or fp16
// pairs), exactly, in four instructions a pair:
// - a permute puts each byte in the low half of its 16-bit lane with its sign replicated above
//   it (PRMT's sign mode): S...S seee emmm;
// - a shift left (4 for bf16, 7 for fp16) moves e4m3's exponent and mantissa into the 16-bit
//   format's fields and a copy of the sign to bit 15, and one mask clears the rest (and what
//   the shift carried into the next lane): the lane now reads the value times 2^-120 (bf16:
//   bias 127 against e4m3's 7) or 2^-8 (fp16: bias 15), e4m3's subnormals as the format's;
// - a multiply by 2^120 or 2^8 restores it (exact: a power of two, and every e4m3 value is a
//   bf16/fp16 normal). The one exception: e4m3's NaN (S.1111.111) reads as +-480, the value
//   its bits would have with an exponent like the others'; detecting it would cost a third
//   more instructions, and fj_kv_cache_write writes it only for a NaN input.
// kApart: `lo` takes elements 0 and 2, `hi` 1 and 3 (the same instructions, other selectors):
// the register of an ldmatrix.trans over e4m3 bytes holds two keys' pairs of dims, and an MMA
// fragment wants one dim's pair of keys.
template <bool kBF16, bool kApart = false>
__device__ __forceinline__ void e4m3x4_to_16x2(u32 bytes, u32& lo, u32& hi) {
  constexpr int kShift = kBF16 ? 4 : 7;
  constexpr u32 kKeep = kBF16 ? 0x87f087f0u : 0xbf80bf80u;  // the sign and the 7 field bits
  // prmt, not __byte_perm, which ignores the selector's sign bit (bit 3 of each nibble).
  u32 a;
  u32 b;
  if constexpr (kApart) {
    asm("prmt.b32 %0, %1, 0, 0xa280;\n" : "=r"(a) : "r"(bytes));  // b0, sign(b0), b2, sign(b2)
    asm("prmt.b32 %0, %1, 0, 0xb391;\n" : "=r"(b) : "r"(bytes));  // b1, sign(b1), b3, sign(b3)
  } else {
    asm("prmt.b32 %0, %1, 0, 0x9180;\n" : "=r"(a) : "r"(bytes));  // b0, sign(b0), b1, sign(b1)
    asm("prmt.b32 %0, %1, 0, 0xb3a2;\n" : "=r"(b) : "r"(bytes));  // b2, sign(b2), b3, sign(b3)
  }
  const u32 a_bits = (a << kShift) & kKeep;
  const u32 b_bits = (b << kShift) & kKeep;
  if constexpr (kBF16) {
    constexpr u32 kTwo120 = 0x7b807b80u;  // 2^120 in both bf16 halves
    constexpr u32 kMinusZero = 0x80008000u;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(lo) : "r"(a_bits), "r"(kTwo120), "r"(kMinusZero));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(hi) : "r"(b_bits), "r"(kTwo120), "r"(kMinusZero));
  } else {
    constexpr u32 kTwo8 = 0x5c005c00u;  // 256 in both fp16 halves
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(lo) : "r"(a_bits), "r"(kTwo8));
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(hi) : "r"(b_bits), "r"(kTwo8));
  }
}

// The item (an e4m3 row chunk) a thread converts, of items numbered row-major, where rows have
// eight chunks (head dim 128): threads 4..7 of every eight take the next row's chunks 4..7
// (and threads 12..15 the previous row's), so that each eight threads' first stores land in
// both parities of the 128-byte swizzle: eight different bank groups. (In row order, chunk
// c's first store and chunk c + 4's share one.) Other row widths keep the order.
template <int kChunksPerRow>
__device__ __forceinline__ u32 e4m3_item(u32 item) {
  return kChunksPerRow == 8 ? item ^ ((item & 4u) << 1) : item;
}

// Converts the 16 e4m3 elements at shared address `from` into 16-bit elements 0..7 at `to_low`
// and 8..15 at `to_high` (16-byte chunks of the kernels' tiles). The callers compute the
// addresses from what stays the same over a loop (the lane's chunk, its row's swizzle): the
// conversion itself is 40 instructions a chunk, and index arithmetic per call had doubled it.
template <bool kBF16>
__device__ __forceinline__ void convert_e4m3_chunk(u32 from, u32 to_low, u32 to_high) {
  u32 in[4];
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(in[0]), "=r"(in[1]), "=r"(in[2]), "=r"(in[3])
               : "r"(from));
  u32 out[8];
  for (int i = 0; i < 4; ++i)
    e4m3x4_to_16x2<kBF16>(in[i], out[2 * i], out[2 * i + 1]);
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(to_low), "r"(out[0]), "r"(out[1]),
               "r"(out[2]), "r"(out[3]));
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(to_high), "r"(out[4]),
               "r"(out[5]), "r"(out[6]), "r"(out[7]));
}

// convert_e4m3_chunk for chunk `chunk` of row `row` of tiles laid out by From (16-byte e4m3
// chunks) and To (16-bit elements: chunks 2 chunk and 2 chunk + 1).
template <bool kBF16, class From, class To>
__device__ __forceinline__ void convert_e4m3_chunk(u32 from, u32 to, int row, int chunk) {
  convert_e4m3_chunk<kBF16>(from + From::bytes(row, chunk), to + To::bytes(row, 2 * chunk),
                            to + To::bytes(row, 2 * chunk + 1));
}

}  // namespace fj
