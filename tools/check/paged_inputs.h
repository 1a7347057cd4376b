// A paged (or contiguous-KV encoder) check's configuration, report and random inputs, and the
// comparison of a launch's outputs with the double-precision reference: what the GPU check
// (paged_check.h) and the CPU check (cpu_check.h) share. Inputs follow vLLM's paged layout with
// a shuffled block table, garbage in the block-table entries past each sequence and NaN in
// cache slots no request owns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check/reference.h"
#include "flexjit/compiler/result.h"
#include "flexjit/flexjit.h"

namespace flexjit {

// Where a K or V element lives: vLLM's NHD cache [blocks, page, kv_heads, D], or HND
// [blocks, kv_heads, page, D], K and V in buffers of their own; or one buffer holding both
// (paged attention checks only; the KV-cache write check takes NHD and HND): NHD_JOINT
// [blocks, 2, page, kv_heads, D] (vLLM's FlashAttention cache), HND_JOINT
// [blocks, 2, kv_heads, page, D] (FlashInfer's HND), NHD_2D [blocks, page, kv_heads, 2D] (each
// head's K row followed by its V row).
enum class KvLayout { NHD, HND, NHD_JOINT, HND_JOINT, NHD_2D };

// The scales of an fp8 K/V cache (fj_paged_attention_args.kv_scale_stride): one per tensor
// (stride 0) or one per kv head (stride 1).
enum class KvScale { Tensor, Head };

// How a paged check launches: fj_paged_attention, or through a plan (fj_plan_update then
// fj_plan_run), or a plan's run captured once in a CUDA graph and replayed.
enum class PagedLaunch { Direct, Planned, Graph };

struct PagedCheckConfig {
  std::string mask;   // a mask or a variant
  std::string score;  // a score to pair with a mask, or empty
  std::vector<std::pair<std::string, std::string>> defines;  // const overrides
  // Contiguous K/V packed like q (the encoder call, fj_varlen_attention): context_lens must be
  // 0 and page_size/layout are ignored.
  bool contiguous = false;
  fj_dtype dtype = FJ_DTYPE_BF16;
  // An fp8 (e4m3) K/V cache (fj_kernel_desc::kv_dtype FJ_DTYPE_FP8_E4M3; paged only): random K/V
  // quantized into it with random positive scales, kv_scale of them; the reference reads the
  // dequantized values. q and out stay `dtype`.
  bool kv_fp8 = false;
  KvScale kv_scale = KvScale::Head;
  int head_dim = 128;
  float scale = 0.0f;  // the softmax scale; 0: 1 / sqrt(head_dim), as in the C API
  int page_size = 16;
  int num_heads = 8;
  int num_kv_heads = 8;
  KvLayout layout = KvLayout::NHD;
  std::vector<int> query_lens;    // new tokens of each request
  std::vector<int> context_lens;  // keys already cached before them (seq_len = context + query)
  std::vector<int32_t> params;    // scalar runtime parameters by slot (floats as bits)
  // Array runtime parameters by slot. Empty while the program declares arrays: random ones
  // shaped by their dimension names (random_arrays below).
  std::vector<HostArray> arrays;
  // Attention sinks (fj_paged_attention_args.sinks): [num_heads] logits, or empty: none.
  std::vector<float> sinks;
  uint64_t seed = 1;
  int timing_iterations = 0;  // > 0: also time this many launches
  bool check_bounds = false;  // pass a bad_index buffer: report the first out-of-range read
  // GPU checks: also run the CPU backend (cpu_check.h) on the same inputs and report how far
  // the two outputs are apart (cpu_* fields of the report).
  bool compare_cpu = false;
  std::string arch;  // empty: the device's
  PagedLaunch launch = PagedLaunch::Direct;
};

struct PagedCheckReport {
  std::string kernel_name;
  int num_tokens = 0;
  int64_t visible_pairs = 0;  // (row, key) pairs kept by the mask, over all heads
  double relative_error = 0;  // ||out - ref|| / ||ref||, Frobenius norms
  double max_abs_error = 0;   // max |out - ref|
  double lse_max_abs_error = 0;
  int64_t bad_outputs = 0;       // NaN/Inf (also: poisoned values never written)
  int64_t empty_rows_wrong = 0;  // rows with no visible key whose out is not 0 or lse not -inf
  double kernel_ms = 0;          // mean time per launch, when timed
  // With check_bounds: the checked launch's debug word (flexjit.h, bad_index): {1, array slot,
  // row, col} for the first out-of-range array read, code 2 or 3 for a bad block id or query
  // length, all 0 when nothing was reported.
  int32_t bad_index[4] = {0, 0, 0, 0};
  // With compare_cpu: ||out - cpu|| / ||cpu|| (Frobenius, finite pairs), the largest LSE
  // difference, and the outputs or LSEs finite on one device only. -1: not compared.
  double cpu_relative_error = -1;
  double cpu_lse_max_abs_error = 0;
  int64_t cpu_mismatched_non_finite = 0;
};

// A check's inputs on the host: what the reference reads (values rounded to the dtype, or an fp8
// cache's dequantized values) and the bits a launch gets.
struct PagedInputs {
  HostPagedBatch batch;
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  // An fp8 cache (PagedCheckConfig.kv_fp8): its e4m3 bytes instead of k_bits and v_bits, and the
  // float32 scales of the launch (one, or one per kv head: kv_scale_stride 0 or 1).
  std::vector<uint8_t> k_fp8, v_fp8;
  std::vector<float> k_scale, v_scale;
  int32_t kv_scale_stride = 0;
  // Joint layouts: K and V share k_bits (or k_fp8; v_bits or v_fp8 stays empty) and V's element 0
  // is this many elements after K's; -1 while V has a buffer of its own.
  int64_t v_offset = -1;

  bool kv_fp8() const { return !k_scale.empty(); }
  // Bytes of one cache element: 1 for fp8, else 2.
  int cache_element_bytes() const { return kv_fp8() ? 1 : 2; }
  // The K and V cache buffers a launch copies, whatever their element.
  const void* k_cache() const {
    return kv_fp8() ? static_cast<const void*>(k_fp8.data()) : k_bits.data();
  }
  const void* v_cache() const {
    return kv_fp8() ? static_cast<const void*>(v_fp8.data()) : v_bits.data();
  }
  size_t k_cache_bytes() const { return kv_fp8() ? k_fp8.size() : k_bits.size() * 2; }
  size_t v_cache_bytes() const { return kv_fp8() ? v_fp8.size() : v_bits.size() * 2; }
};

// The inputs run_paged_check makes for `config` (whose arrays must be given): the same config
// gives the same inputs, so another device (the CPU backend, cpu_check.h) can run them too.
Result<PagedInputs> make_paged_inputs(const PagedCheckConfig& config);

// Compares a launch's outputs over `batch` (out [tokens][heads][head_dim] bits, lse
// [tokens][heads]) with the reference, filling the report's error fields as run_paged_check does.
void compare_paged_outputs(const PagedCheckConfig& config, const HostPagedBatch& batch,
                           const ReferenceOutput& reference, const std::vector<uint16_t>& out_bits,
                           const std::vector<float>& lse, PagedCheckReport& report);

// The paged call's arguments over buffers (device or host) holding `inputs`' batch, V at
// v_offset elements into the K buffer for joint layouts; bad_index, workspace, sinks and the fp8
// scales null (kv_scale_stride set).
fj_paged_attention_args paged_args(const HostPagedBatch& batch, const PagedInputs& inputs, void* q,
                                   void* out, void* k, void* v, void* lse, void* qsl,
                                   void* seq_lens, void* table,
                                   const std::vector<fj_array>& arrays);

// The encoder call over the same buffers: K/V rows are the batch's one-token blocks.
fj_varlen_attention_args varlen_args(const fj_paged_attention_args& paged,
                                     const HostPagedBatch& batch);

// Random contents for array parameters, shaped by their dimension names: `b` has one row per
// request, `h` one per query head, `q`/`kv` one per position up to the longest sequence, any
// other name 16. Int arrays over positions (`doc: int[b, kv]`) hold nondecreasing segment ids
// (documents of random lengths); other int arrays hold values in [0, longest sequence]
// (prefix lengths; range bounds); float arrays hold values in [0, 1) (ALiBi-like slopes).
std::vector<HostArray> random_arrays(const std::vector<RuntimeParam>& arrays, int num_reqs,
                                     int num_heads, int max_seq_len, uint64_t seed);

// Attention-sink logits (PagedCheckConfig.sinks) for `num_heads` heads: uniform in [-2, 8), around
// the LSE of a row over a few hundred keys so that they move the result both ways, and every
// fifth head without a sink (-inf). The same on every platform.
std::vector<float> random_sinks(int num_heads, uint64_t seed);

// When `config` gives no arrays and the program declares some, random_arrays of its requests,
// heads and longest sequence, from config.seed.
void fill_random_arrays(PagedCheckConfig& config, const std::vector<RuntimeParam>& arrays);

// The variant `config` names in `program`: its mask or variant, score and const overrides.
Result<Variant> config_variant(const fj_program& program, const PagedCheckConfig& config);

// The kernel description of `config`; `defines` holds the fj_define array it points to (and
// `config` the strings), so both must outlive the description.
fj_kernel_desc kernel_desc(const PagedCheckConfig& config, std::vector<fj_define>& defines);

// The tolerance docs/architecture.md#targets sets for the relative error: 1e-2 for bf16, 2e-3 for
// fp16.
double relative_error_tolerance(fj_dtype dtype);
// A check's: its dtype's, or bf16's for an fp8 cache whatever the dtype of q.
double relative_error_tolerance(const PagedCheckConfig& config);

}  // namespace flexjit
