#include "check/ops_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "check/check_support.h"
#include "check/paged_inputs.h"
#include "fj_ops.cuh"
#include "launch/cuda_driver.h"

namespace flexjit {

namespace {

Result<const cuda::DriverApi*> ready_driver() {
  auto api = cuda::driver_api();
  if (!api) return api.error();
  if (auto context = cuda::current_or_primary_context(); !context) return context.error();
  return *api;
}

Result<bool> synchronize(const cuda::DriverApi& api) {
  if (const CUresult status = api.cuCtxSynchronize(); status != CUDA_SUCCESS) {
    return cuda::driver_error(api, "kernel execution", status);
  }
  return true;
}

}  // namespace

Result<KvCacheWriteCheckReport> run_kv_cache_write_check(fj_context* context,
                                                         const KvCacheWriteCheckConfig& config) {
  const bool cpu = config.device == FJ_DEVICE_CPU;
  const cuda::DriverApi* api = nullptr;
  if (!cpu) {
    auto api_result = ready_driver();
    if (!api_result) return api_result.error();
    api = *api_result;
  }
  std::mt19937_64 rng(config.seed);

  const int64_t d = config.head_dim;
  const int64_t hk = config.num_kv_heads;
  const int64_t page = config.page_size;
  const int64_t num_slots = int64_t{config.num_blocks} * page;
  // Input rows padded by 8 elements per token, so the strides are exercised.
  const int64_t row_stride = hk * d + 8;
  std::uniform_int_distribution<int> bits(0, 0xffff);
  std::vector<uint16_t> key(config.num_tokens * row_stride), value(key.size());
  std::vector<float> k_scale, v_scale;
  if (!config.fp8) {
    for (size_t i = 0; i < key.size(); ++i) {
      key[i] = static_cast<uint16_t>(bits(rng));
      value[i] = static_cast<uint16_t>(bits(rng));
    }
  } else {
    // Scales of 2^-8 to 2^-4: every other kv head's (and the tensor's) a power of two times a
    // factor in [1, 2), the others' exactly a power of two.
    const int count = config.kv_scale == KvScale::Head ? config.num_kv_heads : 1;
    std::uniform_int_distribution<int> exponent(-8, -5);
    std::uniform_real_distribution<float> factor(1.0f, 2.0f);
    for (std::vector<float>* scales : {&k_scale, &v_scale}) {
      for (int h = 0; h < count; ++h) {
        const float power = std::ldexp(1.0f, exponent(rng));
        scales->push_back(h % 2 == 0 && count > 1 ? power : power * factor(rng));
      }
    }
    std::uniform_int_distribution<int> kind(0, 3);
    std::uniform_int_distribution<uint32_t> below_max(0, 0x7d);  // a finite byte and the next
    std::normal_distribution<float> around(0.0f, 96.0f);
    const auto input = [&](float scale) -> uint16_t {
      switch (kind(rng)) {
        case 0:
          return static_cast<uint16_t>(bits(rng));
        case 1: {  // halfway between two e4m3 values, either sign
          const uint32_t byte = below_max(rng) | (bits(rng) & 0x80u);
          const float tie = 0.5f * (fj::e4m3_to_float(byte) + fj::e4m3_to_float(byte + 1));
          return to_bits(tie * scale, config.dtype);
        }
        default:  // about the e4m3 range, a few past 448
          return to_bits(around(rng) * scale, config.dtype);
      }
    };
    const int64_t stride = config.kv_scale == KvScale::Head ? 1 : 0;
    for (int64_t t = 0; t < config.num_tokens; ++t) {
      for (int64_t i = 0; i < row_stride; ++i) {
        const int64_t h = std::min(i / d, hk - 1);
        key[t * row_stride + i] = input(k_scale[h * stride]);
        value[t * row_stride + i] = input(v_scale[h * stride]);
      }
    }
  }
  // Distinct valid slots, with every fifth token padding (-1) and every seventh past the cache.
  std::vector<int64_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<int64_t> slot_mapping(config.num_tokens);
  KvCacheWriteCheckReport report;
  for (int t = 0; t < config.num_tokens; ++t) {
    if (t % 5 == 4) {
      slot_mapping[t] = -1;
    } else if (t % 7 == 6) {
      slot_mapping[t] = num_slots + t;
    } else {
      slot_mapping[t] = slots[t % num_slots];
    }
  }

  int64_t stride_block = page * hk * d, stride_slot, stride_head;
  if (config.layout == KvLayout::NHD) {
    stride_slot = hk * d;
    stride_head = d;
  } else {
    stride_head = page * d;
    stride_slot = d;
  }
  // Caches as elements widened to 16 bits (an fp8 cache's bytes are widened on download).
  const uint16_t poison = config.fp8 ? 0xab : 0xabcd;
  const size_t element_bytes = config.fp8 ? 1 : 2;
  const size_t cache_elements = num_slots * hk * d;
  std::vector<uint16_t> want_k(cache_elements, poison), want_v(cache_elements, poison);
  // Elements whose input is NaN: any e4m3 NaN will do.
  std::vector<bool> nan_k(config.fp8 ? cache_elements : 0), nan_v(nan_k.size());
  const fj_dtype input_dtype = config.dtype;
  const auto stored = [&](uint16_t x, float scale, bool& nan) -> uint16_t {
    if (!config.fp8) return x;
    const float input = from_bits(x, input_dtype);
    nan = std::isnan(input);
    return static_cast<uint16_t>(fj::e4m3_from_float(input / scale));
  };
  std::vector<bool> slot_taken(num_slots, false);
  for (int t = 0; t < config.num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= num_slots || slot_taken[slot]) {
      ++report.skipped_tokens;
      if (slot >= 0 && slot < num_slots) return Error{"slot mapping repeats a slot"};
      continue;
    }
    slot_taken[slot] = true;
    for (int64_t h = 0; h < hk; ++h) {
      ++report.written_rows;
      const int64_t base =
          (slot / page) * stride_block + (slot % page) * stride_slot + h * stride_head;
      const int64_t scale = config.kv_scale == KvScale::Head ? h : 0;
      for (int64_t i = 0; i < d; ++i) {
        bool k_nan = false, v_nan = false;
        want_k[base + i] =
            stored(key[t * row_stride + h * d + i], config.fp8 ? k_scale[scale] : 1.0f, k_nan);
        want_v[base + i] =
            stored(value[t * row_stride + h * d + i], config.fp8 ? v_scale[scale] : 1.0f, v_nan);
        if (config.fp8) {
          nan_k[base + i] = k_nan;
          nan_v[base + i] = v_nan;
        }
      }
    }
  }

  fj_kv_cache_write_args args{};
  args.struct_size = sizeof(args);
  args.slot_mapping = slot_mapping.data();
  args.num_tokens = config.num_tokens;
  args.num_kv_heads = config.num_kv_heads;
  args.head_dim = config.head_dim;
  args.page_size = config.page_size;
  args.num_blocks = config.num_blocks;
  args.key_stride_token = args.value_stride_token = row_stride;
  args.key_stride_head = args.value_stride_head = d;
  args.k_stride_block = args.v_stride_block = stride_block;
  args.k_stride_slot = args.v_stride_slot = stride_slot;
  args.k_stride_head = args.v_stride_head = stride_head;
  args.device = config.device;
  if (config.fp8) {
    args.dtype = config.dtype;
    args.cache_dtype = FJ_DTYPE_FP8_E4M3;
    args.k_scale = k_scale.data();
    args.v_scale = v_scale.data();
    args.kv_scale_stride = config.kv_scale == KvScale::Head ? 1 : 0;
  }
  const std::vector<uint8_t> poisoned = [&] {
    std::vector<uint8_t> bytes(cache_elements * element_bytes);
    for (size_t i = 0; i < cache_elements; ++i)
      std::memcpy(bytes.data() + i * element_bytes, &poison, element_bytes);  // little-endian
    return bytes;
  }();
  std::vector<uint8_t> got_k = poisoned, got_v = poisoned;
  if (cpu) {
    args.key = key.data();
    args.value = value.data();
    args.k_cache = got_k.data();
    args.v_cache = got_v.data();
    if (fj_kv_cache_write(context, &args, nullptr) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
  } else {
    DeviceBuffer key_buffer(*api), value_buffer(*api), k_cache(*api), v_cache(*api), mapping(*api),
        k_scales(*api), v_scales(*api);
    for (auto status : {key_buffer.upload(key.data(), key.size() * 2),
                        value_buffer.upload(value.data(), value.size() * 2),
                        k_cache.upload(poisoned.data(), poisoned.size()),
                        v_cache.upload(poisoned.data(), poisoned.size()),
                        mapping.upload(slot_mapping.data(), slot_mapping.size() * 8)}) {
      if (!status) return status.error();
    }
    auto device_k_scale = upload_optional(k_scales, k_scale);
    if (!device_k_scale) return device_k_scale.error();
    auto device_v_scale = upload_optional(v_scales, v_scale);
    if (!device_v_scale) return device_v_scale.error();
    args.key = key_buffer.get();
    args.value = value_buffer.get();
    args.k_cache = k_cache.get();
    args.v_cache = v_cache.get();
    args.slot_mapping = static_cast<const int64_t*>(mapping.get());
    args.k_scale = *device_k_scale;
    args.v_scale = *device_v_scale;
    if (fj_kv_cache_write(context, &args, nullptr) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (auto status = synchronize(*api); !status) return status.error();
    for (auto status : {k_cache.download(got_k.data(), got_k.size()),
                        v_cache.download(got_v.data(), got_v.size())}) {
      if (!status) return status.error();
    }
  }

  for (auto [got, want, nan] :
       {std::tuple{&got_k, &want_k, &nan_k}, std::tuple{&got_v, &want_v, &nan_v}}) {
    for (size_t i = 0; i < cache_elements; ++i) {
      uint16_t element = 0;
      std::memcpy(&element, got->data() + i * element_bytes, element_bytes);
      const bool either_nan = config.fp8 && (*nan)[i] && (element & 0x7f) == 0x7f;
      report.wrong_elements += element != (*want)[i] && !either_nan;
    }
  }
  return report;
}

Result<MergeStatesCheckReport> run_merge_states_check(fj_context* context,
                                                      const MergeStatesCheckConfig& config) {
  const bool cpu = config.device == FJ_DEVICE_CPU;
  const cuda::DriverApi* api = nullptr;
  if (!cpu) {
    auto api_result = ready_driver();
    if (!api_result) return api_result.error();
    api = *api_result;
  }
  std::mt19937_64 rng(config.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> lse_value(-6.0f, 6.0f);

  const bool n_way = config.num_states > 0;
  const int states = n_way ? config.num_states : 2;
  const int64_t rows = int64_t{config.num_tokens} * config.num_heads;
  const int64_t d = config.head_dim;
  const float inf = std::numeric_limits<float>::infinity();
  // The states stacked: state s's row r at s * rows * d + r * d, its lse at s * rows + r.
  std::vector<uint16_t> outs(states * rows * d);
  std::vector<float> lses(states * rows);
  for (int64_t row = 0; row < rows; ++row) {
    // Row kinds by index: every state visible, some empty (two states: a empty, b empty), all
    // empty.
    const int kind = static_cast<int>(row % 4);
    for (int s = 0; s < states; ++s) {
      const bool empty =
          kind == 3 || (states == 2 ? kind == 1 + s : kind != 0 && (row / 4 + s) % 3 == 0);
      lses[s * rows + row] = empty ? -inf : lse_value(rng);
      for (int64_t i = 0; i < d; ++i) {
        // An empty state's output is garbage (NaN): it must not leak into the merge.
        outs[(s * rows + row) * d + i] =
            empty ? nan_bits(config.dtype) : to_bits(normal(rng), config.dtype);
      }
    }
  }
  const std::vector<float> sinks =
      config.sinks ? random_sinks(config.num_heads, config.seed) : std::vector<float>();

  std::vector<uint16_t> got(rows * d, 0xffff);
  std::vector<float> got_lse(rows, std::numeric_limits<float>::quiet_NaN());
  // The two-way merge's arguments (states 0 and 1), or the N-way merge's.
  fj_merge_states_args args{};
  args.struct_size = sizeof(args);
  args.dtype = config.dtype;
  args.num_tokens = config.num_tokens;
  args.num_heads = config.num_heads;
  args.head_dim = config.head_dim;
  args.out_a_stride_token = args.out_b_stride_token = args.out_stride_token = config.num_heads * d;
  args.out_a_stride_head = args.out_b_stride_head = args.out_stride_head = d;
  args.lse_a_stride_token = args.lse_b_stride_token = args.lse_stride_token = config.num_heads;
  args.device = config.device;
  fj_merge_states_n_args n_args{};
  n_args.struct_size = sizeof(n_args);
  n_args.dtype = config.dtype;
  n_args.device = config.device;
  n_args.num_states = states;
  n_args.num_tokens = config.num_tokens;
  n_args.num_heads = config.num_heads;
  n_args.head_dim = config.head_dim;
  n_args.out_stride_state = rows * d;
  n_args.out_stride_token = n_args.merged_stride_token = config.num_heads * d;
  n_args.out_stride_head = n_args.merged_stride_head = d;
  n_args.lse_stride_state = rows;
  n_args.lse_stride_token = n_args.merged_lse_stride_token = config.num_heads;
  // Points the arguments at buffers holding the states (in place: out is state 0's rows).
  const auto point = [&](void* states_out, const float* states_lse, void* out, float* lse,
                         const float* sink_logits) {
    args.out_a = states_out;
    args.out_b = static_cast<uint16_t*>(states_out) + rows * d;
    args.lse_a = states_lse;
    args.lse_b = states_lse + rows;
    n_args.states_out = states_out;
    n_args.states_lse = states_lse;
    args.out = n_args.out = config.in_place ? states_out : out;
    args.lse = n_args.lse = lse;
    args.sinks = n_args.sinks = sink_logits;
  };
  const auto merge = [&] {
    return n_way ? fj_merge_states_n(context, &n_args, nullptr)
                 : fj_merge_states(context, &args, nullptr);
  };
  if (cpu) {
    // A host copy the merge may overwrite (in place).
    std::vector<uint16_t> copy = outs;
    point(copy.data(), lses.data(), got.data(), got_lse.data(),
          sinks.empty() ? nullptr : sinks.data());
    if (merge() != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    if (config.in_place) std::copy_n(copy.begin(), rows * d, got.begin());
  } else {
    DeviceBuffer states_out(*api), states_lse(*api), out(*api), lse(*api), sink(*api);
    for (auto status : {states_out.upload(outs.data(), outs.size() * 2),
                        states_lse.upload(lses.data(), lses.size() * 4),
                        out.fill(got.size() * 2, 0xff), lse.fill(rows * 4, 0xff)}) {
      if (!status) return status.error();
    }
    auto device_sinks = upload_optional(sink, sinks);
    if (!device_sinks) return device_sinks.error();
    point(states_out.get(), static_cast<const float*>(states_lse.get()), out.get(),
          static_cast<float*>(lse.get()), *device_sinks);
    if (merge() != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    if (auto status = synchronize(*api); !status) return status.error();
    if (auto status = (config.in_place ? states_out : out).download(got.data(), got.size() * 2);
        !status) {
      return status.error();
    }
    if (auto status = lse.download(got_lse.data(), rows * 4); !status) return status.error();
  }

  // In float64: out = sum_s e^lse_s out_s / total and lse = log total, where total = sum_s
  // e^lse_s (+ e^sink), each weight relative to the merged LSE.
  MergeStatesCheckReport report;
  for (int64_t row = 0; row < rows; ++row) {
    const double sink = sinks.empty() ? -inf : sinks[row % config.num_heads];
    double m = sink;
    bool keys = false;
    for (int s = 0; s < states; ++s) {
      m = std::max(m, double{lses[s * rows + row]});
      keys = keys || !std::isinf(lses[s * rows + row]);
    }
    double total = std::exp(sink - m);
    for (int s = 0; s < states; ++s)
      total += std::exp(lses[s * rows + row] - m);
    const double want_lse = std::isinf(m) ? m : m + std::log(total);
    bool row_wrong = false;
    if (std::isinf(want_lse)) {
      row_wrong = !(std::isinf(got_lse[row]) && got_lse[row] < 0);
    } else if (!std::isfinite(got_lse[row])) {
      ++report.bad_outputs;
    } else {
      report.lse_max_abs_error =
          std::max(report.lse_max_abs_error, std::abs(got_lse[row] - want_lse));
    }
    for (int64_t i = 0; i < d; ++i) {
      const double value = from_bits(got[row * d + i], config.dtype);
      if (!std::isfinite(value)) {
        ++report.bad_outputs;
        continue;
      }
      double want = 0.0;
      for (int s = 0; s < states; ++s) {
        const float lse = lses[s * rows + row];
        if (std::isinf(lse)) continue;
        want += std::exp(lse - want_lse) * from_bits(outs[(s * rows + row) * d + i], config.dtype);
      }
      row_wrong = row_wrong || (!keys && value != 0.0);
      report.max_abs_error = std::max(report.max_abs_error, std::abs(value - want));
    }
    if (row_wrong) ++report.empty_rows_wrong;
  }
  return report;
}

}  // namespace flexjit
