#include "check/ops_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "check/check_support.h"
#include "check/paged_inputs.h"
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
  auto api_result = ready_driver();
  if (!api_result) return api_result.error();
  const cuda::DriverApi& api = **api_result;
  std::mt19937_64 rng(config.seed);

  const int64_t d = config.head_dim;
  const int64_t hk = config.num_kv_heads;
  const int64_t page = config.page_size;
  const int64_t num_slots = int64_t{config.num_blocks} * page;
  // Input rows padded by 8 elements per token, so the strides are exercised.
  const int64_t row_stride = hk * d + 8;
  std::uniform_int_distribution<int> bits(0, 0xffff);
  std::vector<uint16_t> key(config.num_tokens * row_stride), value(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<uint16_t>(bits(rng));
    value[i] = static_cast<uint16_t>(bits(rng));
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
  const uint16_t poison = 0xabcd;
  std::vector<uint16_t> want_k(num_slots * hk * d, poison), want_v(want_k.size(), poison);
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
      for (int64_t i = 0; i < d; ++i) {
        want_k[base + i] = key[t * row_stride + h * d + i];
        want_v[base + i] = value[t * row_stride + h * d + i];
      }
    }
  }

  const std::vector<uint16_t> poisoned(want_k.size(), poison);
  DeviceBuffer key_buffer(api), value_buffer(api), k_cache(api), v_cache(api), mapping(api);
  for (auto status : {key_buffer.upload(key.data(), key.size() * 2),
                      value_buffer.upload(value.data(), value.size() * 2),
                      k_cache.upload(poisoned.data(), poisoned.size() * 2),
                      v_cache.upload(poisoned.data(), poisoned.size() * 2),
                      mapping.upload(slot_mapping.data(), slot_mapping.size() * 8)}) {
    if (!status) return status.error();
  }

  fj_kv_cache_write_args args{};
  args.struct_size = sizeof(args);
  args.key = key_buffer.get();
  args.value = value_buffer.get();
  args.k_cache = k_cache.get();
  args.v_cache = v_cache.get();
  args.slot_mapping = static_cast<const int64_t*>(mapping.get());
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
  if (fj_kv_cache_write(context, &args, nullptr) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  if (auto status = synchronize(api); !status) return status.error();

  std::vector<uint16_t> got(want_k.size());
  for (auto [cache, want] : {std::pair{&k_cache, &want_k}, std::pair{&v_cache, &want_v}}) {
    if (auto status = cache->download(got.data(), got.size() * 2); !status) return status.error();
    for (size_t i = 0; i < got.size(); ++i)
      report.wrong_elements += got[i] != (*want)[i];
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

  const int64_t rows = int64_t{config.num_tokens} * config.num_heads;
  const int64_t d = config.head_dim;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<uint16_t> out_a(rows * d), out_b(rows * d);
  std::vector<float> lse_a(rows), lse_b(rows);
  for (int64_t row = 0; row < rows; ++row) {
    // Row kinds by index: both sides visible, a empty, b empty, both empty.
    const int kind = static_cast<int>(row % 4);
    lse_a[row] = kind == 1 || kind == 3 ? -inf : lse_value(rng);
    lse_b[row] = kind == 2 || kind == 3 ? -inf : lse_value(rng);
    for (int64_t i = 0; i < d; ++i) {
      // An empty side's output is garbage (NaN): it must not leak into the merge.
      out_a[row * d + i] =
          std::isinf(lse_a[row]) ? nan_bits(config.dtype) : to_bits(normal(rng), config.dtype);
      out_b[row * d + i] =
          std::isinf(lse_b[row]) ? nan_bits(config.dtype) : to_bits(normal(rng), config.dtype);
    }
  }
  const std::vector<float> sinks =
      config.sinks ? random_sinks(config.num_heads, config.seed) : std::vector<float>();

  std::vector<uint16_t> got(out_a.size(), 0xffff);
  std::vector<float> got_lse(rows, std::numeric_limits<float>::quiet_NaN());
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
  if (cpu) {
    // Host copies the merge may overwrite (in place: out is out_a).
    std::vector<uint16_t> a = out_a;
    args.out_a = a.data();
    args.lse_a = lse_a.data();
    args.out_b = out_b.data();
    args.lse_b = lse_b.data();
    args.out = config.in_place ? a.data() : got.data();
    args.lse = got_lse.data();
    args.sinks = sinks.empty() ? nullptr : sinks.data();
    if (fj_merge_states(context, &args, nullptr) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (config.in_place) got = a;
  } else {
    DeviceBuffer a(*api), b(*api), la(*api), lb(*api), out(*api), lse(*api), sink(*api);
    for (auto status :
         {a.upload(out_a.data(), out_a.size() * 2), b.upload(out_b.data(), out_b.size() * 2),
          la.upload(lse_a.data(), lse_a.size() * 4), lb.upload(lse_b.data(), lse_b.size() * 4),
          out.fill(out_a.size() * 2, 0xff), lse.fill(rows * 4, 0xff)}) {
      if (!status) return status.error();
    }
    auto device_sinks = upload_optional(sink, sinks);
    if (!device_sinks) return device_sinks.error();
    args.out_a = a.get();
    args.lse_a = static_cast<const float*>(la.get());
    args.out_b = b.get();
    args.lse_b = static_cast<const float*>(lb.get());
    args.out = config.in_place ? a.get() : out.get();
    args.lse = static_cast<float*>(lse.get());
    args.sinks = *device_sinks;
    if (fj_merge_states(context, &args, nullptr) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (auto status = synchronize(*api); !status) return status.error();
    if (auto status = (config.in_place ? a : out).download(got.data(), got.size() * 2); !status) {
      return status.error();
    }
    if (auto status = lse.download(got_lse.data(), rows * 4); !status) return status.error();
  }

  // In float64: out = (e^lse_a out_a + e^lse_b out_b) / total and lse = log total, where total =
  // e^lse_a + e^lse_b (+ e^sink), each weight relative to the merged LSE.
  MergeStatesCheckReport report;
  for (int64_t row = 0; row < rows; ++row) {
    const double sink = sinks.empty() ? -inf : sinks[row % config.num_heads];
    const double m = std::max({double{lse_a[row]}, double{lse_b[row]}, sink});
    const double want_lse = std::isinf(m)
                                ? m
                                : m + std::log(std::exp(lse_a[row] - m) + std::exp(lse_b[row] - m) +
                                               std::exp(sink - m));
    const bool keys = !std::isinf(lse_a[row]) || !std::isinf(lse_b[row]);
    const double w_a = std::isinf(lse_a[row]) ? 0.0 : std::exp(lse_a[row] - want_lse);
    const double w_b = std::isinf(lse_b[row]) ? 0.0 : std::exp(lse_b[row] - want_lse);
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
      if (w_a > 0) want += w_a * from_bits(out_a[row * d + i], config.dtype);
      if (w_b > 0) want += w_b * from_bits(out_b[row * d + i], config.dtype);
      row_wrong = row_wrong || (!keys && value != 0.0);
      report.max_abs_error = std::max(report.max_abs_error, std::abs(value - want));
    }
    if (row_wrong) ++report.empty_rows_wrong;
  }
  return report;
}

}  // namespace flexjit
