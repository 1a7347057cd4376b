#include "check/shard_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>

#include <fmt/format.h>

#include "check/check_support.h"
#include "check/reference.h"
#include "launch/handles.h"

namespace flexjit {
namespace {

// One shard's keys of every request: their positions in the request, in the shard's order.
struct ShardKeys {
  std::vector<std::vector<int32_t>> positions;  // [request][local key]
  std::vector<int32_t> offsets;                 // [request] kv_shard_offsets (Contiguous)
};

// Deals each request's keys into `shards.count` shards.
std::vector<ShardKeys> deal_keys(const HostPagedBatch& batch, const ShardCheckConfig& shards) {
  std::vector<ShardKeys> dealt(shards.count);
  std::mt19937_64 random(shards.seed);
  for (ShardKeys& shard : dealt) {
    shard.positions.resize(batch.num_reqs());
    shard.offsets.assign(batch.num_reqs(), 0);
  }
  for (int r = 0; r < batch.num_reqs(); ++r) {
    const int32_t length = batch.seq_lens[r];
    if (shards.layout == ShardLayout::Interleaved) {
      for (int32_t p = 0; p < length; ++p)
        dealt[(p / shards.interleave) % shards.count].positions[r].push_back(p);
      continue;
    }
    // Random cut points, sorted: shard s holds [cuts[s], cuts[s + 1]).
    std::vector<int32_t> cuts{0, length};
    std::uniform_int_distribution<int32_t> cut(0, length);
    for (int s = 1; s < shards.count; ++s)
      cuts.push_back(cut(random));
    std::sort(cuts.begin(), cuts.end());
    for (int s = 0; s < shards.count; ++s) {
      dealt[s].offsets[r] = cuts[s];
      for (int32_t p = cuts[s]; p < cuts[s + 1]; ++p)
        dealt[s].positions[r].push_back(p);
    }
  }
  return dealt;
}

// A shard's own paged cache: NHD, each request's keys in consecutive blocks of its own, every
// slot no key owns holding NaN bytes (a read of one shows in the output).
struct ShardCache {
  std::vector<uint8_t> k, v;
  std::vector<int32_t> seq_lens, block_table;
  int32_t blocks_per_req = 1;
  int64_t num_blocks = 0;
  int64_t stride_block = 0, stride_slot = 0, stride_head = 0;  // elements
};

ShardCache shard_cache(const HostPagedBatch& batch, const PagedInputs& inputs,
                       const ShardKeys& keys) {
  const int element = inputs.cache_element_bytes();
  const int page = batch.page_size;
  ShardCache cache;
  for (const std::vector<int32_t>& positions : keys.positions) {
    const int32_t length = static_cast<int32_t>(positions.size());
    cache.seq_lens.push_back(length);
    cache.blocks_per_req = std::max(cache.blocks_per_req, (length + page - 1) / page);
  }
  cache.num_blocks = int64_t{batch.num_reqs()} * cache.blocks_per_req;
  cache.stride_head = batch.head_dim;
  cache.stride_slot = int64_t{batch.num_kv_heads} * batch.head_dim;
  cache.stride_block = page * cache.stride_slot;
  const size_t bytes =
      static_cast<size_t>(std::max<int64_t>(cache.num_blocks, 1)) * cache.stride_block * element;
  // 0xff: NaN in bf16, fp16 and e4m3.
  cache.k.assign(bytes, 0xff);
  cache.v.assign(bytes, 0xff);
  cache.block_table.resize(cache.num_blocks);
  const uint8_t* k_source = static_cast<const uint8_t*>(inputs.k_cache());
  const uint8_t* v_source = inputs.v_offset >= 0 ? k_source + inputs.v_offset * element
                                                 : static_cast<const uint8_t*>(inputs.v_cache());
  for (int r = 0; r < batch.num_reqs(); ++r) {
    for (int32_t b = 0; b < cache.blocks_per_req; ++b)
      cache.block_table[int64_t{r} * cache.blocks_per_req + b] = r * cache.blocks_per_req + b;
    const int32_t* row = batch.block_table.data() + r * batch.block_table_stride;
    for (size_t j = 0; j < keys.positions[r].size(); ++j) {
      const int32_t p = keys.positions[r][j];
      const int64_t block = row[p / page], slot = p % page;
      const int64_t local_block = int64_t{r} * cache.blocks_per_req + j / page;
      for (int h = 0; h < batch.num_kv_heads; ++h) {
        const int64_t to = local_block * cache.stride_block + (j % page) * cache.stride_slot +
                           h * cache.stride_head;
        std::memcpy(&cache.k[to * element],
                    k_source + (block * batch.k.stride_block + slot * batch.k.stride_slot +
                                h * batch.k.stride_head) *
                                   element,
                    batch.head_dim * element);
        std::memcpy(&cache.v[to * element],
                    v_source + (block * batch.v.stride_block + slot * batch.v.stride_slot +
                                h * batch.v.stride_head) *
                                   element,
                    batch.head_dim * element);
      }
    }
  }
  return cache;
}

// Where a shard check's buffers live: host memory for a CPU kernel, device memory (the current
// CUDA context's) for a CUDA one.
class CheckMemory {
 public:
  explicit CheckMemory(const cuda::DriverApi* api) : api_(api) {}

  // A buffer holding a copy of `bytes` bytes of `data`, or (null data) `bytes` bytes of `fill`.
  Result<void*> buffer(const void* data, size_t bytes, unsigned char fill = 0) {
    if (api_ == nullptr) {
      host_.push_back(data != nullptr ? HostBuffer(data, bytes) : HostBuffer(bytes, fill));
      return host_.back().get();
    }
    DeviceBuffer& buffer = device_.emplace_back(*api_);
    auto status = data != nullptr ? buffer.upload(data, bytes) : buffer.fill(bytes, fill);
    if (!status) return status.error();
    return buffer.get();
  }
  template <class T>
  Result<T*> copy(const std::vector<T>& values) {
    auto address = buffer(values.data(), std::max<size_t>(values.size(), 1) * sizeof(T));
    if (!address) return address.error();
    return static_cast<T*>(*address);
  }
  // A copy of `values`, or null when there are none (the C API's optional arrays).
  template <class T>
  Result<const T*> optional(const std::vector<T>& values) {
    if (values.empty()) return static_cast<const T*>(nullptr);
    auto address = copy(values);
    if (!address) return address.error();
    return static_cast<const T*>(*address);
  }
  Result<bool> download(const void* from, void* to, size_t bytes) const {
    if (api_ == nullptr) {
      std::memcpy(to, from, bytes);
      return true;
    }
    const CUresult status = api_->cuMemcpyDtoH(to, reinterpret_cast<CUdeviceptr>(from), bytes);
    if (status != CUDA_SUCCESS) return cuda::driver_error(*api_, "cuMemcpyDtoH", status);
    return true;
  }

 private:
  const cuda::DriverApi* api_;
  std::deque<HostBuffer> host_;
  std::deque<DeviceBuffer> device_;  // a deque: buffers neither copy nor move
};

// The first failure among `results`, or null.
template <class... Results>
const Error* first_error(const Results&... results) {
  const Error* error = nullptr;
  ((error = error == nullptr && !results.ok() ? &results.error() : error), ...);
  return error;
}

// The kernel a shard check runs: the CPU kernel, or the CUDA kernel of `config`.
Result<KernelOwner> create_kernel(fj_context* context, const fj_program* program,
                                  const PagedCheckConfig& config, bool cpu) {
  if (cpu) return create_cpu_kernel(context, program, config);
  std::vector<fj_define> defines;
  const fj_kernel_desc desc = kernel_desc(config, defines);
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  return KernelOwner(kernel, fj_kernel_destroy);
}

// One shard's call: fj_paged_attention, or a plan made for the shard's batch (its lengths).
fj_status run_shard(fj_kernel* kernel, const fj_paged_attention_args& args,
                    const HostPagedBatch& batch, const ShardCache& cache, PagedLaunch launch) {
  if (launch == PagedLaunch::Direct) return fj_paged_attention(kernel, &args, nullptr);
  const fj_plan_shape shape = plan_shape_of(args);
  fj_plan* created = nullptr;
  if (const fj_status status = fj_plan_create(kernel, &shape, &created); status != FJ_SUCCESS) {
    return status;
  }
  const PlanPtr plan(created);
  if (const fj_status status =
          fj_plan_update(plan.get(), batch.query_start_loc.data(), cache.seq_lens.data(),
                         batch.num_reqs(), cache.blocks_per_req, nullptr);
      status != FJ_SUCCESS) {
    return status;
  }
  return fj_plan_run(plan.get(), &args, nullptr);
}

}  // namespace

Result<ShardCheckReport> run_shard_check(fj_context* context, const fj_program* program,
                                         const PagedCheckConfig& config_in,
                                         const ShardCheckConfig& shards) {
  if (config_in.contiguous) return Error{"a shard check takes a paged config"};
  if (shards.count < 1 || shards.interleave < 1) {
    return Error{fmt::format("a shard check needs count ({}) and interleave ({}) >= 1",
                             shards.count, shards.interleave)};
  }
  const bool cpu = config_in.arch == "cpu";
  if (cpu && config_in.launch != PagedLaunch::Direct) return Error{"plans are for CUDA kernels"};
  if (config_in.launch == PagedLaunch::Graph) return Error{"a shard check runs no graph"};
  PagedCheckConfig config = config_in;
  auto variant = config_variant(*program, config);
  if (!variant) return variant.error();
  fill_random_arrays(config, program->arrays);
  auto inputs_result = make_paged_inputs(config);
  if (!inputs_result) return inputs_result.error();
  const PagedInputs& inputs = *inputs_result;
  const HostPagedBatch& batch = inputs.batch;

  // The unsharded call of the CPU backend, with the sinks.
  auto unsharded = run_cpu_launch(context, program, config, inputs);
  if (!unsharded) return unsharded.error();

  auto kernel_owner = create_kernel(context, program, config, cpu);
  if (!kernel_owner) return kernel_owner.error();
  fj_kernel* kernel = kernel_owner->get();
  const cuda::DriverApi* api = nullptr;
  if (!cpu) {
    auto loaded = cuda::driver_api();
    if (!loaded) return loaded.error();
    api = *loaded;
    if (auto cu_context = cuda::current_or_primary_context(); !cu_context) {
      return cu_context.error();
    }
  }
  CheckMemory memory(api);

  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const int64_t row_elements = rows * batch.head_dim;
  auto q = memory.copy(inputs.q_bits);
  auto qsl = memory.copy(batch.query_start_loc);
  auto global_seq_lens = memory.copy(batch.seq_lens);
  auto sinks = memory.optional(batch.sinks);
  auto k_scale = memory.optional(inputs.k_scale);
  auto v_scale = memory.optional(inputs.v_scale);
  // The states, stacked as an all-gather leaves them: [shard][token][head][d],
  // [shard][token][head], poisoned.
  auto states = memory.buffer(nullptr, std::max<int64_t>(shards.count * row_elements, 1) * 2, 0xff);
  auto states_lse =
      memory.buffer(nullptr, std::max<int64_t>(shards.count * rows, 1) * sizeof(float), 0xff);
  auto out = memory.buffer(nullptr, std::max<int64_t>(row_elements, 1) * 2, 0xff);
  auto lse = memory.buffer(nullptr, std::max<int64_t>(rows, 1) * sizeof(float), 0xff);
  if (const Error* error = first_error(q, qsl, global_seq_lens, sinks, k_scale, v_scale, states,
                                       states_lse, out, lse)) {
    return *error;
  }
  std::vector<fj_array> arrays;
  for (const HostArray& array : batch.arrays) {
    auto bits = memory.optional(array.bits);
    if (!bits) return bits.error();
    arrays.push_back({*bits, array.rows, array.cols, array.cols});
  }

  ShardCheckReport report;
  const std::vector<ShardKeys> dealt = deal_keys(batch, shards);
  for (int s = 0; s < shards.count; ++s) {
    const ShardCache cache = shard_cache(batch, inputs, dealt[s]);
    auto k = memory.copy(cache.k);
    auto v = memory.copy(cache.v);
    auto seq_lens = memory.copy(cache.seq_lens);
    auto table = memory.copy(cache.block_table);
    auto offsets = memory.copy(dealt[s].offsets);
    if (const Error* error = first_error(k, v, seq_lens, table, offsets)) return *error;
    fj_paged_attention_args args =
        paged_args(batch, inputs, *q, static_cast<uint16_t*>(*states) + s * row_elements, *k, *v,
                   static_cast<float*>(*states_lse) + s * rows, *qsl, *seq_lens, *table, arrays);
    args.v_cache = *v;  // the shard's caches are separate whatever the check's layout
    args.k_stride_block = args.v_stride_block = cache.stride_block;
    args.k_stride_slot = args.v_stride_slot = cache.stride_slot;
    args.k_stride_head = args.v_stride_head = cache.stride_head;
    args.block_table_stride = args.max_blocks_per_req = cache.blocks_per_req;
    args.num_blocks = cache.num_blocks;
    args.k_scale = *k_scale;
    args.v_scale = *v_scale;
    args.global_seq_lens = *global_seq_lens;
    if (shards.layout == ShardLayout::Interleaved) {
      args.kv_shard_rank = s;
      args.kv_shard_count = shards.count;
      args.kv_shard_interleave = shards.interleave;
    } else {
      args.kv_shard_offsets = *offsets;
    }
    if (run_shard(kernel, args, batch, cache, config.launch) != FJ_SUCCESS) {
      return Error{
          fmt::format("shard {} of {}: {}", s, shards.count, fj_context_last_error(context))};
    }
    // The shard's buffers stay alive until the merge, which the device runs after its call.
    int64_t keys = 0;
    for (const int32_t length : cache.seq_lens)
      keys += length;
    report.keys_per_shard.push_back(keys);
  }

  fj_merge_states_n_args merge{};
  merge.struct_size = sizeof(merge);
  merge.dtype = config.dtype;
  merge.device = cpu ? FJ_DEVICE_CPU : FJ_DEVICE_CUDA;
  merge.num_states = shards.count;
  merge.states_out = *states;
  merge.states_lse = static_cast<const float*>(*states_lse);
  merge.out = *out;
  merge.lse = static_cast<float*>(*lse);
  merge.num_tokens = batch.num_tokens();
  merge.num_heads = batch.num_heads;
  merge.head_dim = batch.head_dim;
  merge.out_stride_state = row_elements;
  merge.out_stride_token = merge.merged_stride_token = int64_t{batch.num_heads} * batch.head_dim;
  merge.out_stride_head = merge.merged_stride_head = batch.head_dim;
  merge.lse_stride_state = rows;
  merge.lse_stride_token = merge.merged_lse_stride_token = batch.num_heads;
  merge.sinks = *sinks;
  if (fj_merge_states_n(context, &merge, nullptr) != FJ_SUCCESS) {
    return Error{fmt::format("merge: {}", fj_context_last_error(context))};
  }
  if (api != nullptr) {
    if (const CUresult status = api->cuCtxSynchronize(); status != CUDA_SUCCESS) {
      return cuda::driver_error(*api, "the shards' calls and merge", status);
    }
  }
  std::vector<uint16_t> out_bits(row_elements);
  std::vector<float> out_lse(rows);
  std::vector<float> shard_lse(shards.count * rows);
  for (auto status :
       {memory.download(*out, out_bits.data(), row_elements * 2),
        memory.download(*lse, out_lse.data(), rows * sizeof(float)),
        memory.download(*states_lse, shard_lse.data(), shard_lse.size() * sizeof(float))}) {
    if (!status) return status.error();
  }

  // The kernel that ran the shards: the CPU kernel, or the sharded form of the CUDA kernel (the
  // prefill kernel's name; planned decode rows ran its decode kernel).
  report.merged.kernel_name = cpu || kernel->sharded_compiled == nullptr
                                  ? unsharded->kernel_name
                                  : kernel->sharded_compiled->name();
  report.merged.num_tokens = batch.num_tokens();
  const ReferenceOutput reference = reference_paged_attention(*variant, batch);
  report.merged.visible_pairs = reference.visible_pairs;
  compare_paged_outputs(config, batch, reference, out_bits, out_lse, report.merged);
  for (int64_t row = 0; row < rows; ++row) {
    bool some_empty = false;
    for (int s = 0; s < shards.count; ++s)
      some_empty = some_empty || std::isinf(shard_lse[s * rows + row]);
    report.rows_empty_in_some_shard += some_empty && reference.empty_rows[row] == 0;
  }
  report.unsharded =
      output_difference(config.dtype, out_bits, out_lse, unsharded->out_bits, unsharded->lse);
  // On CUDA the unsharded call is the CPU backend's, as run_paged_check's compare_cpu reports.
  if (!cpu) {
    report.merged.cpu_relative_error = report.unsharded.relative;
    report.merged.cpu_lse_max_abs_error = report.unsharded.lse_max_abs;
    report.merged.cpu_mismatched_non_finite = report.unsharded.mismatched_non_finite;
  }
  return report;
}

}  // namespace flexjit
