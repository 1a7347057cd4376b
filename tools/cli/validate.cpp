// The CLI's option checks (validate.h).
#include "validate.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "flexjit/internal/supported.h"

namespace flexjit::cli {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int kMaxJobs = 1024;

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

// a * b, saturated at int64's maximum (operands non-negative).
int64_t saturated_product(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) {
    return std::numeric_limits<int64_t>::max();
  }
  return a * b;
}

int64_t saturated_sum(int64_t a, int64_t b) {
  return b > std::numeric_limits<int64_t>::max() - a ? std::numeric_limits<int64_t>::max() : a + b;
}

}  // namespace

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

Result<std::vector<int>> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<int> values;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const auto value = parse_int(rest.substr(0, comma));
    if (!value || *value < 0) {
      return Error{fmt::format("{}: '{}' is not a list of non-negative integers", what, text)};
    }
    if (values.size() > static_cast<size_t>(kMaxRunRequests)) {
      return Error{fmt::format("{}: more than {} entries", what, kMaxRunRequests)};
    }
    values.push_back(*value);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (values.empty()) return Error{fmt::format("{} is empty", what)};
  return values;
}

Result<std::vector<float>> parse_sinks(std::string_view text, int num_heads) {
  std::vector<float> values;
  if (text.empty()) return values;
  if (num_heads <= 0) return Error{"--sinks needs a positive head count"};
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    float value = 0.0f;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || error != std::errc() || end != item.data() + item.size() ||
        std::isnan(value) || value == std::numeric_limits<float>::infinity()) {
      return Error{
          fmt::format("--sinks: '{}' is not a float32 logit (finite, or -inf for none)", item)};
    }
    if (values.size() >= static_cast<size_t>(num_heads)) {
      return Error{fmt::format("--sinks: more than the {} heads' logits", num_heads)};
    }
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (values.size() == 1) values.assign(num_heads, values[0]);
  if (values.size() != static_cast<size_t>(num_heads)) {
    return Error{
        fmt::format("--sinks: {} logits for {} heads: give one for every head, or one per "
                    "head",
                    values.size(), num_heads)};
  }
  return values;
}

Result<RunBatch> check_run_shape(const RunShape& shape) {
  if (!supported::head_dim(shape.head_dim)) {
    return Error{fmt::format("--head-dim {} is not supported ({})", shape.head_dim,
                             supported::head_dims_text())};
  }
  if (shape.encoder && shape.page_size_given) {
    return Error{"--encoder has no KV cache, so no page size: drop --page-size"};
  }
  if (shape.encoder && shape.context_lens_given) {
    return Error{"--encoder has no cached context: drop --context-lens"};
  }
  if (shape.encoder && shape.kv_fp8) {
    return Error{"--kv-dtype fp8 is a paged cache's: --encoder reads 16-bit K/V"};
  }
  if (shape.kv_scale_given && !shape.kv_fp8) {
    return Error{"--kv-scale chooses the scales of an fp8 cache: add --kv-dtype fp8"};
  }
  if (shape.kv_shards < 1 || shape.kv_shards > kMaxRunShards) {
    return Error{fmt::format("--kv-shards {} is outside [1, {}] (1: unsharded)", shape.kv_shards,
                             kMaxRunShards)};
  }
  if (shape.kv_interleave < 1) {
    return Error{fmt::format("--kv-interleave {} must be at least 1", shape.kv_interleave)};
  }
  if (shape.kv_interleave_given && shape.kv_shards_contiguous) {
    return Error{
        "--kv-interleave deals interleaved shards: drop it or --kv-shard-layout "
        "contiguous"};
  }
  if (shape.kv_shards > 1 && shape.encoder) {
    return Error{"--kv-shards shards a paged cache's keys: --encoder has none"};
  }
  if (!shape.encoder && (shape.page_size == 0 || !supported::page_size(shape.page_size))) {
    return Error{fmt::format(
        "--page-size {} is not supported: a multiple of {} up to {} (contiguous K/V: --encoder)",
        shape.page_size, supported::kPageSizeStep, supported::kMaxPageSize)};
  }
  if (shape.num_heads <= 0 || shape.num_kv_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0) {
    return Error{fmt::format("--heads ({}) must be a positive multiple of --kv-heads ({})",
                             shape.num_heads, shape.num_kv_heads)};
  }
  if (shape.num_heads > kMaxRunHeads) {
    return Error{fmt::format("--heads {} is more than run's {}", shape.num_heads, kMaxRunHeads)};
  }
  if (shape.iterations < 0 || shape.iterations > kMaxRunIterations) {
    return Error{fmt::format("--iterations {} is outside [0, {}] (0: no timing)", shape.iterations,
                             kMaxRunIterations)};
  }
  if (!std::isfinite(shape.scale)) return Error{"--scale must be a finite number"};

  RunBatch batch;
  auto query_lens = parse_int_list(shape.query_lens, "--query-lens");
  if (!query_lens) return query_lens.error();
  batch.query_lens = std::move(*query_lens);
  if (shape.encoder) {
    batch.context_lens.assign(batch.query_lens.size(), 0);
  } else {
    auto context_lens = parse_int_list(shape.context_lens, "--context-lens");
    if (!context_lens) return context_lens.error();
    batch.context_lens = std::move(*context_lens);
  }
  if (batch.context_lens.size() != batch.query_lens.size()) {
    return Error{"--query-lens and --context-lens need one entry per request"};
  }
  if (batch.query_lens.size() > static_cast<size_t>(kMaxRunRequests)) {
    return Error{fmt::format("--query-lens: more than {} requests", kMaxRunRequests)};
  }

  // Sizes in int64 (lengths are int32 each, so neither sums nor products of two wrap), checked
  // against the limits before anything is allocated.
  int64_t tokens = 0;
  int64_t cached_keys = 0;  // rounded up to whole pages, as the check lays out the cache
  int64_t pairs = 0;        // (query, key) pairs before the mask
  const int64_t page = shape.encoder ? 1 : shape.page_size;
  for (size_t r = 0; r < batch.query_lens.size(); ++r) {
    const int64_t query = batch.query_lens[r];
    const int64_t seq = query + batch.context_lens[r];
    if (seq > kInt32Max) {
      return Error{fmt::format("request {}: {} query and {} context tokens exceed int32", r, query,
                               batch.context_lens[r])};
    }
    tokens += query;
    cached_keys += (seq + page - 1) / page * page;
    pairs = saturated_sum(pairs, query * seq);
  }
  if (tokens > kInt32Max) return Error{"--query-lens: the tokens of the batch exceed int32"};
  // Per cache element: K and V, as dtype bits and as the reference's floats; per query element:
  // q as bits and floats, out as bits, the reference's double output and its comparison.
  const int64_t cache_elems =
      saturated_product(cached_keys + 2 * page, int64_t{shape.num_kv_heads} * shape.head_dim);
  const int64_t query_elems = saturated_product(tokens, int64_t{shape.num_heads} * shape.head_dim);
  batch.bytes =
      saturated_sum(saturated_product(cache_elems, 12), saturated_product(query_elems, 24));
  if (batch.bytes > kMaxRunBytes) {
    return Error{fmt::format(
        "the batch's inputs and reference would take about {} of host memory, more than run's {}: "
        "shorten --query-lens / --context-lens or use fewer --heads / --kv-heads",
        gib(batch.bytes), gib(kMaxRunBytes))};
  }
  auto sinks = parse_sinks(shape.sinks, shape.num_heads);
  if (!sinks) return sinks.error();
  batch.sinks = std::move(*sinks);
  batch.reference_work = saturated_product(pairs, int64_t{shape.num_heads} * shape.head_dim);
  if (batch.reference_work > kMaxRunReferenceWork) {
    return Error{fmt::format(
        "the batch has {} (query, key) pairs: with {} heads of {} the float64 reference would "
        "take more than run's {} multiply-adds; shorten --query-lens / --context-lens",
        pairs, shape.num_heads, shape.head_dim, kMaxRunReferenceWork)};
  }
  if (shape.cpu &&
      saturated_product(batch.reference_work, int64_t{shape.iterations} + 1) > kMaxRunCpuWork) {
    return Error{fmt::format(
        "{} timed launches of this batch on the CPU backend would take more than run's {} "
        "multiply-adds: lower --iterations",
        shape.iterations, kMaxRunCpuWork)};
  }
  return batch;
}

std::string check_compile_shape(const CompileShape& shape) {
  if (shape.all == shape.mask_given)
    return "compile: give --mask M, or --all for every mask of the file";
  if (shape.lists_given && !shape.all) {
    return "compile: --head-dims, --dtypes and --page-sizes choose kernels for --all; for one "
           "kernel use --head-dim, --dtype and --page-size";
  }
  if (shape.all && shape.inspect) {
    return "compile: --ptx, --sass and --resources inspect one kernel: use --mask";
  }
  if (shape.inspect && shape.arch == supported::kCpuArch) {
    return "compile: --ptx, --sass and --resources inspect CUDA kernels, and --arch cpu builds "
           "host code";
  }
  if (shape.json && !shape.resources) return "compile: --json formats --resources: add it";
  if (shape.jobs < 0 || shape.jobs > kMaxJobs) {
    return fmt::format("compile: --jobs {} is outside [0, {}] (0: one per hardware thread)",
                       shape.jobs, kMaxJobs);
  }
  return arch_problem("compile", shape.arch);
}

std::string arch_problem(std::string_view command, std::string_view arch) {
  if (arch.empty()) return "";
  if (arch == supported::kCpuArch) {
    if (command != "emit") return "";
    return "emit: --arch cpu has no CUDA source: the CPU backend runs the mask's host code, built "
           "from the IR that `flexjit ir FILE --mask M` prints";
  }
  const std::string problem = supported::cuda_arch_problem(arch);
  return problem.empty() ? "" : fmt::format("{}: --{}", command, problem);
}

}  // namespace flexjit::cli
