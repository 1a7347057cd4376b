#include "paged_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <type_traits>

#include <fmt/format.h>

#include "check_support.h"
#include "cpu_check.h"
#include "cuda_driver.h"
#include "handles.h"
#include "reference.h"

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

// Random q and K/V values of every key a request owns; every other cache element is NaN, so a
// kernel that reads one shows it in its output.
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
  inputs.k_bits.assign(cache_elems, nan);
  inputs.v_bits.assign(joint ? 0 : cache_elems, nan);
  batch.k.values.assign(cache_elems, std::numeric_limits<float>::quiet_NaN());
  batch.v.values.assign(joint ? 0 : cache_elems, std::numeric_limits<float>::quiet_NaN());
  // A joint layout writes V into K's buffer; the reference then reads V from a copy of that
  // buffer shifted by v_offset, through the same strides.
  uint16_t* v_bits = joint ? inputs.k_bits.data() + inputs.v_offset : inputs.v_bits.data();
  float* v_values = joint ? batch.k.values.data() + inputs.v_offset : batch.v.values.data();
  for (int r = 0; r < num_reqs; ++r) {
    for (int key = 0; key < batch.seq_lens[r]; ++key) {
      const int64_t block = batch.block_table[r * batch.block_table_stride + key / page];
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t base = block * batch.k.stride_block + (key % page) * batch.k.stride_slot +
                             h * batch.k.stride_head;
        for (int64_t i = 0; i < d; ++i) {
          inputs.k_bits[base + i] = to_bits(normal(rng), config.dtype);
          v_bits[base + i] = to_bits(normal(rng), config.dtype);
          batch.k.values[base + i] = from_bits(inputs.k_bits[base + i], config.dtype);
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
    const bool empty_row = std::isinf(reference.lse[row]);
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
    } else if (empty_row) {
      row_wrong = row_wrong || !(std::isinf(lse[row]) && lse[row] < 0);
    } else {
      report.lse_max_abs_error =
          std::max(report.lse_max_abs_error, std::abs(lse[row] - reference.lse[row]));
    }
    if (row_wrong) ++report.empty_rows_wrong;
  }
  report.relative_error = ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
}

// Device copies of array parameters and their descriptors (an empty array gets a null pointer).
Result<bool> upload_arrays(const cuda::DriverApi& api, const std::vector<HostArray>& host,
                           std::deque<DeviceBuffer>& buffers, std::vector<fj_array>& arrays) {
  for (const HostArray& array : host) {
    DeviceBuffer& buffer = buffers.emplace_back(api);
    if (!array.bits.empty()) {
      if (auto status = buffer.upload(array.bits.data(), array.bits.size() * 4); !status) {
        return status;
      }
    }
    arrays.push_back(
        {array.bits.empty() ? nullptr : buffer.get(), array.rows, array.cols, array.cols});
  }
  return true;
}

// The plan shape that holds exactly `batch`.
fj_plan_shape plan_shape_of(const fj_paged_attention_args& paged) {
  fj_plan_shape shape{};
  shape.struct_size = sizeof(shape);
  shape.max_num_reqs = paged.num_reqs;
  shape.max_num_tokens = paged.num_tokens;
  shape.max_query_len = paged.max_query_len;
  shape.num_heads = paged.num_heads;
  shape.num_kv_heads = paged.num_kv_heads;
  return shape;
}

struct PlanDeleter {
  void operator()(fj_plan* plan) const { fj_plan_destroy(plan); }
};
using PlanPtr = std::unique_ptr<fj_plan, PlanDeleter>;

// A CUDA graph of one fj_plan_run captured on `stream` (the plan's work list is read when the
// graph runs, so the capture's batch does not matter).
class CapturedRun {
 public:
  explicit CapturedRun(const cuda::DriverApi& api) : api_(api) {}
  CapturedRun(const CapturedRun&) = delete;
  CapturedRun& operator=(const CapturedRun&) = delete;
  ~CapturedRun() {
    if (exec_ != nullptr) api_.cuGraphExecDestroy(exec_);
    if (graph_ != nullptr) api_.cuGraphDestroy(graph_);
  }

  Result<bool> capture(fj_context* context, fj_plan* plan, const fj_paged_attention_args& args,
                       CUstream stream) {
    CUresult status = api_.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuStreamBeginCapture", status);
    const fj_status run = fj_plan_run(plan, &args, stream);
    status = api_.cuStreamEndCapture(stream, &graph_);
    if (run != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuStreamEndCapture", status);
    status = api_.cuGraphInstantiate(&exec_, graph_, 0);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuGraphInstantiate", status);
    return true;
  }

  Result<bool> launch(CUstream stream) const {
    const CUresult status = api_.cuGraphLaunch(exec_, stream);
    if (status != CUDA_SUCCESS) return cuda::driver_error(api_, "cuGraphLaunch", status);
    return true;
  }

 private:
  const cuda::DriverApi& api_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

struct StreamDeleter {
  const cuda::DriverApi* api;
  void operator()(CUstream stream) const { api->cuStreamDestroy(stream); }
};
using StreamPtr = std::unique_ptr<std::remove_pointer_t<CUstream>, StreamDeleter>;

Result<StreamPtr> make_stream(const cuda::DriverApi& api) {
  CUstream stream = nullptr;
  const CUresult status = api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (status != CUDA_SUCCESS) return cuda::driver_error(api, "cuStreamCreate", status);
  return StreamPtr(stream, StreamDeleter{&api});
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
                      ? static_cast<const void*>(static_cast<const uint16_t*>(k) + inputs.v_offset)
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
  return varlen;
}

double relative_error_tolerance(fj_dtype dtype) {
  return dtype == FJ_DTYPE_BF16 ? 1e-2 : 2e-3;
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
  return desc;
}

Result<PagedCheckReport> run_paged_check(fj_context* context, const fj_program* program,
                                         const PagedCheckConfig& config_in) {
  PagedCheckConfig config = config_in;
  VariantSelection selection;
  selection.name = config.mask;
  selection.score = config.score;
  selection.defines = config.defines;
  auto variant = program_variant(*program, selection);
  if (!variant) return variant.error();
  if (config.params.size() != program->scalars.size()) {
    return Error{fmt::format("{} scalar runtime parameters given, the program declares {}",
                             config.params.size(), program->scalars.size())};
  }
  if (config.arrays.empty() && !program->arrays.empty()) {
    int max_seq_len = 0;
    for (size_t r = 0; r < config.query_lens.size() && r < config.context_lens.size(); ++r) {
      max_seq_len = std::max(max_seq_len, config.query_lens[r] + config.context_lens[r]);
    }
    config.arrays = random_arrays(program->arrays, static_cast<int>(config.query_lens.size()),
                                  config.num_heads, max_seq_len, config.seed);
  }
  if (config.arrays.size() != program->arrays.size()) {
    return Error{fmt::format("{} array runtime parameters given, the program declares {}",
                             config.arrays.size(), program->arrays.size())};
  }
  for (const HostArray& array : config.arrays) {
    if (array.rows < 0 || array.cols < 0 ||
        int64_t{array.rows} * array.cols != static_cast<int64_t>(array.bits.size())) {
      return Error{"an array's bits must hold rows * cols elements"};
    }
  }
  std::mt19937_64 rng(config.seed);
  auto inputs = make_inputs(config, rng);
  if (!inputs) return inputs.error();
  const HostPagedBatch& batch = inputs->batch;

  std::vector<fj_define> defines;
  const fj_kernel_desc desc = kernel_desc(config, defines);
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)> kernel_owner(kernel, fj_kernel_destroy);
  PagedCheckReport report;
  report.kernel_name = kernel->compiled->name();
  report.num_tokens = batch.num_tokens();

  auto api_result = cuda::driver_api();
  if (!api_result) return api_result.error();
  const cuda::DriverApi& api = **api_result;
  if (auto cu_context = cuda::current_or_primary_context(); !cu_context) {
    return cu_context.error();
  }

  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const size_t out_bytes = rows * batch.head_dim * 2;
  DeviceBuffer q(api), k(api), v(api), out(api), lse(api), qsl(api), seq_lens(api), table(api),
      bad_index(api);
  for (auto status : {
           q.upload(inputs->q_bits.data(), inputs->q_bits.size() * 2),
           k.upload(inputs->k_bits.data(), inputs->k_bits.size() * 2),
           inputs->v_offset >= 0 ? Result<bool>(true)
                                 : v.upload(inputs->v_bits.data(), inputs->v_bits.size() * 2),
           out.fill(out_bytes, 0xff),
           lse.fill(rows * sizeof(float), 0xff),
           qsl.upload(batch.query_start_loc.data(), batch.query_start_loc.size() * 4),
           seq_lens.upload(batch.seq_lens.data(), batch.seq_lens.size() * 4),
           table.upload(batch.block_table.data(), batch.block_table.size() * 4),
           bad_index.fill(4 * sizeof(int32_t), 0),
       }) {
    if (!status) return status.error();
  }
  std::deque<DeviceBuffer> array_buffers;  // a deque: buffers neither copy nor move
  std::vector<fj_array> arrays;
  if (auto status = upload_arrays(api, batch.arrays, array_buffers, arrays); !status) {
    return status.error();
  }

  fj_paged_attention_args paged =
      paged_args(batch, *inputs, q.get(), out.get(), k.get(), v.get(), lse.get(), qsl.get(),
                 seq_lens.get(), table.get(), arrays);
  paged.bad_index = config.check_bounds ? static_cast<int32_t*>(bad_index.get()) : nullptr;

  // The encoder call: K/V rows are the cache's one-token blocks (see make_inputs).
  const fj_varlen_attention_args varlen = varlen_args(paged, batch);

  // Planned launches: a plan that holds exactly this batch, on a stream of its own (a legacy
  // default stream cannot be captured).
  PlanPtr plan;
  auto stream_result = make_stream(api);
  if (!stream_result) return stream_result.error();
  CUstream stream = config.launch == PagedLaunch::Direct ? nullptr : stream_result->get();
  CapturedRun graph(api);
  DeviceBuffer workspace(api);
  if (config.launch != PagedLaunch::Direct) {
    if (config.contiguous) return Error{"planned launches are for paged kernels"};
    const fj_plan_shape shape = plan_shape_of(paged);
    fj_plan* created = nullptr;
    if (fj_plan_create(kernel, &shape, &created) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    plan.reset(created);
    if (fj_plan_update(plan.get(), batch.query_start_loc.data(), batch.seq_lens.data(),
                       batch.num_reqs(), batch.max_blocks_per_req, stream) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    // A caller's workspace: the kernel's own buffer cannot be allocated while capturing.
    uint64_t workspace_bytes = 0;
    if (fj_attention_workspace_size(kernel, paged.arrays, paged.num_arrays, &workspace_bytes) !=
        FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (workspace_bytes > 0) {
      if (auto status = workspace.fill(workspace_bytes, 0); !status) return status.error();
      paged.workspace = workspace.get();
      paged.workspace_bytes = workspace_bytes;
    }
    if (config.launch == PagedLaunch::Graph) {
      if (auto status = graph.capture(context, plan.get(), paged, stream); !status) {
        return status.error();
      }
    }
  }
  auto launch = [&]() -> Result<bool> {
    fj_status status = FJ_SUCCESS;
    switch (config.launch) {
      case PagedLaunch::Direct:
        status = config.contiguous ? fj_varlen_attention(kernel, &varlen, nullptr)
                                   : fj_paged_attention(kernel, &paged, nullptr);
        break;
      case PagedLaunch::Planned:
        status = fj_plan_run(plan.get(), &paged, stream);
        break;
      case PagedLaunch::Graph:
        return graph.launch(stream);
    }
    if (status != FJ_SUCCESS) return Error{fj_context_last_error(context)};
    return true;
  };
  if (auto launched = launch(); !launched) return launched.error();
  if (const CUresult status = api.cuCtxSynchronize(); status != CUDA_SUCCESS) {
    return cuda::driver_error(api, "kernel execution", status);
  }
  std::vector<uint16_t> out_bits(rows * batch.head_dim);
  std::vector<float> lse_values(rows);
  if (auto status = out.download(out_bits.data(), out_bytes); !status) return status.error();
  if (auto status = lse.download(lse_values.data(), rows * sizeof(float)); !status) {
    return status.error();
  }
  if (auto status = bad_index.download(report.bad_index, sizeof report.bad_index); !status) {
    return status.error();
  }

  if (config.timing_iterations > 0) {
    CUevent start, stop;
    api.cuEventCreate(&start, CU_EVENT_DEFAULT);
    api.cuEventCreate(&stop, CU_EVENT_DEFAULT);
    api.cuEventRecord(start, stream);
    for (int i = 0; i < config.timing_iterations; ++i) {
      if (auto launched = launch(); !launched) return launched.error();
    }
    api.cuEventRecord(stop, stream);
    api.cuEventSynchronize(stop);
    float ms = 0.0f;
    api.cuEventElapsedTime(&ms, start, stop);
    report.kernel_ms = ms / config.timing_iterations;
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
  }

  const ReferenceOutput reference = reference_paged_attention(*variant, batch);
  report.visible_pairs = reference.visible_pairs;
  compare(config, batch, reference, out_bits, lse_values, report);
  if (config.compare_cpu) {
    PagedCheckConfig untimed = config;
    untimed.timing_iterations = 0;
    untimed.check_bounds = false;
    auto cpu = run_cpu_launch(context, program, untimed, *inputs);
    if (!cpu) return cpu.error();
    const OutputDifference difference =
        output_difference(config.dtype, out_bits, lse_values, cpu->out_bits, cpu->lse);
    report.cpu_relative_error = difference.relative;
    report.cpu_lse_max_abs_error = difference.lse_max_abs;
    report.cpu_mismatched_non_finite = difference.mismatched_non_finite;
  }
  return report;
}

}  // namespace flexjit

namespace flexjit {

Result<std::vector<PagedCheckReport>> run_graph_replay_check(
    fj_context* context, const fj_program* program, const std::vector<PagedCheckConfig>& steps_in) {
  if (steps_in.empty()) return Error{"no steps"};
  std::vector<PagedCheckConfig> steps = steps_in;
  for (const PagedCheckConfig& step : steps) {
    if (step.contiguous) return Error{"graph replays are for paged kernels"};
    if (step.query_lens.size() != step.context_lens.size()) {
      return Error{"query_lens and context_lens must be of equal length"};
    }
  }
  // One array shape for every step: random arrays shaped for the largest.
  if (steps[0].arrays.empty() && !program->arrays.empty()) {
    int max_reqs = 0;
    int max_seq_len = 0;
    for (const PagedCheckConfig& step : steps) {
      max_reqs = std::max(max_reqs, static_cast<int>(step.query_lens.size()));
      for (size_t r = 0; r < step.query_lens.size(); ++r)
        max_seq_len = std::max(max_seq_len, step.query_lens[r] + step.context_lens[r]);
    }
    const std::vector<HostArray> arrays =
        random_arrays(program->arrays, max_reqs, steps[0].num_heads, max_seq_len, steps[0].seed);
    for (PagedCheckConfig& step : steps)
      step.arrays = arrays;
  }
  const PagedCheckConfig& first = steps[0];
  VariantSelection selection;
  selection.name = first.mask;
  selection.score = first.score;
  selection.defines = first.defines;
  auto variant = program_variant(*program, selection);
  if (!variant) return variant.error();

  // Every step's inputs, then one table stride and block count that fit them all.
  std::vector<PagedInputs> inputs;
  int max_blocks = 1;
  int64_t table_stride = 1;
  size_t q_bytes = 16, k_bytes = 16, v_bytes = 16, rows = 1, table_bytes = 16, reqs = 1;
  for (const PagedCheckConfig& step : steps) {
    std::mt19937_64 rng(step.seed);
    auto made = make_inputs(step, rng);
    if (!made) return made.error();
    inputs.push_back(std::move(*made));
    const HostPagedBatch& batch = inputs.back().batch;
    max_blocks = std::max(max_blocks, batch.max_blocks_per_req);
    table_stride = std::max(table_stride, batch.block_table_stride);
    q_bytes = std::max(q_bytes, inputs.back().q_bits.size() * 2);
    k_bytes = std::max(k_bytes, inputs.back().k_bits.size() * 2);
    v_bytes = std::max(v_bytes, inputs.back().v_bits.size() * 2);
    rows = std::max(rows, static_cast<size_t>(batch.num_tokens()) * batch.num_heads);
    reqs = std::max(reqs, static_cast<size_t>(batch.num_reqs()));
  }
  for (PagedInputs& in : inputs) {
    // Re-lay each table at the common stride; the new columns hold garbage too.
    HostPagedBatch& batch = in.batch;
    std::vector<int32_t> table(batch.num_reqs() * table_stride, 0x7fffff00);
    for (int r = 0; r < batch.num_reqs(); ++r) {
      std::copy_n(batch.block_table.begin() + r * batch.block_table_stride,
                  batch.block_table_stride, table.begin() + r * table_stride);
    }
    batch.block_table = std::move(table);
    batch.block_table_stride = table_stride;
    batch.max_blocks_per_req = max_blocks;
    table_bytes = std::max(table_bytes, batch.block_table.size() * 4);
  }

  std::vector<fj_define> defines;
  const fj_kernel_desc desc = kernel_desc(first, defines);
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)> kernel_owner(kernel, fj_kernel_destroy);
  auto api_result = cuda::driver_api();
  if (!api_result) return api_result.error();
  const cuda::DriverApi& api = **api_result;
  if (auto cu_context = cuda::current_or_primary_context(); !cu_context) {
    return cu_context.error();
  }
  const size_t head_dim = first.head_dim;
  DeviceBuffer q(api), k(api), v(api), out(api), lse(api), qsl(api), seq_lens(api), table(api),
      workspace(api);
  for (auto status :
       {q.fill(q_bytes, 0), k.fill(k_bytes, 0), v.fill(v_bytes, 0),
        out.fill(rows * head_dim * 2, 0xff), lse.fill(rows * 4, 0xff), qsl.fill((reqs + 1) * 4, 0),
        seq_lens.fill(reqs * 4, 0), table.fill(table_bytes, 0)}) {
    if (!status) return status.error();
  }
  std::deque<DeviceBuffer> array_buffers;  // a deque: buffers neither copy nor move
  std::vector<fj_array> arrays;
  if (auto status = upload_arrays(api, inputs[0].batch.arrays, array_buffers, arrays); !status) {
    return status.error();
  }

  // The captured arguments: the largest batch's counts over the shared buffers.
  fj_paged_attention_args paged =
      paged_args(inputs[0].batch, inputs[0], q.get(), out.get(), k.get(), v.get(), lse.get(),
                 qsl.get(), seq_lens.get(), table.get(), arrays);
  fj_plan_shape shape{};
  shape.struct_size = sizeof(shape);
  for (const PagedInputs& in : inputs) {
    const fj_paged_attention_args step =
        paged_args(in.batch, in, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                   nullptr, arrays);
    shape.max_num_reqs = std::max(shape.max_num_reqs, step.num_reqs);
    shape.max_num_tokens = std::max(shape.max_num_tokens, step.num_tokens);
    shape.max_query_len = std::max(shape.max_query_len, step.max_query_len);
  }
  shape.num_heads = paged.num_heads;
  shape.num_kv_heads = paged.num_kv_heads;
  paged.num_reqs = shape.max_num_reqs;
  paged.num_tokens = shape.max_num_tokens;
  paged.max_query_len = shape.max_query_len;
  uint64_t workspace_bytes = 0;
  if (fj_attention_workspace_size(kernel, paged.arrays, paged.num_arrays, &workspace_bytes) !=
      FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  if (workspace_bytes > 0) {
    if (auto status = workspace.fill(workspace_bytes, 0); !status) return status.error();
    paged.workspace = workspace.get();
    paged.workspace_bytes = workspace_bytes;
  }

  fj_plan* created = nullptr;
  if (fj_plan_create(kernel, &shape, &created) != FJ_SUCCESS) {
    return Error{fj_context_last_error(context)};
  }
  PlanPtr plan(created);
  auto stream = make_stream(api);
  if (!stream) return stream.error();
  CapturedRun graph(api);
  if (auto status = graph.capture(context, plan.get(), paged, stream->get()); !status) {
    return status.error();
  }

  std::vector<PagedCheckReport> reports;
  for (size_t i = 0; i < steps.size(); ++i) {
    const PagedInputs& in = inputs[i];
    const HostPagedBatch& batch = in.batch;
    const size_t step_rows = static_cast<size_t>(batch.num_tokens()) * batch.num_heads;
    const std::vector<uint8_t> poison(rows * head_dim * 2, 0xff);
    for (auto status : {q.write(in.q_bits.data(), in.q_bits.size() * 2),
                        k.write(in.k_bits.data(), in.k_bits.size() * 2),
                        v.write(in.v_bits.data(), in.v_bits.size() * 2),
                        out.write(poison.data(), poison.size()), lse.write(poison.data(), rows * 4),
                        qsl.write(batch.query_start_loc.data(), batch.query_start_loc.size() * 4),
                        seq_lens.write(batch.seq_lens.data(), batch.seq_lens.size() * 4),
                        table.write(batch.block_table.data(), batch.block_table.size() * 4)}) {
      if (!status) return status.error();
    }
    if (fj_plan_update(plan.get(), batch.query_start_loc.data(), batch.seq_lens.data(),
                       batch.num_reqs(), max_blocks, stream->get()) != FJ_SUCCESS) {
      return Error{fj_context_last_error(context)};
    }
    if (auto status = graph.launch(stream->get()); !status) return status.error();
    if (const CUresult status = api.cuStreamSynchronize(stream->get()); status != CUDA_SUCCESS) {
      return cuda::driver_error(api, "graph replay", status);
    }
    std::vector<uint16_t> out_bits(step_rows * head_dim);
    std::vector<float> lse_values(step_rows);
    if (auto status = out.download(out_bits.data(), out_bits.size() * 2); !status) {
      return status.error();
    }
    if (auto status = lse.download(lse_values.data(), lse_values.size() * 4); !status) {
      return status.error();
    }
    PagedCheckReport report;
    report.kernel_name = kernel->compiled->name();
    report.num_tokens = batch.num_tokens();
    const ReferenceOutput reference = reference_paged_attention(*variant, batch);
    report.visible_pairs = reference.visible_pairs;
    compare(steps[i], batch, reference, out_bits, lse_values, report);
    reports.push_back(report);
  }
  return reports;
}

}  // namespace flexjit
