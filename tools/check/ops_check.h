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
  uint64_t seed = 1;
};

struct KvCacheWriteCheckReport {
  int64_t written_rows = 0;    // (token, kv head) rows whose slot is valid
  int64_t skipped_tokens = 0;  // tokens with slot -1 or past the cache
  int64_t wrong_elements = 0;  // cache elements that differ from the expected cache
};

// Random keys and values with strided rows, a slot mapping holding -1 and out-of-range slots,
// caches filled with a poison pattern; every cache element is compared after the write.
Result<KvCacheWriteCheckReport> run_kv_cache_write_check(fj_context* context,
                                                         const KvCacheWriteCheckConfig& config);

struct MergeStatesCheckConfig {
  fj_dtype dtype = FJ_DTYPE_BF16;
  int num_tokens = 50;
  int num_heads = 8;
  int head_dim = 128;
  bool in_place = false;              // out aliases out_a
  bool sinks = false;                 // pass per-head sink logits (one head without)
  fj_device device = FJ_DEVICE_CUDA;  // FJ_DEVICE_CPU: host memory, no GPU needed
  uint64_t seed = 1;
};

struct MergeStatesCheckReport {
  double max_abs_error = 0;  // against the float64 merge of the 16-bit inputs
  double lse_max_abs_error = 0;
  int64_t bad_outputs = 0;       // NaN or Inf in out or a finite row's lse
  int64_t empty_rows_wrong = 0;  // rows empty on both sides whose out is not 0 or lse not the sink
};

// Random partial outputs and LSEs; some rows are empty on one side (lse -inf, NaN garbage in
// that side's out) and some on both. Checked against the float64 merge.
Result<MergeStatesCheckReport> run_merge_states_check(fj_context* context,
                                                      const MergeStatesCheckConfig& config);

}  // namespace flexjit
