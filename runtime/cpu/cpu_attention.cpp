#include "cpu/cpu_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cpu/float16.h"
#include "flexjit/internal/supported.h"
#include "jit/host_code_store.h"

// The hot loops are written with GCC/Clang vector extensions (portable SIMD types, no
// intrinsics) so that they compile to whatever vector width the target has. On x86-64 the
// function that runs one work item is also cloned for AVX2 and AVX-512 and the best clone is
// picked when the library loads, so a baseline build still uses the machine's vector units.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define FJ_CPU_TARGETS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#if !defined(FJ_CPU_TARGETS)
#define FJ_CPU_TARGETS
#endif
#define FJ_ALWAYS_INLINE inline __attribute__((always_inline))

namespace flexjit::cpu {

namespace {

constexpr int kLanes = 16;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t IVec __attribute__((vector_size(kLanes * sizeof(int32_t))));
typedef uint16_t HVec __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint8_t BVec __attribute__((vector_size(kLanes)));

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
using fj::kLog2e;

FJ_ALWAYS_INLINE Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
FJ_ALWAYS_INLINE void store(float* p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}
FJ_ALWAYS_INLINE Vec splat(float x) {
  return Vec{} + x;
}
FJ_ALWAYS_INLINE Vec max(Vec a, Vec b) {
  return a > b ? a : b;
}
FJ_ALWAYS_INLINE IVec as_int(Vec v) {
  IVec i;
  std::memcpy(&i, &v, sizeof i);
  return i;
}
FJ_ALWAYS_INLINE Vec as_float(IVec i) {
  Vec v;
  std::memcpy(&v, &i, sizeof v);
  return v;
}

// 2^x for x <= 0 (what softmax needs), -inf giving 0: 2^round(x) from the exponent bits times
// a degree-7 Taylor polynomial of 2^f on f in [-0.5, 0.5] (relative error below 1e-8, under
// float rounding). Inputs below -126 give 0 rather than a denormal.
FJ_ALWAYS_INLINE Vec exp2_nonpositive(Vec x) {
  const Vec lowest = splat(-126.0f);
  const IVec tiny = x < lowest;
  x = tiny ? lowest : x;
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (|x| < 2^22).
  const Vec n = (x + 12582912.0f) - 12582912.0f;
  const Vec f = x - n;
  Vec p = splat(1.5252733804059841e-05f);
  p = p * f + 1.5403530393381608e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f;
  p = p * f + 2.4022650695910071e-01f;
  p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  const IVec scaled = as_int(p) + (__builtin_convertvector(n, IVec) << 23);
  return tiny ? splat(0.0f) : as_float(scaled);
}

// 16 bf16 or fp16 elements (any alignment) to float32, exactly.
template <bool kBF16>
FJ_ALWAYS_INLINE Vec load_half(const uint16_t* p) {
  HVec h;
  std::memcpy(&h, p, sizeof h);
  const IVec w = __builtin_convertvector(h, IVec);
  if constexpr (kBF16) {
    return as_float(w << 16);
  } else {
    // The magnitude's bits shifted into float position are a float 2^-112 times the value
    // (denormals included, exactly); infinities and NaNs keep their payload.
    const IVec magnitude = w & 0x7fff;
    const IVec shifted = magnitude << 13;
    IVec bits = as_int(as_float(shifted) * 0x1p112f);
    bits = magnitude >= 0x7c00 ? (shifted | 0x7f800000) : bits;
    return as_float(bits | ((w & 0x8000) << 16));
  }
}

// Per-thread buffers of one work item, 64-byte aligned, for the largest head dim.
struct Scratch {
  static constexpr int kMaxHeadDim = supported::kMaxHeadDim;
  float* q_t;  // [head_dim][kBlockM]: the item's query rows, transposed
  float* k;    // [kBlockN][head_dim]
  float* v;    // [kBlockN][head_dim]
  float* s;    // [kBlockN][kBlockM]: scores, then probabilities, key-major
  float* o;    // [kBlockM][head_dim]: the unnormalised output rows
  float row_max[kBlockM], row_sum[kBlockM], alpha[kBlockM];
  float scores[kBlockN];
  uint8_t mask[kBlockN];
  // An fp8 cache: the value each e4m3 byte stands for in the item's kv head (times its k_scale
  // or v_scale).
  float k_fp8[256], v_fp8[256];
  float* memory = nullptr;

  Scratch() {
    const size_t floats = size_t{kMaxHeadDim} * kBlockM + 2 * size_t{kBlockN} * kMaxHeadDim +
                          size_t{kBlockN} * kBlockM + size_t{kBlockM} * kMaxHeadDim;
    memory = static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float)));
    if (memory == nullptr) throw std::bad_alloc();
    q_t = memory;
    k = q_t + kMaxHeadDim * kBlockM;
    v = k + kBlockN * kMaxHeadDim;
    s = v + kBlockN * kMaxHeadDim;
    o = s + kBlockN * kBlockM;
  }
  ~Scratch() { std::free(memory); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

Scratch& thread_scratch() {
  // Heap memory per thread (a thread_local array this size would not fit the static TLS of a
  // dlopen'ed library).
  thread_local Scratch scratch;
  return scratch;
}

// One work item: packed rows [row0, row0 + kBlockM) of (request, kv head). A packed row is a
// (query token, head of the kv head's group) pair, as on the GPU, so the group's query heads
// share every K/V tile.
struct Item {
  int32_t request;
  int32_t kv_head;
  int32_t row0;
};

struct Job {
  const CpuKernel& kernel;
  const fj::PagedPrefillArgs& args;
  bool contiguous;
  int page_size;
  int group;
  const fj::KvShard* shard;  // a sharded call's layout, or null
};

// Keys [lo, hi) the query positions [q_lo, q_hi] may see over heads [head_lo, head_hi].
KvRange kv_range_for_heads(const CpuKernel& kernel, const fj::MaskParams& params, int b,
                           int head_lo, int head_hi, int q_lo, int q_hi) {
  if (!kernel.variant.uses_head) {
    return kernel.code->kv_range(b, head_lo, q_lo, q_hi + 1, &params);
  }
  KvRange range{0, 0};
  for (int h = head_lo; h <= head_hi; ++h) {
    const KvRange head = kernel.code->kv_range(b, h, q_lo, q_hi + 1, &params);
    if (head.empty()) continue;
    range =
        range.empty() ? head : KvRange{std::min(range.lo, head.lo), std::max(range.hi, head.hi)};
  }
  return range;
}

// A tile is Empty only if it is for every head, Full only if it is for all.
TileClass classify_for_heads(const CpuKernel& kernel, const fj::MaskParams& params, int b,
                             int head_lo, int head_hi, int q_lo, int q_hi, int k0, int k1) {
  if (!kernel.variant.uses_head) {
    return kernel.code->classify(Tile{b, head_lo, q_lo, q_hi + 1, k0, k1}, &params);
  }
  bool all_empty = true, all_full = true;
  for (int h = head_lo; h <= head_hi; ++h) {
    const TileClass c = kernel.code->classify(Tile{b, h, q_lo, q_hi + 1, k0, k1}, &params);
    all_empty = all_empty && c == TileClass::Empty;
    all_full = all_full && c == TileClass::Full;
  }
  return all_empty ? TileClass::Empty : all_full ? TileClass::Full : TileClass::Partial;
}

// The value of every e4m3 byte (fj::e4m3_to_float, NaN included): an fp8 cache is read through
// a copy of this table scaled for the kv head.
const std::array<float, 256> kE4m3Values = [] {
  std::array<float, 256> values{};
  for (uint32_t byte = 0; byte < values.size(); ++byte)
    values[byte] = fj::e4m3_to_float(byte);
  return values;
}();

// One kv head's rows of a K or V cache: 16-bit elements, or e4m3 bytes when `fp8_values` (the
// value of each byte, scale applied) is not null. Offsets and strides count elements, which are
// bytes for fp8.
struct CacheRows {
  const void* data;
  int64_t stride_block, stride_slot, head_offset;
  const float* fp8_values;

  // Where key `key` starts: through the block table, or at row first_row + key of a
  // contiguous cache (block_row null).
  FJ_ALWAYS_INLINE int64_t offset(const int32_t* block_row, int64_t first_row, int page_size,
                                  int key) const {
    return block_row == nullptr ? (first_row + key) * stride_slot + head_offset
                                : int64_t{block_row[key / page_size]} * stride_block +
                                      int64_t{key % page_size} * stride_slot + head_offset;
  }
};

// Converts keys [k0, k0 + n) of `rows` into `dst` rows of kHeadDim floats, and zeroes the rows up
// to the next multiple of 4 (the score loop's key block).
template <int kHeadDim, bool kBF16>
FJ_ALWAYS_INLINE void load_rows(float* dst, const CacheRows& rows, const int32_t* block_row,
                                int64_t first_row, int page_size, int k0, int n) {
  if (rows.fp8_values != nullptr) {
    for (int j = 0; j < n; ++j) {
      const uint8_t* src = static_cast<const uint8_t*>(rows.data) +
                           rows.offset(block_row, first_row, page_size, k0 + j);
      for (int c = 0; c < kHeadDim; ++c)
        dst[j * kHeadDim + c] = rows.fp8_values[src[c]];
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const uint16_t* src = static_cast<const uint16_t*>(rows.data) +
                            rows.offset(block_row, first_row, page_size, k0 + j);
      for (int c = 0; c < kHeadDim; c += kLanes)
        store(dst + j * kHeadDim + c, load_half<kBF16>(src + c));
    }
  }
  for (int j = n; j < ((n + 3) & ~3); ++j)
    std::memset(dst + j * kHeadDim, 0, kHeadDim * sizeof(float));
}

// Asks for the cache lines of keys [k0, k0 + n) of `rows`, so that the next tile's rows arrive
// while this one is computed (a tile's rows are scattered over pages).
template <int kHeadDim>
FJ_ALWAYS_INLINE void prefetch_rows(const CacheRows& rows, const int32_t* block_row,
                                    int64_t first_row, int page_size, int k0, int n) {
  const int element_bytes = rows.fp8_values != nullptr ? 1 : 2;
  const char* data = static_cast<const char*>(rows.data);
  for (int j = 0; j < n; ++j) {
    const char* src = data + rows.offset(block_row, first_row, page_size, k0 + j) * element_bytes;
    for (int byte = 0; byte < kHeadDim * element_bytes; byte += 64)
      __builtin_prefetch(src + byte);
  }
}

// s[j][i] = scale * dot(k[j], q[i]) for keys j < n (rounded up to 4) and kRows rows: four keys
// by kRows rows of accumulators stay in registers across the head dim.
template <int kHeadDim, int kRowVecs>
FJ_ALWAYS_INLINE void scores_block(const float* q_t, const float* k, float* s, int n, float scale) {
  constexpr int kRows = kRowVecs * kLanes;
  for (int j = 0; j < n; j += 4) {
    Vec acc[4][kRowVecs] = {};
    const float* k_row = k + j * kHeadDim;
    for (int d = 0; d < kHeadDim; ++d) {
      Vec q[kRowVecs];
#pragma GCC unroll 16
      for (int r = 0; r < kRowVecs; ++r)
        q[r] = load(q_t + d * kRows + r * kLanes);
#pragma GCC unroll 16
      for (int c = 0; c < 4; ++c) {
        const float kc = k_row[c * kHeadDim + d];
#pragma GCC unroll 16
        for (int r = 0; r < kRowVecs; ++r)
          acc[c][r] += kc * q[r];
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; ++c)
#pragma GCC unroll 16
      for (int r = 0; r < kRowVecs; ++r)
        store(s + (j + c) * kRows + r * kLanes, acc[c][r] * scale);
  }
}

// o[i][d0, d0 + kVecs * 16) = alpha[i] * o[i][...] + sum over keys j < n of p[j][i] * v[j][...]
// for rows [i0, i0 + 4).
template <int kHeadDim, int kRows, int kVecs>
FJ_ALWAYS_INLINE void pv_chunk(const float* p, const float* v, float* o, const float* alpha, int i0,
                               int d0, int n) {
  Vec acc[4][kVecs];
#pragma GCC unroll 16
  for (int a = 0; a < 4; ++a)
#pragma GCC unroll 16
    for (int c = 0; c < kVecs; ++c)
      acc[a][c] = load(o + (i0 + a) * kHeadDim + d0 + c * kLanes) * alpha[i0 + a];
  for (int j = 0; j < n; ++j) {
    Vec vv[kVecs];
#pragma GCC unroll 16
    for (int c = 0; c < kVecs; ++c)
      vv[c] = load(v + j * kHeadDim + d0 + c * kLanes);
    const float* pj = p + j * kRows + i0;
#pragma GCC unroll 16
    for (int a = 0; a < 4; ++a)
#pragma GCC unroll 16
      for (int c = 0; c < kVecs; ++c)
        acc[a][c] += pj[a] * vv[c];
  }
#pragma GCC unroll 16
  for (int a = 0; a < 4; ++a)
#pragma GCC unroll 16
    for (int c = 0; c < kVecs; ++c)
      store(o + (i0 + a) * kHeadDim + d0 + c * kLanes, acc[a][c]);
}

template <int kHeadDim, int kRows>
FJ_ALWAYS_INLINE void pv_block(const float* p, const float* v, float* o, const float* alpha,
                               int rows, int n) {
  constexpr int kVecs = kHeadDim / kLanes;
  for (int i0 = 0; i0 < rows; i0 += 4) {
    int d0 = 0;
    for (; d0 + 4 * kLanes <= kHeadDim; d0 += 4 * kLanes)
      pv_chunk<kHeadDim, kRows, 4>(p, v, o, alpha, i0, d0, n);
    if constexpr (kVecs % 4 >= 2) {
      pv_chunk<kHeadDim, kRows, 2>(p, v, o, alpha, i0, d0, n);
      d0 += 2 * kLanes;
    }
    if constexpr (kVecs % 2 == 1) pv_chunk<kHeadDim, kRows, 1>(p, v, o, alpha, i0, d0, n);
  }
}

// Calls f(first, position, length) for each run of keys [k0 + first, k0 + first + length) of
// keys [k0, k0 + n) whose positions (from `position`) are consecutive.
template <typename F>
FJ_ALWAYS_INLINE void for_each_run(const fj::ShardPositions& shard, int k0, int n, F&& f) {
  for (int key = k0; key < k0 + n;) {
    const int end = static_cast<int>(std::min<int64_t>(shard.run_end(key), k0 + n));
    f(key - k0, static_cast<int32_t>(shard.position(key)), end - key);
    key = end;
  }
}

// One work item with kRowVecs * 16 >= its row count (so a decode step's few rows do not pay
// for 64).
template <int kHeadDim, bool kBF16, int kRowVecs>
FJ_ALWAYS_INLINE void attend(const Job& job, const Item& item, const fj::MaskParams& params,
                             Scratch& sc) {
  constexpr int kRows = kRowVecs * kLanes;
  const fj::PagedPrefillArgs& args = job.args;
  const CpuKernel& kernel = job.kernel;
  const int group = job.group;
  const int request = item.request;
  const int token_begin = args.query_start_loc[request];
  const int query_len = args.query_start_loc[request + 1] - token_begin;
  // Contiguous: keys of the sequence's own (fj::contiguous_key_count), queries from position 0,
  // rows offset by the batch strides, as in packed_rows_of (templates/paged_prefill.cuh).
  const int seq_len =
      job.contiguous ? fj::contiguous_key_count(args, request) : args.seq_lens[request];
  const int packed_rows = query_len * group;
  const int rows = std::min(kBlockM, packed_rows - item.row0);
  // A sharded call: the shard's keys at their positions in the whole request, whose global
  // length places the queries.
  const fj::ShardPositions shard =
      job.shard != nullptr ? fj::shard_positions(*job.shard, request) : fj::ShardPositions::whole();
  const int q_end = job.shard != nullptr ? job.shard->global_seq_lens[request] : seq_len;
  const int q_offset = job.contiguous ? 0 : q_end - query_len;
  const int key_begin = job.contiguous ? fj::contiguous_key_begin(args, request) : 0;
  const int64_t batch = job.contiguous ? request : 0;
  const int last = item.row0 + rows - 1;
  const int q_lo = q_offset + item.row0 / group;
  const int q_hi = q_offset + last / group;
  const bool one_position = last / group == item.row0 / group;
  const int head_lo = item.kv_head * group + (one_position ? item.row0 % group : 0);
  const int head_hi = item.kv_head * group + (one_position ? last % group : group - 1);

  int row_q[kBlockM], row_head[kBlockM];
  const uint16_t* q = static_cast<const uint16_t*>(args.q) + batch * args.q_stride_batch;
  for (int i = 0; i < kRows; ++i) {
    if (i >= rows) {
      for (int d = 0; d < kHeadDim; ++d)
        sc.q_t[d * kRows + i] = 0.0f;
      continue;
    }
    const int packed = item.row0 + i;
    const int64_t token = token_begin + packed / group;
    row_q[i] = q_offset + packed / group;
    row_head[i] = item.kv_head * group + packed % group;
    const uint16_t* src = q + token * args.q_stride_token + row_head[i] * args.q_stride_head;
    for (int c = 0; c < kHeadDim; c += kLanes) {
      float lanes[kLanes];
      store(lanes, load_half<kBF16>(src + c));
      for (int l = 0; l < kLanes; ++l)
        sc.q_t[(c + l) * kRows + i] = lanes[l];
    }
  }
  std::fill(sc.o, sc.o + kRows * kHeadDim, 0.0f);
  std::fill(sc.row_max, sc.row_max + kRows, kNegInf);
  std::fill(sc.row_sum, sc.row_sum + kRows, 0.0f);

  // Keys the block table can address (paged), as the kernel bounds them.
  const int64_t capacity = int64_t{args.max_blocks_per_req} * job.page_size;
  const int kv_end = job.contiguous || capacity >= seq_len ? seq_len : static_cast<int>(capacity);
  // The range of positions, as the shard's keys (the same keys when unsharded).
  const KvRange range = kv_range_for_heads(kernel, params, request, head_lo, head_hi, q_lo, q_hi);
  const int lo = static_cast<int>(shard.keys_below(range.lo));
  const int visible_end = static_cast<int>(std::min<int64_t>(shard.keys_below(range.hi), kv_end));
  const int first_tile = lo / kBlockN;
  const int end_tile = lo < visible_end ? (visible_end + kBlockN - 1) / kBlockN : first_tile;
  const int32_t* block_row =
      job.contiguous ? nullptr : args.block_table + int64_t{request} * args.block_table_stride;
  const bool fp8 = kernel.config.kv_fp8;
  if (fp8) {
    const float k_scale = args.k_scale[int64_t{item.kv_head} * args.kv_scale_stride];
    const float v_scale = args.v_scale[int64_t{item.kv_head} * args.kv_scale_stride];
    for (size_t byte = 0; byte < kE4m3Values.size(); ++byte) {
      sc.k_fp8[byte] = kE4m3Values[byte] * k_scale;
      sc.v_fp8[byte] = kE4m3Values[byte] * v_scale;
    }
  }
  const CacheRows k_rows{args.k_cache, args.k_stride_block, args.k_stride_slot,
                         int64_t{item.kv_head} * args.k_stride_head + batch * args.k_stride_block,
                         fp8 ? sc.k_fp8 : nullptr};
  const CacheRows v_rows{args.v_cache, args.v_stride_block, args.v_stride_slot,
                         int64_t{item.kv_head} * args.v_stride_head + batch * args.v_stride_block,
                         fp8 ? sc.v_fp8 : nullptr};
  const bool has_score = kernel.variant.has_score();

  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * kBlockN;
    const int n = std::min(k0 + kBlockN, kv_end) - k0;
    // The hull of the tile's positions: a class that holds over it holds for its keys.
    const TileClass tile_class = classify_for_heads(
        kernel, params, request, head_lo, head_hi, q_lo, q_hi, static_cast<int>(shard.position(k0)),
        static_cast<int>(shard.position(k0 + n - 1) + 1));
    if (tile_class == TileClass::Empty) continue;
    load_rows<kHeadDim, kBF16>(sc.k, k_rows, block_row, key_begin, job.page_size, k0, n);
    load_rows<kHeadDim, kBF16>(sc.v, v_rows, block_row, key_begin, job.page_size, k0, n);
    if (tile + 1 < end_tile) {
      const int next_n = std::min(k0 + 2 * kBlockN, kv_end) - (k0 + kBlockN);
      prefetch_rows<kHeadDim>(k_rows, block_row, key_begin, job.page_size, k0 + kBlockN, next_n);
      prefetch_rows<kHeadDim>(v_rows, block_row, key_begin, job.page_size, k0 + kBlockN, next_n);
    }
    scores_block<kHeadDim, kRowVecs>(sc.q_t, sc.k, sc.s, n, args.scale);

    // score_mod, then the mask, a row of keys at a time (the kernel's order), over each run of
    // the tile's keys whose positions are consecutive (the whole tile when unsharded).
    for (int i = 0; i < rows && (has_score || tile_class == TileClass::Partial); ++i) {
      if (has_score) {
        for (int j = 0; j < n; ++j)
          sc.scores[j] = sc.s[j * kRows + i];
        for_each_run(shard, k0, n, [&](int first, int32_t position, int length) {
          kernel.code->score_row(&params, request, row_head[i], row_q[i], position, length,
                                 sc.scores + first);
        });
        for (int j = 0; j < n; ++j)
          sc.s[j * kRows + i] = sc.scores[j];
      }
      if (tile_class == TileClass::Partial) {
        for_each_run(shard, k0, n, [&](int first, int32_t position, int length) {
          kernel.code->mask_row(&params, request, row_head[i], row_q[i], position, length,
                                sc.mask + first);
        });
        for (int j = 0; j < n; ++j)
          if (sc.mask[j] == 0) sc.s[j * kRows + i] = kNegInf;
      }
    }

    // Online softmax, vectorised over rows. A row that has seen no visible key yet has max
    // -inf; its exponent base is then 0 so that every exp2(-inf) is 0, never NaN.
    for (int r = 0; r < kRowVecs; ++r) {
      Vec tile_max = splat(kNegInf);
      for (int j = 0; j < n; ++j)
        tile_max = max(tile_max, load(sc.s + j * kRows + r * kLanes));
      const Vec old_max = load(sc.row_max + r * kLanes);
      const Vec new_max = max(old_max, tile_max);
      const Vec base = new_max == kNegInf ? splat(0.0f) : new_max;
      const Vec alpha = exp2_nonpositive((old_max - base) * kLog2e);
      Vec sum = splat(0.0f);
      for (int j = 0; j < n; ++j) {
        float* s = sc.s + j * kRows + r * kLanes;
        const Vec p = exp2_nonpositive((load(s) - base) * kLog2e);
        store(s, p);
        sum += p;
      }
      store(sc.row_sum + r * kLanes, load(sc.row_sum + r * kLanes) * alpha + sum);
      store(sc.row_max + r * kLanes, new_max);
      store(sc.alpha + r * kLanes, alpha);
    }
    pv_block<kHeadDim, kRows>(sc.s, sc.v, sc.o, sc.alpha, (rows + 3) & ~3, n);
  }

  const fj_dtype dtype = kBF16 ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  uint16_t* out = static_cast<uint16_t*>(args.out) + batch * args.out_stride_batch;
  for (int i = 0; i < rows; ++i) {
    const int64_t token = token_begin + (item.row0 + i) / group;
    const fj::RowFinish finished =
        fj::finish_row(sc.row_max[i], sc.row_sum[i], fj::sink_of(args.sinks, row_head[i]));
    const float inv = finished.scale;
    uint16_t* dst = out + token * args.out_stride_token + row_head[i] * args.out_stride_head;
    for (int d = 0; d < kHeadDim; ++d)
      dst[d] = to_bits(sc.o[i * kHeadDim + d] * inv, dtype);
    if (args.lse != nullptr) args.lse[token * args.lse_stride_token + row_head[i]] = finished.lse;
  }
}

template <int kHeadDim, bool kBF16>
FJ_ALWAYS_INLINE void attend_rows(const Job& job, const Item& item, const fj::MaskParams& params,
                                  int rows, Scratch& scratch) {
  if (rows <= kLanes) {
    attend<kHeadDim, kBF16, 1>(job, item, params, scratch);
  } else if (rows <= 2 * kLanes) {
    attend<kHeadDim, kBF16, 2>(job, item, params, scratch);
  } else {
    attend<kHeadDim, kBF16, 4>(job, item, params, scratch);
  }
}

// One instantiation per head dim of the supported table (flexjit/internal/supported.h).
template <bool kBF16, size_t... kIndex>
FJ_ALWAYS_INLINE void attend_head_dim(const Job& job, const Item& item,
                                      const fj::MaskParams& params, int rows, Scratch& scratch,
                                      std::index_sequence<kIndex...>) {
  const int head_dim = job.kernel.config.head_dim;
  (void)((head_dim == supported::kHeadDims[kIndex] &&
          (attend_rows<supported::kHeadDims[kIndex], kBF16>(job, item, params, rows, scratch),
           true)) ||
         ...);
}

template <bool kBF16>
FJ_ALWAYS_INLINE void attend_dtype(const Job& job, const Item& item, const fj::MaskParams& params,
                                   int rows, Scratch& scratch) {
  attend_head_dim<kBF16>(job, item, params, rows, scratch,
                         std::make_index_sequence<supported::kHeadDims.size()>());
}

// Everything of one work item is inlined here, so each clone is built for its target.
FJ_CPU_TARGETS void run_item(const Job& job, const Item& item, const fj::MaskParams& params,
                             int rows) {
  Scratch& scratch = thread_scratch();
  if (job.kernel.config.bf16) {
    attend_dtype<true>(job, item, params, rows, scratch);
  } else {
    attend_dtype<false>(job, item, params, rows, scratch);
  }
}

// Request r's shard (check_host_batch): its global length covers its query rows and its keys'
// positions lie in [0, global length).
std::optional<std::string> check_shard(const fj::KvShard& shard, int r, int32_t seq_len,
                                       int32_t query_rows) {
  const int32_t global = shard.global_seq_lens[r];
  if (seq_len < 0) return fmt::format("seq_lens[{}] ({}) is negative", r, seq_len);
  if (global < query_rows) {
    return fmt::format("global_seq_lens[{}] ({}) is smaller than the request's {} query rows", r,
                       global, query_rows);
  }
  if (seq_len == 0) return std::nullopt;
  const fj::ShardPositions positions = fj::shard_positions(shard, r);
  const int64_t first = positions.position(0);
  const int64_t last = positions.position(seq_len - 1);
  if (first < 0 || last >= global) {
    return fmt::format(
        "request {}'s shard puts its {} keys at positions {} to {}, outside [0, "
        "global_seq_lens[{}] = {}) (kv_shard_offsets[{}] = {}, rank {} of {}, interleave {})",
        r, seq_len, first, last, r, global, r, positions.offset, shard.rank, shard.count,
        shard.interleave);
  }
  return std::nullopt;
}

int32_t query_rows(const fj::PagedPrefillArgs& args, int request) {
  return args.query_start_loc[request + 1] - args.query_start_loc[request];
}

}  // namespace

Result<std::shared_ptr<const CpuKernel>> make_cpu_kernel(const Variant& variant,
                                                         const PrefillKernelConfig& config) {
  auto code = make_host_code(variant, true, host_code_store_from_environment());
  if (!code) return code.error();
  PrefillKernelConfig cpu_config = config;
  cpu_config.arch = "cpu";
  // The GPU kernel's name for the "cpu" arch ("prefill_causal_hd128_bf16_page16_cpu"), with the
  // device in front instead: "cpu_prefill_causal_hd128_bf16_page16".
  std::string name = prefill_kernel_spec(variant, cpu_config).name;
  name.resize(name.size() - std::string_view("_cpu").size());
  return std::shared_ptr<const CpuKernel>(
      std::make_shared<CpuKernel>(CpuKernel{"cpu_" + name, cpu_config, variant, std::move(*code)}));
}

std::optional<std::string> check_host_batch(const fj::PagedPrefillArgs& args, bool contiguous,
                                            int32_t page_size, int32_t num_tokens,
                                            int32_t num_key_tokens, int32_t max_query_len,
                                            int64_t num_blocks, const fj::KvShard* shard) {
  const char* starts = contiguous ? "cu_seqlens" : "query_start_loc";
  const char* requests = contiguous ? "sequence" : "request";
  if (args.query_start_loc[0] < 0 || args.query_start_loc[0] > num_tokens) {
    return fmt::format("{}[0] ({}) is outside [0, num_tokens = {}]", starts,
                       args.query_start_loc[0], num_tokens);
  }
  for (int r = 0; r < args.num_reqs; ++r) {
    const int32_t begin = args.query_start_loc[r];
    const int32_t end = args.query_start_loc[r + 1];
    if (end < begin || end > num_tokens) {
      return fmt::format("{}[{}] ({}) is smaller than {}[{}] ({}) or past num_tokens ({})", starts,
                         r + 1, end, starts, r, begin, num_tokens);
    }
    if (end - begin > max_query_len) {
      return fmt::format("{} {} has {} query rows, more than max_{} ({})", requests, r, end - begin,
                         contiguous ? "seq_len" : "query_len", max_query_len);
    }
    if (contiguous) {
      if (args.key_start_loc == nullptr) continue;
      const int32_t key_begin = args.key_start_loc[r];
      const int32_t key_end = args.key_start_loc[r + 1];
      if (key_begin < 0 || key_end < key_begin || key_end > num_key_tokens) {
        return fmt::format(
            "cu_seqlens_k[{}] ({}) and [{}] ({}) do not make a range of [0, num_tokens_k = {}]", r,
            key_begin, r + 1, key_end, num_key_tokens);
      }
      continue;
    }
    const int32_t seq_len = args.seq_lens[r];
    if (shard != nullptr) {
      if (auto problem = check_shard(*shard, r, seq_len, end - begin)) return problem;
    } else if (seq_len < end - begin) {
      return fmt::format("seq_lens[{}] ({}) is smaller than the request's {} query rows", r,
                         seq_len, end - begin);
    }
    const int64_t blocks =
        std::min<int64_t>((int64_t{seq_len} + page_size - 1) / page_size, args.max_blocks_per_req);
    const int32_t* row = args.block_table + int64_t{r} * args.block_table_stride;
    for (int64_t j = 0; j < blocks; ++j) {
      if (row[j] < 0) {
        return fmt::format("block_table[{}][{}] ({}) is negative", r, j, row[j]);
      }
      if (num_blocks > 0 && row[j] >= num_blocks) {
        return fmt::format("block_table[{}][{}] ({}) is past the cache's {} blocks (num_blocks)", r,
                           j, row[j], num_blocks);
      }
    }
  }
  return std::nullopt;
}

void attention(const CpuKernel& kernel, const fj::PagedPrefillArgs& args, const fj::KvShard* shard,
               ThreadPool& pool) {
  const bool contiguous = kernel.config.page_size == 0;
  const Job job{
      kernel, args, contiguous, kernel.config.page_size, args.num_heads / args.num_kv_heads, shard};
  // Items of longer queries first, so that the last ones handed out are short.
  std::vector<Item> items;
  for (int r = 0; r < args.num_reqs; ++r) {
    const int packed_rows = query_rows(args, r) * job.group;
    for (int row0 = (packed_rows - 1) / kBlockM * kBlockM; row0 >= 0; row0 -= kBlockM)
      for (int h = 0; h < args.num_kv_heads; ++h)
        items.push_back({r, h, row0});
  }
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    return query_rows(args, a.request) > query_rows(args, b.request);
  });

  // With a bad_index buffer, each item reports into its own copy, and the report of the first
  // item (in item order) that has one is kept: the same whatever thread ran what.
  int32_t* bad_index = args.params.array[0].bad_index;
  std::vector<std::array<int32_t, 4>> reports(bad_index != nullptr ? items.size() : 0);
  pool.run(static_cast<int64_t>(items.size()), [&](int64_t index) {
    const Item& item = items[index];
    const int rows = std::min(kBlockM, query_rows(args, item.request) * job.group - item.row0);
    if (bad_index == nullptr) {
      run_item(job, item, args.params, rows);
      return;
    }
    fj::MaskParams params = args.params;
    reports[index] = {0, 0, 0, 0};
    for (fj::ArrayParam& array : params.array)
      array.bad_index = reports[index].data();
    run_item(job, item, params, rows);
  });
  if (bad_index != nullptr && bad_index[0] == 0) {
    for (const std::array<int32_t, 4>& report : reports) {
      if (report[0] == 0) continue;
      std::copy(report.begin(), report.end(), bad_index);
      break;
    }
  }
}

namespace {

// Merges one row's `count` states (state s: lse_of(s), output row row_of(s)) in state order into
// dst: out = sum_s w_s out_s / sum_s w_s with w_s = e^(lse_s - m), the sink joining the
// denominator (finish_row). A state of weight 0 is skipped, so garbage (even NaN) in an empty
// partial cannot leak; every state is read before dst is written (dst may be one of them).
// Returns the row's lse.
template <typename LseOf, typename RowOf>
float merge_row(int count, const LseOf& lse_of, const RowOf& row_of, float sink, int head_dim,
                fj_dtype dtype, float* merged, uint16_t* dst) {
  float m = kNegInf;
  for (int s = 0; s < count; ++s)
    m = std::max(m, lse_of(s));
  const bool empty = m == kNegInf;
  float total = 0.0f;
  std::fill(merged, merged + head_dim, 0.0f);
  for (int s = 0; s < count; ++s) {
    const float w = empty ? 0.0f : std::exp(lse_of(s) - m);
    total += w;
    if (!(w > 0.0f)) continue;
    const uint16_t* row = row_of(s);
    for (int d = 0; d < head_dim; ++d)
      merged[d] += w * from_bits(row[d], dtype);
  }
  const fj::RowFinish finished = fj::finish_row(m, total, sink);
  for (int d = 0; d < head_dim; ++d)
    dst[d] = to_bits(merged[d] * finished.scale, dtype);
  return finished.lse;
}

// Calls f(token, head, merged) for every (token, head) row on `pool`, 64 rows a task; `merged`
// is the task's scratch of head_dim floats.
template <typename F>
void for_each_merge_row(int32_t num_tokens, int32_t num_heads, int32_t head_dim, ThreadPool& pool,
                        const F& f) {
  constexpr int64_t kRowsPerIndex = 64;
  const int64_t rows = int64_t{num_tokens} * num_heads;
  pool.run((rows + kRowsPerIndex - 1) / kRowsPerIndex, [&](int64_t index) {
    std::vector<float> merged(head_dim);
    for (int64_t row = index * kRowsPerIndex; row < std::min(rows, (index + 1) * kRowsPerIndex);
         ++row)
      f(row / num_heads, row % num_heads, merged.data());
  });
}

}  // namespace

void merge_states(const fj::MergeStatesArgs& args, bool bf16, ThreadPool& pool) {
  const fj_dtype dtype = bf16 ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  const uint16_t* out_a = static_cast<const uint16_t*>(args.out_a);
  const uint16_t* out_b = static_cast<const uint16_t*>(args.out_b);
  uint16_t* out = static_cast<uint16_t*>(args.out);
  for_each_merge_row(args.num_tokens, args.num_heads, args.head_dim, pool,
                     [&](int64_t token, int64_t head, float* merged) {
                       const float lses[2] = {args.lse_a[token * args.lse_a_stride_token + head],
                                              args.lse_b[token * args.lse_b_stride_token + head]};
                       const uint16_t* rows[2] = {
                           out_a + token * args.out_a_stride_token + head * args.out_a_stride_head,
                           out_b + token * args.out_b_stride_token + head * args.out_b_stride_head};
                       const float lse = merge_row(
                           2, [&](int s) { return lses[s]; }, [&](int s) { return rows[s]; },
                           fj::sink_of(args.sinks, head), args.head_dim, dtype, merged,
                           out + token * args.out_stride_token + head * args.out_stride_head);
                       if (args.lse != nullptr)
                         args.lse[token * args.lse_stride_token + head] = lse;
                     });
}

void merge_states_n(const fj_merge_states_n_args& args, ThreadPool& pool) {
  const uint16_t* states = static_cast<const uint16_t*>(args.states_out);
  uint16_t* out = static_cast<uint16_t*>(args.out);
  for_each_merge_row(args.num_tokens, args.num_heads, args.head_dim, pool,
                     [&](int64_t token, int64_t head, float* merged) {
                       const float* lses = args.states_lse + token * args.lse_stride_token + head;
                       const uint16_t* rows =
                           states + token * args.out_stride_token + head * args.out_stride_head;
                       const float lse = merge_row(
                           args.num_states, [&](int s) { return lses[s * args.lse_stride_state]; },
                           [&](int s) { return rows + s * args.out_stride_state; },
                           fj::sink_of(args.sinks, head), args.head_dim, args.dtype, merged,
                           out + token * args.merged_stride_token + head * args.merged_stride_head);
                       if (args.lse != nullptr)
                         args.lse[token * args.merged_lse_stride_token + head] = lse;
                     });
}

void kv_cache_write(const fj::KvCacheWriteArgs& args, ThreadPool& pool) {
  constexpr int64_t kTokensPerIndex = 64;
  const bool fp8 = args.k_scale != nullptr;
  const fj_dtype input_dtype = args.input_bf16 != 0 ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  const uint16_t* key = static_cast<const uint16_t*>(args.key);
  const uint16_t* value = static_cast<const uint16_t*>(args.value);
  uint8_t* k_cache = static_cast<uint8_t*>(args.k_cache);
  uint8_t* v_cache = static_cast<uint8_t*>(args.v_cache);
  const int64_t element_bytes = fp8 ? 1 : 2;
  // A row of `head_dim` inputs into the cache: copied, or each value divided by the kv head's
  // scale and rounded to e4m3.
  const auto write_row = [&](uint8_t* dst, const uint16_t* src, const float* scales, int64_t head) {
    if (!fp8) {
      std::memcpy(dst, src, size_t(args.head_dim) * sizeof(uint16_t));
      return;
    }
    const float scale = scales[head * args.kv_scale_stride];
    for (int d = 0; d < args.head_dim; ++d)
      dst[d] = static_cast<uint8_t>(fj::e4m3_from_float(from_bits(src[d], input_dtype) / scale));
  };
  pool.run((args.num_tokens + kTokensPerIndex - 1) / kTokensPerIndex, [&](int64_t index) {
    const int64_t end = std::min<int64_t>(args.num_tokens, (index + 1) * kTokensPerIndex);
    for (int64_t token = index * kTokensPerIndex; token < end; ++token) {
      const int64_t slot = args.slot_mapping[token];
      if (slot < 0 || slot >= args.num_slots) continue;
      const int64_t block = slot / args.page_size;
      const int64_t offset = slot % args.page_size;
      for (int64_t head = 0; head < args.num_kv_heads; ++head) {
        write_row(k_cache + (block * args.k_stride_block + offset * args.k_stride_slot +
                             head * args.k_stride_head) *
                                element_bytes,
                  key + token * args.key_stride_token + head * args.key_stride_head, args.k_scale,
                  head);
        write_row(v_cache + (block * args.v_stride_block + offset * args.v_stride_slot +
                             head * args.v_stride_head) *
                                element_bytes,
                  value + token * args.value_stride_token + head * args.value_stride_head,
                  args.v_scale, head);
      }
    }
  });
}

}  // namespace flexjit::cpu
