#include "check/shard_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

}  // namespace

Result<ShardCheckReport> run_cpu_shard_check(fj_context* context, const fj_program* program,
                                             const PagedCheckConfig& config_in,
                                             const ShardCheckConfig& shards) {
  if (config_in.contiguous) return Error{"a shard check takes a paged config"};
  if (shards.count < 1 || shards.interleave < 1) {
    return Error{fmt::format("a shard check needs count ({}) and interleave ({}) >= 1",
                             shards.count, shards.interleave)};
  }
  PagedCheckConfig config = config_in;
  auto variant = config_variant(*program, config);
  if (!variant) return variant.error();
  fill_random_arrays(config, program->arrays);
  auto inputs_result = make_paged_inputs(config);
  if (!inputs_result) return inputs_result.error();
  const PagedInputs& inputs = *inputs_result;
  const HostPagedBatch& batch = inputs.batch;

  // The unsharded call, with the sinks.
  auto unsharded = run_cpu_launch(context, program, config, inputs);
  if (!unsharded) return unsharded.error();

  auto kernel_owner = create_cpu_kernel(context, program, config);
  if (!kernel_owner) return kernel_owner.error();
  fj_kernel* kernel = kernel_owner->get();

  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const int64_t row_elements = rows * batch.head_dim;
  const HostBuffer q = copy_of(inputs.q_bits), qsl = copy_of(batch.query_start_loc),
                   global_seq_lens = copy_of(batch.seq_lens);
  const HostArrays arrays = host_arrays(batch);
  // The states, stacked as an all-gather leaves them: [shard][token][head][d],
  // [shard][token][head].
  const HostBuffer states(std::max<int64_t>(shards.count * row_elements, 1) * 2, 0xff);
  const HostBuffer states_lse(std::max<int64_t>(shards.count * rows, 1) * sizeof(float), 0xff);
  ShardCheckReport report;
  const std::vector<ShardKeys> dealt = deal_keys(batch, shards);
  for (int s = 0; s < shards.count; ++s) {
    const ShardCache cache = shard_cache(batch, inputs, dealt[s]);
    const HostBuffer k = copy_of(cache.k), v = copy_of(cache.v), seq_lens = copy_of(cache.seq_lens),
                     table = copy_of(cache.block_table), offsets = copy_of(dealt[s].offsets);
    fj_paged_attention_args args =
        paged_args(batch, inputs, q.get(), static_cast<uint16_t*>(states.get()) + s * row_elements,
                   k.get(), v.get(), static_cast<float*>(states_lse.get()) + s * rows, qsl.get(),
                   seq_lens.get(), table.get(), arrays.arrays);
    args.v_cache = v.get();  // the shard's caches are separate whatever the check's layout
    args.k_stride_block = args.v_stride_block = cache.stride_block;
    args.k_stride_slot = args.v_stride_slot = cache.stride_slot;
    args.k_stride_head = args.v_stride_head = cache.stride_head;
    args.block_table_stride = args.max_blocks_per_req = cache.blocks_per_req;
    args.num_blocks = cache.num_blocks;
    args.k_scale = inputs.k_scale.empty() ? nullptr : inputs.k_scale.data();
    args.v_scale = inputs.v_scale.empty() ? nullptr : inputs.v_scale.data();
    args.global_seq_lens = static_cast<const int32_t*>(global_seq_lens.get());
    if (shards.layout == ShardLayout::Interleaved) {
      args.kv_shard_rank = s;
      args.kv_shard_count = shards.count;
      args.kv_shard_interleave = shards.interleave;
    } else {
      args.kv_shard_offsets = static_cast<const int32_t*>(offsets.get());
    }
    if (fj_paged_attention(kernel, &args, nullptr) != FJ_SUCCESS) {
      return Error{
          fmt::format("shard {} of {}: {}", s, shards.count, fj_context_last_error(context))};
    }
    int64_t keys = 0;
    for (const int32_t length : cache.seq_lens)
      keys += length;
    report.keys_per_shard.push_back(keys);
  }

  const HostBuffer out(std::max<int64_t>(row_elements, 1) * 2, 0xff),
      lse(std::max<int64_t>(rows, 1) * sizeof(float), 0xff);
  fj_merge_states_n_args merge{};
  merge.struct_size = sizeof(merge);
  merge.dtype = config.dtype;
  merge.device = FJ_DEVICE_CPU;
  merge.num_states = shards.count;
  merge.states_out = states.get();
  merge.states_lse = static_cast<const float*>(states_lse.get());
  merge.out = out.get();
  merge.lse = static_cast<float*>(lse.get());
  merge.num_tokens = batch.num_tokens();
  merge.num_heads = batch.num_heads;
  merge.head_dim = batch.head_dim;
  merge.out_stride_state = row_elements;
  merge.out_stride_token = merge.merged_stride_token = int64_t{batch.num_heads} * batch.head_dim;
  merge.out_stride_head = merge.merged_stride_head = batch.head_dim;
  merge.lse_stride_state = rows;
  merge.lse_stride_token = merge.merged_lse_stride_token = batch.num_heads;
  merge.sinks = batch.sinks.empty() ? nullptr : batch.sinks.data();
  if (fj_merge_states_n(context, &merge, nullptr) != FJ_SUCCESS) {
    return Error{fmt::format("merge: {}", fj_context_last_error(context))};
  }
  std::vector<uint16_t> out_bits(row_elements);
  std::vector<float> out_lse(rows);
  std::copy_n(static_cast<const uint16_t*>(out.get()), row_elements, out_bits.data());
  std::copy_n(static_cast<const float*>(lse.get()), rows, out_lse.data());

  report.merged.kernel_name = unsharded->kernel_name;
  report.merged.num_tokens = batch.num_tokens();
  const ReferenceOutput reference = reference_paged_attention(*variant, batch);
  report.merged.visible_pairs = reference.visible_pairs;
  compare_paged_outputs(config, batch, reference, out_bits, out_lse, report.merged);
  const float* shard_lse = static_cast<const float*>(states_lse.get());
  for (int64_t row = 0; row < rows; ++row) {
    bool some_empty = false;
    for (int s = 0; s < shards.count; ++s)
      some_empty = some_empty || std::isinf(shard_lse[s * rows + row]);
    report.rows_empty_in_some_shard += some_empty && reference.empty_rows[row] == 0;
  }
  report.unsharded =
      output_difference(config.dtype, out_bits, out_lse, unsharded->out_bits, unsharded->lse);
  return report;
}

}  // namespace flexjit
