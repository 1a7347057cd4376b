// Checks of the mask-independent kernels on random inputs (KV-cache write, merge_states), for
// the GPU tests: each runs the kernel through the C API and compares with a host computation.
#pragma once

#include <cstdint>

#include "check/paged_inputs.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"

namespace flexjit {

struct KvCacheWriteCheckConfig {
  int num_tokens = 37;
  int num_kv_heads = 4;
  int head_dim = 128;
  int page_size = 16;
  int num_blocks = 9;
  KvLayout layout = KvLayout::NHD;
  // An fp8 (e4m3) cache (fj_kv_cache_write_args.cache_dtype FJ_DTYPE_FP8_E4M3) written from
  // `dtype` inputs with random scales, kv_scale of them; else a 16-bit copy (dtype unused).
  bool fp8 = false;
  fj_dtype dtype = FJ_DTYPE_BF16;
  KvScale kv_scale = KvScale::Head;
  fj_device device = FJ_DEVICE_CUDA;  // FJ_DEVICE_CPU: host memory, no GPU needed
  uint64_t seed = 1;
};

struct KvCacheWriteCheckReport {
  int64_t written_rows = 0;    // (token, kv head) rows whose slot is valid
  int64_t skipped_tokens = 0;  // tokens with slot -1 or past the cache
  int64_t wrong_elements = 0;  // cache elements that differ from the expected cache
};

// Random keys and values with strided rows, a slot mapping holding -1 and out-of-range slots,
// caches filled with a poison pattern; every cache element is compared after the write. A
// 16-bit cache must hold a copy of the inputs' bits; an fp8 cache fj::e4m3_from_float(x / scale)
// of each input x computed on the host, bit for bit (a NaN input's byte may be either e4m3 NaN:
// the sign of a NaN quotient is not defined). The fp8 inputs mix random bits (zeros, subnormals,
// infinities, NaN, values far past 448 and far below the smallest subnormal) with values around
// the e4m3 range, and ties between two e4m3 values, which the power-of-two scales of every
// other kv head keep exact.
Result<KvCacheWriteCheckReport> run_kv_cache_write_check(fj_context* context,
                                                         const KvCacheWriteCheckConfig& config);

struct MergeStatesCheckConfig {
  fj_dtype dtype = FJ_DTYPE_BF16;
  int num_tokens = 50;
  int num_heads = 8;
  int head_dim = 128;
  // 0: fj_merge_states (states a and b); N >= 1: fj_merge_states_n of N states, stacked
  int num_states = 0;
  bool in_place = false;              // out aliases out_a (the first state)
  bool sinks = false;                 // pass per-head sink logits (one head without)
  fj_device device = FJ_DEVICE_CUDA;  // FJ_DEVICE_CPU: host memory, no GPU needed
  uint64_t seed = 1;
};

struct MergeStatesCheckReport {
  double max_abs_error = 0;  // against the float64 merge of the 16-bit inputs
  double lse_max_abs_error = 0;
  int64_t bad_outputs = 0;       // NaN or Inf in out or a finite row's lse
  int64_t empty_rows_wrong = 0;  // rows empty in every state whose out is not 0 or lse not the sink
};

// Random partial outputs and LSEs; some rows are empty in some states (lse -inf, NaN garbage in
// that state's out) and some in all. Checked against the float64 merge.
Result<MergeStatesCheckReport> run_merge_states_check(fj_context* context,
                                                      const MergeStatesCheckConfig& config);

}  // namespace flexjit
