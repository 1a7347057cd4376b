#include "check/paged_inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "check/check_support.h"
#include "fj_ops.cuh"
#include "launch/handles.h"

namespace flexjit {

namespace {

Result<PagedInputs> fill_values(const PagedCheckConfig& config, int num_blocks,
                                std::mt19937_64& rng, PagedInputs& inputs);

Result<PagedInputs> make_inputs(const PagedCheckConfig& config, std::mt19937_64& rng) {
  PagedInputs inputs;
  HostPagedBatch& batch = inputs.batch;
  const int num_reqs = static_cast<int>(config.query_lens.size());
  if (num_reqs == 0 || config.context_lens.size() != config.query_lens.size()) {
    return Error{"query_lens and context_lens must be non-empty and of equal length"};
  }
  batch.num_heads = config.num_heads;
  batch.num_kv_heads = config.num_kv_heads;
  batch.head_dim = config.head_dim;
  batch.page_size = config.page_size;
  batch.scale =
      config.scale != 0.0f ? config.scale : 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  batch.params = config.params;
  batch.arrays = config.arrays;
  batch.sinks = config.sinks;
  if (!batch.sinks.empty() && batch.sinks.size() != static_cast<size_t>(config.num_heads)) {
    return Error{"sinks must have one logit per query head"};
  }

  batch.query_start_loc.push_back(0);
  int max_blocks = 1;
  for (int r = 0; r < num_reqs; ++r) {
    if (config.query_lens[r] < 0 || config.context_lens[r] < 0) {
      return Error{"query and context lengths must be >= 0"};
    }
    batch.query_start_loc.push_back(batch.query_start_loc.back() + config.query_lens[r]);
    batch.seq_lens.push_back(config.context_lens[r] + config.query_lens[r]);
    max_blocks =
        std::max(max_blocks, (batch.seq_lens.back() + config.page_size - 1) / config.page_size);
  }
  if (config.contiguous) {
    if (config.kv_fp8) return Error{"an fp8 K/V cache is paged: contiguous K/V is 16-bit"};
    // The reference reads contiguous rows as a cache of one-token pages whose table maps key
    // j of sequence r to row cu_seqlens[r] + j.
    for (int r = 0; r < num_reqs; ++r) {
      if (config.context_lens[r] != 0) return Error{"contiguous K/V has no cached context"};
    }
    batch.page_size = 1;
    batch.max_blocks_per_req = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
    batch.block_table_stride = std::max(1, batch.max_blocks_per_req);
    batch.block_table.assign(num_reqs * batch.block_table_stride, 0);
    for (int r = 0; r < num_reqs; ++r) {
      for (int j = 0; j < batch.seq_lens[r]; ++j) {
        batch.block_table[r * batch.block_table_stride + j] = batch.query_start_loc[r] + j;
      }
    }
    const int64_t row = int64_t{config.num_kv_heads} * config.head_dim;
    for (HostCache* cache : {&batch.k, &batch.v}) {
      cache->stride_block = row;
      cache->stride_slot = 0;
      cache->stride_head = config.head_dim;
    }
    return fill_values(config, std::max(1, batch.num_tokens()), rng, inputs);
  }
  // Spare columns and spare physical blocks hold garbage that a correct kernel never reads.
  batch.max_blocks_per_req = max_blocks;
  batch.block_table_stride = max_blocks + 3;
  int used_blocks = 0;
  for (int r = 0; r < num_reqs; ++r) {
    used_blocks += (batch.seq_lens[r] + config.page_size - 1) / config.page_size;
  }
  const int num_blocks = used_blocks + 2;
  std::vector<int32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  batch.block_table.assign(num_reqs * batch.block_table_stride, 0);
  int next_block = 0;
  for (int r = 0; r < num_reqs; ++r) {
    const int blocks = (batch.seq_lens[r] + config.page_size - 1) / config.page_size;
    for (int j = 0; j < batch.block_table_stride; ++j) {
      batch.block_table[r * batch.block_table_stride + j] =
          j < blocks ? physical[next_block++] : 0x7fffff00 + j;
    }
  }

  const int64_t d = config.head_dim;
  const int64_t hk = config.num_kv_heads;
  const int64_t page = config.page_size;
  int64_t stride_block = page * hk * d;
  int64_t stride_slot = hk * d;
  int64_t stride_head = d;
  switch (config.layout) {
    case KvLayout::NHD:
      break;
    case KvLayout::HND:
      stride_head = page * d;
      stride_slot = d;
      break;
    case KvLayout::NHD_JOINT:
      stride_block = 2 * page * hk * d;
      inputs.v_offset = page * hk * d;
      break;
    case KvLayout::HND_JOINT:
      stride_block = 2 * page * hk * d;
      stride_head = page * d;
      stride_slot = d;
      inputs.v_offset = page * hk * d;
      break;
    case KvLayout::NHD_2D:
      stride_block = page * hk * 2 * d;
      stride_slot = hk * 2 * d;
      stride_head = 2 * d;
      inputs.v_offset = d;
      break;
  }
  for (HostCache* cache : {&batch.k, &batch.v}) {
    cache->stride_block = stride_block;
    cache->stride_slot = stride_slot;
    cache->stride_head = stride_head;
  }
  return fill_values(config, num_blocks, rng, inputs);
}

// An fp8 cache's content before scaling: e4m3 values spread over the format, none past 448 (so
// none saturates): most normal with deviation 48, one in 16 tiny (subnormals below 2^-6, zeros
// below 2^-10), one in 32 large (240 to 448).
class QuantizedValues {
 public:
  float operator()(std::mt19937_64& rng) {
    const float kind = unit_(rng);
    const float sign = unit_(rng) < 0.5f ? -1.0f : 1.0f;
    if (kind < 1.0f / 16) return sign * std::exp2(-11.0f + 6.0f * unit_(rng));
    if (kind < 3.0f / 32) return sign * (240.0f + (fj::kE4m3Max - 240.0f) * unit_(rng));
    return std::clamp(normal_(rng), -fj::kE4m3Max, fj::kE4m3Max);
  }

 private:
  std::uniform_real_distribution<float> unit_{0.0f, 1.0f};
  std::normal_distribution<float> normal_{0.0f, 48.0f};
};

// Random positive scales of an fp8 cache, one or one per kv head: 1/48 times a factor in
// [1/2, 2), so that the dequantized values are about unit normal, as the 16-bit checks' are.
std::vector<float> random_scales(int count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> exponent(-1.0f, 1.0f);
  std::vector<float> scales;
  for (int i = 0; i < count; ++i)
    scales.push_back(std::exp2(exponent(rng)) / 48.0f);
  return scales;
}

// Random q and K/V values of every key a request owns; every other cache element is NaN, so a
// kernel that reads one shows it in its output. An fp8 cache holds values x = y * scale, y from
// QuantizedValues, stored as fj_kv_cache_write does (e4m3_from_float(x / scale)); the reference
// reads e4m3_to_float(byte) * scale.
Result<PagedInputs> fill_values(const PagedCheckConfig& config, int num_blocks,
                                std::mt19937_64& rng, PagedInputs& inputs) {
  HostPagedBatch& batch = inputs.batch;
  const int num_reqs = batch.num_reqs();
  const int64_t d = config.head_dim;
  const int64_t hk = config.num_kv_heads;
  const int64_t page = batch.page_size;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t cache_elems = num_blocks * batch.k.stride_block;
  const uint16_t nan = nan_bits(config.dtype);
  const bool joint = inputs.v_offset >= 0;
  const bool fp8 = config.kv_fp8;
  constexpr uint8_t kE4m3Nan = 0x7f;
  if (fp8) {
    const int scales = config.kv_scale == KvScale::Head ? config.num_kv_heads : 1;
    inputs.kv_scale_stride = config.kv_scale == KvScale::Head ? 1 : 0;
    inputs.k_scale = random_scales(scales, rng);
    inputs.v_scale = random_scales(scales, rng);
    inputs.k_fp8.assign(cache_elems, kE4m3Nan);
    inputs.v_fp8.assign(joint ? 0 : cache_elems, kE4m3Nan);
  } else {
    inputs.k_bits.assign(cache_elems, nan);
    inputs.v_bits.assign(joint ? 0 : cache_elems, nan);
  }
  batch.k.values.assign(cache_elems, std::numeric_limits<float>::quiet_NaN());
  batch.v.values.assign(joint ? 0 : cache_elems, std::numeric_limits<float>::quiet_NaN());
  // A joint layout writes V into K's buffer; the reference then reads V from a copy of that
  // buffer shifted by v_offset, through the same strides.
  uint16_t* k_bits = inputs.k_bits.data();
  uint16_t* v_bits = fp8 ? nullptr : joint ? k_bits + inputs.v_offset : inputs.v_bits.data();
  uint8_t* k_fp8 = inputs.k_fp8.data();
  uint8_t* v_fp8 = !fp8 ? nullptr : joint ? k_fp8 + inputs.v_offset : inputs.v_fp8.data();
  float* v_values = joint ? batch.k.values.data() + inputs.v_offset : batch.v.values.data();
  QuantizedValues quantized;
  // Stores x / scale as e4m3 and returns the value the byte stands for.
  const auto quantize = [](float x, float scale, uint8_t& byte) {
    byte = static_cast<uint8_t>(fj::e4m3_from_float(x / scale));
    return fj::e4m3_to_float(byte) * scale;
  };
  for (int r = 0; r < num_reqs; ++r) {
    for (int key = 0; key < batch.seq_lens[r]; ++key) {
      const int64_t block = batch.block_table[r * batch.block_table_stride + key / page];
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t base = block * batch.k.stride_block + (key % page) * batch.k.stride_slot +
                             h * batch.k.stride_head;
        if (fp8) {
          const float k_scale = inputs.k_scale[h * inputs.kv_scale_stride];
          const float v_scale = inputs.v_scale[h * inputs.kv_scale_stride];
          for (int64_t i = 0; i < d; ++i) {
            batch.k.values[base + i] = quantize(quantized(rng) * k_scale, k_scale, k_fp8[base + i]);
            v_values[base + i] = quantize(quantized(rng) * v_scale, v_scale, v_fp8[base + i]);
          }
          continue;
        }
        for (int64_t i = 0; i < d; ++i) {
          k_bits[base + i] = to_bits(normal(rng), config.dtype);
          v_bits[base + i] = to_bits(normal(rng), config.dtype);
          batch.k.values[base + i] = from_bits(k_bits[base + i], config.dtype);
          v_values[base + i] = from_bits(v_bits[base + i], config.dtype);
        }
      }
    }
  }
  if (joint) batch.v.values.assign(batch.k.values.begin() + inputs.v_offset, batch.k.values.end());
  const int64_t q_elems = int64_t{batch.num_tokens()} * config.num_heads * d;
  inputs.q_bits.resize(q_elems);
  batch.q.resize(q_elems);
  for (int64_t i = 0; i < q_elems; ++i) {
    inputs.q_bits[i] = to_bits(normal(rng), config.dtype);
    batch.q[i] = from_bits(inputs.q_bits[i], config.dtype);
  }
  return std::move(inputs);
}

// Compares kernel output with the reference.
void compare(const PagedCheckConfig& config, const HostPagedBatch& batch,
             const ReferenceOutput& reference, const std::vector<uint16_t>& out_bits,
             const std::vector<float>& lse, PagedCheckReport& report) {
  double diff_sq = 0.0;
  double ref_sq = 0.0;
  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const int d = batch.head_dim;
  for (int64_t row = 0; row < rows; ++row) {
    const bool empty_row = reference.empty_rows[row] != 0;
    bool row_wrong = false;
    for (int i = 0; i < d; ++i) {
      const double value = from_bits(out_bits[row * d + i], config.dtype);
      const double want = reference.out[row * d + i];
      if (!std::isfinite(value)) {
        ++report.bad_outputs;
        continue;
      }
      diff_sq += (value - want) * (value - want);
      ref_sq += want * want;
      report.max_abs_error = std::max(report.max_abs_error, std::abs(value - want));
      row_wrong = row_wrong || (empty_row && value != 0.0);
    }
    if (std::isnan(lse[row])) {
      ++report.bad_outputs;
    } else if (std::isinf(reference.lse[row])) {  // an empty row without a sink
      row_wrong = row_wrong || !(std::isinf(lse[row]) && lse[row] < 0);
    } else {
      report.lse_max_abs_error =
          std::max(report.lse_max_abs_error, std::abs(lse[row] - reference.lse[row]));
    }
    if (row_wrong) ++report.empty_rows_wrong;
  }
  report.relative_error = ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
}

}  // namespace

Result<PagedInputs> make_paged_inputs(const PagedCheckConfig& config) {
  std::mt19937_64 rng(config.seed);
  return make_inputs(config, rng);
}

void compare_paged_outputs(const PagedCheckConfig& config, const HostPagedBatch& batch,
                           const ReferenceOutput& reference, const std::vector<uint16_t>& out_bits,
                           const std::vector<float>& lse, PagedCheckReport& report) {
  compare(config, batch, reference, out_bits, lse, report);
}

Result<Variant> config_variant(const fj_program& program, const PagedCheckConfig& config) {
  VariantSelection selection;
  selection.name = config.mask;
  selection.score = config.score;
  selection.defines = config.defines;
  return program_variant(program, selection);
}

fj_paged_attention_args paged_args(const HostPagedBatch& batch, const PagedInputs& inputs, void* q,
                                   void* out, void* k, void* v, void* lse, void* qsl,
                                   void* seq_lens, void* table,
                                   const std::vector<fj_array>& arrays) {
  fj_paged_attention_args paged{};
  paged.struct_size = sizeof(paged);
  paged.q = q;
  paged.out = out;
  paged.k_cache = k;
  paged.v_cache = inputs.v_offset >= 0
                      ? static_cast<const void*>(static_cast<const char*>(k) +
                                                 inputs.v_offset * inputs.cache_element_bytes())
                      : v;
  paged.query_start_loc = static_cast<const int32_t*>(qsl);
  paged.seq_lens = static_cast<const int32_t*>(seq_lens);
  paged.block_table = static_cast<const int32_t*>(table);
  paged.lse = static_cast<float*>(lse);
  paged.num_tokens = batch.num_tokens();
  paged.num_reqs = batch.num_reqs();
  paged.num_heads = batch.num_heads;
  paged.num_kv_heads = batch.num_kv_heads;
  for (int r = 0; r < batch.num_reqs(); ++r) {
    paged.max_query_len =
        std::max(paged.max_query_len, batch.query_start_loc[r + 1] - batch.query_start_loc[r]);
  }
  paged.max_blocks_per_req = batch.max_blocks_per_req;
  paged.q_stride_token = int64_t{batch.num_heads} * batch.head_dim;
  paged.q_stride_head = batch.head_dim;
  paged.out_stride_token = paged.q_stride_token;
  paged.out_stride_head = paged.q_stride_head;
  paged.k_stride_block = batch.k.stride_block;
  paged.k_stride_slot = batch.k.stride_slot;
  paged.k_stride_head = batch.k.stride_head;
  paged.v_stride_block = batch.v.stride_block;
  paged.v_stride_slot = batch.v.stride_slot;
  paged.v_stride_head = batch.v.stride_head;
  paged.block_table_stride = batch.block_table_stride;
  paged.lse_stride_token = batch.num_heads;
  paged.scale = batch.scale;
  paged.params = batch.params.data();
  paged.num_params = static_cast<int32_t>(batch.params.size());
  paged.arrays = arrays.data();
  paged.num_arrays = static_cast<int32_t>(arrays.size());
  paged.kv_scale_stride = inputs.kv_scale_stride;
  return paged;
}

fj_varlen_attention_args varlen_args(const fj_paged_attention_args& paged,
                                     const HostPagedBatch& batch) {
  fj_varlen_attention_args varlen{};
  varlen.struct_size = sizeof(varlen);
  varlen.q = paged.q;
  varlen.k = paged.k_cache;
  varlen.v = paged.v_cache;
  varlen.out = paged.out;
  varlen.cu_seqlens = paged.query_start_loc;
  varlen.lse = paged.lse;
  varlen.num_tokens = paged.num_tokens;
  varlen.num_seqs = paged.num_reqs;
  varlen.num_heads = paged.num_heads;
  varlen.num_kv_heads = paged.num_kv_heads;
  varlen.max_seq_len = paged.max_query_len;
  varlen.q_stride_token = paged.q_stride_token;
  varlen.q_stride_head = paged.q_stride_head;
  varlen.k_stride_token = batch.k.stride_block;
  varlen.k_stride_head = batch.k.stride_head;
  varlen.v_stride_token = batch.v.stride_block;
  varlen.v_stride_head = batch.v.stride_head;
  varlen.out_stride_token = paged.out_stride_token;
  varlen.out_stride_head = paged.out_stride_head;
  varlen.lse_stride_token = paged.lse_stride_token;
  varlen.scale = paged.scale;
  varlen.params = paged.params;
  varlen.num_params = paged.num_params;
  varlen.arrays = paged.arrays;
  varlen.num_arrays = paged.num_arrays;
  varlen.bad_index = paged.bad_index;
  varlen.sinks = paged.sinks;
  return varlen;
}

double relative_error_tolerance(fj_dtype dtype) {
  return dtype == FJ_DTYPE_BF16 ? 1e-2 : 2e-3;
}

double relative_error_tolerance(const PagedCheckConfig& config) {
  return relative_error_tolerance(config.kv_fp8 ? FJ_DTYPE_BF16 : config.dtype);
}

std::vector<float> random_sinks(int num_heads, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x51c4ull);
  std::vector<float> sinks;
  for (int h = 0; h < num_heads; ++h) {
    const double unit = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1), 53 bits
    sinks.push_back(h % 5 == 4 ? -std::numeric_limits<float>::infinity()
                               : static_cast<float>(-2.0 + 10.0 * unit));
  }
  return sinks;
}

std::vector<HostArray> random_arrays(const std::vector<RuntimeParam>& arrays, int num_reqs,
                                     int num_heads, int max_seq_len, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0xa5a5a5a5ull);
  const auto extent = [&](const std::string& dim) {
    if (dim == "b") return num_reqs;
    if (dim == "h") return num_heads;
    if (dim == "q" || dim == "kv") return std::max(1, max_seq_len);
    return 16;
  };
  std::vector<HostArray> result;
  for (const RuntimeParam& param : arrays) {
    HostArray array;
    array.rows = extent(param.dims[0]);
    array.cols = param.dims.size() > 1 ? extent(param.dims[1]) : 1;
    array.bits.resize(int64_t{array.rows} * array.cols);
    const bool over_positions =
        param.dims.size() > 1 && (param.dims[1] == "q" || param.dims[1] == "kv");
    if (param.type == dsl::Type::Float) {
      std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
      for (int32_t& bits : array.bits)
        bits = fj::float_to_bits(uniform(rng));
    } else if (over_positions) {
      // Segments of 1 to 2 * mean positions, mean a few tiles, so tiles see both uniform and
      // mixed documents.
      std::uniform_int_distribution<int> length(1, 300);
      for (int r = 0; r < array.rows; ++r) {
        int id = 0;
        int left = length(rng);
        for (int c = 0; c < array.cols; ++c) {
          if (left-- == 0) {
            ++id;
            left = length(rng);
          }
          array.bits[int64_t{r} * array.cols + c] = id;
        }
      }
    } else {
      std::uniform_int_distribution<int> value(0, std::max(0, max_seq_len));
      for (int32_t& bits : array.bits)
        bits = value(rng);
    }
    result.push_back(std::move(array));
  }
  return result;
}

fj_kernel_desc kernel_desc(const PagedCheckConfig& config, std::vector<fj_define>& defines) {
  defines.clear();
  for (const auto& [name, value] : config.defines)
    defines.push_back({name.c_str(), value.c_str()});
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = config.mask.c_str();
  desc.score = config.score.empty() ? nullptr : config.score.c_str();
  desc.defines = defines.data();
  desc.num_defines = static_cast<uint32_t>(defines.size());
  desc.head_dim = config.head_dim;
  desc.dtype = config.dtype;
  desc.page_size = config.contiguous ? 0 : config.page_size;
  desc.arch = config.arch.empty() ? nullptr : config.arch.c_str();
  if (config.kv_fp8) desc.kv_dtype = FJ_DTYPE_FP8_E4M3;
  return desc;
}

void fill_random_arrays(PagedCheckConfig& config, const std::vector<RuntimeParam>& arrays) {
  if (!config.arrays.empty() || arrays.empty()) return;
  int max_seq_len = 0;
  for (size_t r = 0; r < config.query_lens.size() && r < config.context_lens.size(); ++r)
    max_seq_len = std::max(max_seq_len, config.query_lens[r] + config.context_lens[r]);
  config.arrays = random_arrays(arrays, static_cast<int>(config.query_lens.size()),
                                config.num_heads, max_seq_len, config.seed);
}

}  // namespace flexjit
