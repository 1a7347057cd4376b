// Hopper (sm_90a) warpgroup MMA: shared-memory matrix descriptors of 128-byte-swizzled tiles and
// the m64n64k16 wgmma forms the prefill kernel uses. Only kernels compiled for sm_90a include
// this header. Device code only (NVRTC).
//
// Tile layout (PTX ISA, "matrix descriptor" and "shared memory matrix layout"): a tile of R rows
// of 16-bit elements is stored in chunks of 64 columns (128 bytes), chunk c at c * R * 128 bytes;
// in a chunk, row r takes 128 bytes at r * 128 with its eight 16-byte units permuted by
// unit ^ (r % 8). Chunks start at multiples of 1024 bytes, so the hardware's swizzle (address
// bits 4-6 XOR bits 7-9) is exactly this permutation (Swizzled128Rows in paged_prefill.cuh
// computes the offsets). The same bytes serve as a K-major operand
// (rows = M or N, columns = K: Q and K) and as an MN-major one (rows = K, columns = N: V).
#pragma once

#include "fj_device.cuh"

namespace fj {

// The layout above in numbers: a swizzled row of a chunk and the eight rows the permutation
// repeats after, the 16-bit columns of a chunk and a k16 step's share of a row, the float
// registers of one m64n64 accumulator per thread (64 * 64 / 128). Enumerators: see
// kernel_args.cuh.
enum : int {
  kSwizzleRowBytes = 128,
  kSwizzleAtomBytes = 8 * kSwizzleRowBytes,  // the permutation's period
  kChunkColumns = kSwizzleRowBytes / 2,
  kKStepBytes = 16 * 2,  // a k16 step's columns within a row
  kKStepsPerChunk = kChunkColumns / 16,
  kAccumulatorFloats = 32,
};

// Descriptor of a 128-byte-swizzled operand at shared address `address`: `stride_bytes` is the
// distance between groups of 8 rows (1024 in the layout above), `leading_bytes` the distance
// between 64-column chunks along the dimension the instruction spans. An m64n64k16 operand
// never crosses a chunk of a K-major tile, and an MN-major one of N = 64 spans one chunk, so
// the prefill kernel only ever needs 1024 in both.
__device__ __forceinline__ unsigned long long wgmma_desc_sw128(u32 address, u32 leading_bytes,
                                                               u32 stride_bytes) {
  unsigned long long desc = (address & 0x3ffffu) >> 4;
  desc |= static_cast<unsigned long long>((leading_bytes >> 4) & 0x3fffu) << 16;
  desc |= static_cast<unsigned long long>((stride_bytes >> 4) & 0x3fffu) << 32;
  desc |= 1ull << 62;  // 128-byte swizzle
  return desc;
}

// Orders this thread's register writes before the next wgmma reads them (accumulators, A).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Makes shared memory written through the generic proxy (cp.async, stores) visible to the
// async proxy that wgmma reads it through; each writer fences before the barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving accesses of wgmma operands (accumulators, A fragments still
// being read) across a wgmma wait.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}

template <int kCount>
__device__ __forceinline__ void fence_registers(u32 (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i)
    asm volatile("" : "+r"(d[i])::"memory");
}

// 2^x by the special function unit (denormal results flush to 0: softmax weights that small
// do not count).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// mbarriers in shared memory (PTX "mbarrier"), by shared address.
__device__ __forceinline__ void mbarrier_init(u32 barrier, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(u32 barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// Arrives on the mbarrier once every cp.async this thread issued before has landed, without
// waiting for them (PTX cp.async.mbarrier.arrive.noinc: the arrival counts against the
// barrier's expected count, as mbarrier_arrive's does).
__device__ __forceinline__ void cp_async_mbarrier_arrive(u32 barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(u32 barrier, u32 parity) {
  u32 done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Stores four 8x8 matrices of 16-bit elements held in the mma fragment layout (PTX
// stmatrix): register i holds this thread's pair of matrix i (row lane / 4, columns
// 2 (lane % 4) and + 1); thread t gives the shared address of row t % 8 of matrix t / 8.
__device__ __forceinline__ void stmatrix_x4(u32 row_address, const u32 (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row_address),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

// Warpgroup register budgets (every warp of the warpgroup executes them).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

#define FJ_WGMMA_D32                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FJ_WGMMA_OUT32(d)                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (+)= A * B for a 64x64 tile, k 16: A and B K-major in shared memory. The accumulator layout
// is mma.sync's m16n8 layout per warp (warp w of the warpgroup holds rows 16w..16w+15): d[4j+e]
// is row lane/4 + 8 * (e / 2), column 8j + 2 * (lane % 4) + e % 2.
template <bool kBF16>
__device__ __forceinline__ void wgmma_64x64x16_ss(float (&d)[32], unsigned long long a,
                                                  unsigned long long b, bool accumulate) {
  if constexpr (kBF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FJ_WGMMA_D32
        ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : FJ_WGMMA_OUT32(d)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FJ_WGMMA_D32
        ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : FJ_WGMMA_OUT32(d)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  }
}

// d += A * B for a 64x64 tile, k 16: A in registers (mma.sync's m16n8k16 A fragment per warp),
// B MN-major in shared memory (transposed: rows of the tile are k).
template <bool kBF16>
__device__ __forceinline__ void wgmma_64x64x16_rs_mn(float (&d)[32], const u32 (&a)[4],
                                                     unsigned long long b) {
  if constexpr (kBF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FJ_WGMMA_D32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : FJ_WGMMA_OUT32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FJ_WGMMA_D32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : FJ_WGMMA_OUT32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}

// The m64n128k16 forms: d0 holds columns 0-63 and d1 columns 64-127, each in the layout above,
// so that two m64n64 accumulators side by side are one m64n128 accumulator. One instruction
// reads its A operand once for 128 columns: with both operands in shared memory an m64n64k16
// reads 4 KiB for 32 tensor-core cycles, the SM's whole shared-memory bandwidth (128 bytes a
// cycle); m64n128k16 reads 6 KiB for 64 cycles.
#define FJ_WGMMA_D64                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

template <bool kBF16>
__device__ __forceinline__ void wgmma_64x128x16_ss(float (&d0)[32], float (&d1)[32],
                                                   unsigned long long a, unsigned long long b,
                                                   bool accumulate) {
  if constexpr (kBF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FJ_WGMMA_D64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : FJ_WGMMA_OUT32(d0), FJ_WGMMA_OUT32(d1)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FJ_WGMMA_D64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : FJ_WGMMA_OUT32(d0), FJ_WGMMA_OUT32(d1)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  }
}

// B MN-major spanning two 64-column chunks of V, `leading` apart (the descriptor's leading
// byte offset says where the second chunk starts).
template <bool kBF16>
__device__ __forceinline__ void wgmma_64x128x16_rs_mn(float (&d0)[32], float (&d1)[32],
                                                      const u32 (&a)[4], unsigned long long b) {
  if constexpr (kBF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FJ_WGMMA_D64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : FJ_WGMMA_OUT32(d0), FJ_WGMMA_OUT32(d1)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FJ_WGMMA_D64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : FJ_WGMMA_OUT32(d0), FJ_WGMMA_OUT32(d1)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}

#undef FJ_WGMMA_D32
#undef FJ_WGMMA_D64
#undef FJ_WGMMA_OUT32

}  // namespace fj
