// [gpu] tests of the array summaries (templates/array_summary.cuh, runtime/launch/summaries): the
// device builds exactly build_summary's layout, and attention launches that summarise their
// arrays match the reference, through the caller's workspace and through the kernel's own.
// Run on a machine with a CUDA GPU:
//   build/bin/flexjit_tests_gpu "[summary]"
//   build/bin/flexjit_tests_gpu "[bench]"     (the summary kernel's speed; hidden otherwise)
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "array_summary.cuh"
#include "check/check_support.h"
#include "check/paged_check.h"
#include "check/reference.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/flexjit.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"
#include "launch/summaries.h"

namespace {

using flexjit::DeviceBuffer;

// The driver, a context (for its kernel cache) and the summary kernel for the current device.
struct Device {
  const flexjit::cuda::DriverApi* api = nullptr;
  fj_context* context = nullptr;
  flexjit::CompiledKernelPtr summary_kernel;

  Device() {
    auto loaded = flexjit::cuda::driver_api();
    REQUIRE(loaded.ok());
    api = *loaded;
    auto cu_context = flexjit::cuda::current_or_primary_context();
    INFO((cu_context ? std::string() : cu_context.error().message));
    REQUIRE(cu_context.ok());
    CUdevice device = 0;
    REQUIRE(api->cuCtxGetDevice(&device) == CUDA_SUCCESS);
    auto sm = flexjit::cuda::device_sm(*api, device);
    REQUIRE(sm.ok());
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    auto kernel =
        context->cache.get(flexjit::array_summary_spec(flexjit::cuda::nvrtc_arch_for(*sm)));
    INFO((kernel ? std::string() : kernel.error().message + "\n" + kernel.error().log));
    REQUIRE(kernel.ok());
    summary_kernel = *kernel;
  }
  ~Device() { fj_context_destroy(context); }

  void synchronize() const {
    const CUresult status = api->cuCtxSynchronize();
    INFO(flexjit::cuda::driver_error_string(*api, status));
    REQUIRE(status == CUDA_SUCCESS);
  }
};

Device& device() {
  static Device instance;
  return instance;
}

void require_ok(const flexjit::Result<bool>& result) {
  INFO((result ? std::string() : result.error().message));
  REQUIRE(result.ok());
}

// `count` int32 of random keys: small values with repeats, and now and then any int32 (ints), or
// floats of every class: signed zeros, infinities, NaNs of both signs, denormals (floats).
std::vector<int32_t> random_elements(size_t count, bool is_float, std::mt19937_64& rng) {
  std::vector<int32_t> elements(count);
  const int32_t special_floats[] = {0x00000000,          int32_t(0x80000000), 0x7f800000,
                                    int32_t(0xff800000), 0x7fc00000,          int32_t(0xffc00000),
                                    0x00000001,          int32_t(0x80000001), 0x7f7fffff,
                                    int32_t(0xff7fffff)};
  for (int32_t& element : elements) {
    const uint64_t r = rng();
    if (is_float) {
      const float value = static_cast<float>(static_cast<int>(r % 2001) - 1000) * 0.37f;
      element = r % 9 == 0 ? special_floats[(r >> 8) % 10] : fj::float_to_bits(value);
    } else {
      element = r % 11 == 0 ? static_cast<int32_t>(r >> 32) : static_cast<int32_t>(r % 1000) - 500;
    }
  }
  return elements;
}

// Summarises a random rows x cols array (rows `row_stride` apart) on the device and compares
// every word with build_summary; the words past the summary must stay untouched.
void check_device_summary(int32_t rows, int32_t cols, int32_t row_stride, fj::SummaryAxis axis,
                          bool is_float, uint64_t seed) {
  INFO(fmt::format("{}x{} (row stride {}), {}, {}", rows, cols, row_stride,
                   axis == fj::kSummaryCols ? "along columns" : "along rows",
                   is_float ? "float" : "int"));
  Device& d = device();
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> elements =
      random_elements(static_cast<size_t>(rows - 1) * row_stride + cols, is_float, rng);
  fj::ArrayParam array;
  array.data = elements.data();
  array.rows = rows;
  array.cols = cols;
  array.row_stride = row_stride;
  array.summary_axis = axis;
  const int64_t words = fj::summary_words(rows, cols, axis);
  std::vector<int32_t> want(words);
  flexjit::build_summary(array, is_float, want.data());

  constexpr int64_t kGuardWords = 64;
  DeviceBuffer data(*d.api), summary(*d.api);
  require_ok(data.upload(elements.data(), elements.size() * 4));
  require_ok(summary.fill((words + kGuardWords) * 4, 0x5a));
  array.data = data.get();
  require_ok(flexjit::enqueue_array_summary(*d.summary_kernel, array, is_float,
                                            static_cast<int32_t*>(summary.get()), nullptr));
  d.synchronize();
  std::vector<int32_t> got(words + kGuardWords);
  require_ok(summary.download(got.data(), got.size() * 4));
  int64_t wrong = 0;
  int64_t first_wrong = -1;
  for (int64_t i = 0; i < words; ++i) {
    if (got[i] == want[i]) continue;
    if (wrong++ == 0) first_wrong = i;
  }
  INFO(fmt::format("first wrong word {} of {}: got {}, want {}", first_wrong, words,
                   first_wrong >= 0 ? got[first_wrong] : 0,
                   first_wrong >= 0 ? want[first_wrong] : 0));
  CHECK(wrong == 0);
  for (int64_t i = words; i < words + kGuardWords; ++i)
    REQUIRE(got[i] == 0x5a5a5a5a);
}

}  // namespace

TEST_CASE("device summaries equal build_summary", "[gpu][summary]") {
  const bool is_float = GENERATE(false, true);
  uint64_t seed = is_float ? 100 : 200;
  // Lengths around a level-1 pair (16), a CTA's chunk (4096) and several upper levels.
  for (const int32_t length : {1, 15, 16, 17, 255, 257, 4095, 4096, 4097, 70000}) {
    check_device_summary(3, length, length + 5, fj::kSummaryCols, is_float, ++seed);
    check_device_summary(length, 3, 7, fj::kSummaryRows, is_float, ++seed);
  }
  // One line (a 1-D array), and more lines than a grid's y dimension holds.
  check_device_summary(131072, 1, 1, fj::kSummaryRows, is_float, ++seed);
  check_device_summary(70000, 20, 21, fj::kSummaryCols, is_float, ++seed);
  check_device_summary(5, 70000, 70003, fj::kSummaryRows, is_float, ++seed);
}

namespace {

struct Programs {
  fj_program* standard = nullptr;
  // A float array along kv and a 1-D int array along kv (summarised by rows); a score whose
  // key terms read an array too.
  fj_program* custom = nullptr;

  Programs() {
    fj_context* context = device().context;
    const char* root = std::getenv("FLEXJIT_SOURCE_DIR");
    const std::string path =
        std::string(root != nullptr ? root : FLEXJIT_SOURCE_DIR) + "/dsl/lib/standard.mask";
    REQUIRE(fj_program_create_from_file(context, path.c_str(), &standard) == FJ_SUCCESS);
    const std::string source =
        "param w: float[b, kv]\n"
        "param z: int[kv]\n"
        "mask weighted = q >= kv && w[b, kv] >= 0.25\n"
        "mask ranked = q >= kv && z[kv] <= q\n"
        "param bias: float[kv]\n"
        "score kv_bias = score - bias[kv]\n"
        "variant ranked_bias = ranked with kv_bias\n";
    REQUIRE(fj_program_create(context, "custom.mask", source.data(), source.size(), &custom) ==
            FJ_SUCCESS);
  }
  ~Programs() {
    fj_program_destroy(custom);
    fj_program_destroy(standard);
  }
};

Programs& programs() {
  static Programs instance;
  return instance;
}

// Also against the CPU backend on the same inputs.
void require_matches_reference(fj_program* program, const flexjit::PagedCheckConfig& config) {
  flexjit::PagedCheckConfig with_cpu = config;
  with_cpu.compare_cpu = true;
  auto report = flexjit::run_paged_check(device().context, program, with_cpu);
  INFO((report ? std::string() : report.error().message));
  REQUIRE(report.ok());
  INFO(fmt::format("{}: rel err {:.3e}, bad {}, empty rows wrong {}, lse err {:.3e}",
                   report->kernel_name, report->relative_error, report->bad_outputs,
                   report->empty_rows_wrong, report->lse_max_abs_error));
  CHECK(report->visible_pairs > 0);
  CHECK(report->bad_outputs == 0);
  CHECK(report->empty_rows_wrong == 0);
  CHECK(report->relative_error <= flexjit::relative_error_tolerance(config.dtype));
  CHECK(report->lse_max_abs_error <= 2e-2);
  INFO(fmt::format("GPU vs CPU backend: rel diff {:.3e}, lse diff {:.3e}, finite on one only {}",
                   report->cpu_relative_error, report->cpu_lse_max_abs_error,
                   report->cpu_mismatched_non_finite));
  CHECK(report->cpu_relative_error <= flexjit::relative_error_tolerance(config.dtype));
  CHECK(report->cpu_lse_max_abs_error <= 2e-2);
  CHECK(report->cpu_mismatched_non_finite == 0);
}

}  // namespace

// Keys past one chunk (4096), so the summaries have upper levels; the kernel's own workspace.
TEST_CASE("summarised masks over long sequences match the reference", "[gpu][summary]") {
  flexjit::PagedCheckConfig config;
  config.head_dim = 64;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.query_lens = {64, 1, 200};
  config.context_lens = {5000, 9000, 0};
  config.params.assign(1, 0);
  config.seed = 31;
  config.mask = "document";
  require_matches_reference(programs().standard, config);
  config.contiguous = true;
  config.context_lens = {0, 0, 0};
  config.query_lens = {300, 1, 4500};
  require_matches_reference(programs().standard, config);

  config = flexjit::PagedCheckConfig{};
  config.head_dim = 64;
  config.num_heads = 4;
  config.num_kv_heads = 4;
  config.query_lens = {100, 7};
  config.context_lens = {4200, 30};
  config.seed = 32;
  // Key terms that read arrays: staged in shared memory by the Hopper kernel's producer, at
  // 128-key (head dim 64) and 64-key (128) tiles.
  for (const int head_dim : {64, 128}) {
    for (const char* mask : {"weighted", "ranked", "ranked_bias"}) {
      INFO(mask << " head dim " << head_dim);
      config.mask = mask;
      config.head_dim = head_dim;
      require_matches_reference(programs().custom, config);
    }
  }
}

namespace {

// One document-masked paged launch with its inputs on the device, and the reference output.
struct DocumentBatch {
  static constexpr int kHeads = 4;
  static constexpr int kKvHeads = 2;
  static constexpr int kHeadDim = 64;
  static constexpr int kPage = 16;
  static constexpr int kDocStrideExtra = 7;

  flexjit::HostPagedBatch batch;
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  std::vector<int32_t> doc;  // device layout: rows of doc_stride
  int32_t doc_cols = 0;
  int32_t doc_stride = 0;
  int32_t max_query_len = 0;

  DocumentBatch(const std::vector<int>& query_lens, const std::vector<int>& seq_lens,
                uint64_t seed) {
    std::mt19937_64 rng(seed);
    const int num_reqs = static_cast<int>(seq_lens.size());
    batch.num_heads = kHeads;
    batch.num_kv_heads = kKvHeads;
    batch.head_dim = kHeadDim;
    batch.page_size = kPage;
    batch.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    batch.params = {0};
    batch.seq_lens = seq_lens;
    batch.query_start_loc = {0};
    int blocks = 0;
    for (int r = 0; r < num_reqs; ++r) {
      batch.query_start_loc.push_back(batch.query_start_loc.back() + query_lens[r]);
      batch.max_blocks_per_req =
          std::max(batch.max_blocks_per_req, (seq_lens[r] + kPage - 1) / kPage);
      max_query_len = std::max(max_query_len, query_lens[r]);
      doc_cols = std::max(doc_cols, seq_lens[r]);
    }
    batch.block_table_stride = batch.max_blocks_per_req;
    batch.block_table.assign(num_reqs * batch.block_table_stride, 0);
    for (int r = 0; r < num_reqs; ++r) {
      for (int j = 0; j < (seq_lens[r] + kPage - 1) / kPage; ++j)
        batch.block_table[r * batch.block_table_stride + j] = blocks++;
    }
    for (flexjit::HostCache* cache : {&batch.k, &batch.v}) {
      cache->stride_block = int64_t{kPage} * kKvHeads * kHeadDim;
      cache->stride_slot = int64_t{kKvHeads} * kHeadDim;
      cache->stride_head = kHeadDim;
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto fill = [&](std::vector<uint16_t>& bits, std::vector<float>& values, int64_t n) {
      bits.resize(n);
      values.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        bits[i] = flexjit::to_bits(normal(rng), FJ_DTYPE_BF16);
        values[i] = flexjit::from_bits(bits[i], FJ_DTYPE_BF16);
      }
    };
    fill(q_bits, batch.q, int64_t{batch.num_tokens()} * kHeads * kHeadDim);
    fill(k_bits, batch.k.values, int64_t{blocks} * batch.k.stride_block);
    fill(v_bits, batch.v.values, int64_t{blocks} * batch.v.stride_block);

    // Documents of 1 to 700 positions; the reference reads a dense copy.
    flexjit::HostArray dense;
    dense.rows = num_reqs;
    dense.cols = doc_cols;
    doc_stride = doc_cols + kDocStrideExtra;
    doc.assign(static_cast<size_t>(num_reqs) * doc_stride, -1);
    std::uniform_int_distribution<int> length(1, 700);
    for (int r = 0; r < num_reqs; ++r) {
      int id = 0;
      int left = length(rng);
      for (int c = 0; c < doc_cols; ++c) {
        if (left-- == 0) {
          ++id;
          left = length(rng);
        }
        doc[static_cast<size_t>(r) * doc_stride + c] = id;
        dense.bits.push_back(id);
      }
    }
    batch.arrays.assign(4, flexjit::HostArray{});
    batch.arrays[2] = dense;  // standard.mask's slot of doc
  }
};

// The device side of a DocumentBatch and a launch of it.
struct DocumentLaunch {
  const DocumentBatch& inputs;
  DeviceBuffer q, k, v, out, lse, qsl, seq_lens, table, doc;
  fj_array arrays[4] = {};
  fj_paged_attention_args args{};

  explicit DocumentLaunch(const DocumentBatch& in)
      : inputs(in),
        q(*device().api),
        k(*device().api),
        v(*device().api),
        out(*device().api),
        lse(*device().api),
        qsl(*device().api),
        seq_lens(*device().api),
        table(*device().api),
        doc(*device().api) {
    const flexjit::HostPagedBatch& b = in.batch;
    const int64_t rows = int64_t{b.num_tokens()} * b.num_heads;
    require_ok(q.upload(in.q_bits.data(), in.q_bits.size() * 2));
    require_ok(k.upload(in.k_bits.data(), in.k_bits.size() * 2));
    require_ok(v.upload(in.v_bits.data(), in.v_bits.size() * 2));
    require_ok(out.fill(rows * b.head_dim * 2, 0xff));
    require_ok(lse.fill(rows * 4, 0xff));
    require_ok(qsl.upload(b.query_start_loc.data(), b.query_start_loc.size() * 4));
    require_ok(seq_lens.upload(b.seq_lens.data(), b.seq_lens.size() * 4));
    require_ok(table.upload(b.block_table.data(), b.block_table.size() * 4));
    require_ok(doc.upload(in.doc.data(), in.doc.size() * 4));
    arrays[2] = {doc.get(), b.num_reqs(), in.doc_cols, in.doc_stride};

    args.struct_size = sizeof(args);
    args.q = q.get();
    args.out = out.get();
    args.k_cache = k.get();
    args.v_cache = v.get();
    args.query_start_loc = static_cast<const int32_t*>(qsl.get());
    args.seq_lens = static_cast<const int32_t*>(seq_lens.get());
    args.block_table = static_cast<const int32_t*>(table.get());
    args.lse = static_cast<float*>(lse.get());
    args.num_tokens = b.num_tokens();
    args.num_reqs = b.num_reqs();
    args.num_heads = b.num_heads;
    args.num_kv_heads = b.num_kv_heads;
    args.max_query_len = in.max_query_len;
    args.max_blocks_per_req = b.max_blocks_per_req;
    args.q_stride_token = args.out_stride_token = int64_t{b.num_heads} * b.head_dim;
    args.q_stride_head = args.out_stride_head = b.head_dim;
    args.k_stride_block = b.k.stride_block;
    args.k_stride_slot = b.k.stride_slot;
    args.k_stride_head = b.k.stride_head;
    args.v_stride_block = b.v.stride_block;
    args.v_stride_slot = b.v.stride_slot;
    args.v_stride_head = b.v.stride_head;
    args.block_table_stride = b.block_table_stride;
    args.lse_stride_token = b.num_heads;
    args.scale = b.scale;
    args.params = b.params.data();
    args.num_params = 1;
    args.arrays = arrays;
    args.num_arrays = 4;
  }

  // Runs the launch and returns its output bits.
  std::vector<uint16_t> run(fj_kernel* kernel) {
    const flexjit::HostPagedBatch& b = inputs.batch;
    require_ok(out.fill(int64_t{b.num_tokens()} * b.num_heads * b.head_dim * 2, 0xff));
    const fj_status status = fj_paged_attention(kernel, &args, nullptr);
    INFO(fj_context_last_error(device().context));
    REQUIRE(status == FJ_SUCCESS);
    device().synchronize();
    std::vector<uint16_t> bits(int64_t{b.num_tokens()} * b.num_heads * b.head_dim);
    require_ok(out.download(bits.data(), bits.size() * 2));
    return bits;
  }
};

// ||out - ref|| / ||ref||, or infinity when an output is not finite.
double relative_error(const std::vector<uint16_t>& out, const std::vector<double>& reference) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double value = flexjit::from_bits(out[i], FJ_DTYPE_BF16);
    if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
    diff += (value - reference[i]) * (value - reference[i]);
    norm += reference[i] * reference[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("document attention: the caller's workspace and the kernel's own agree",
          "[gpu][summary]") {
  const DocumentBatch inputs({128, 40}, {300, 5000}, 7);
  DocumentLaunch launch(inputs);
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = "document";
  desc.head_dim = DocumentBatch::kHeadDim;
  desc.dtype = FJ_DTYPE_BF16;
  desc.page_size = DocumentBatch::kPage;
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(device().context, programs().standard, &desc, &kernel) == FJ_SUCCESS);

  // The kernel's own buffer.
  const std::vector<uint16_t> owned = launch.run(kernel);
  flexjit::VariantSelection selection;
  selection.name = "document";
  auto variant = flexjit::program_variant(*programs().standard, selection);
  REQUIRE(variant.ok());
  const flexjit::ReferenceOutput reference =
      flexjit::reference_paged_attention(*variant, inputs.batch);
  CHECK(reference.visible_pairs > 0);
  CHECK(relative_error(owned, reference.out) <= flexjit::relative_error_tolerance(FJ_DTYPE_BF16));

  // The caller's, poisoned: the launch writes the summary there and gives the same output.
  uint64_t bytes = 0;
  REQUIRE(fj_attention_workspace_size(kernel, launch.arrays, 4, &bytes) == FJ_SUCCESS);
  const int64_t words = fj::summary_words(2, inputs.doc_cols, fj::kSummaryCols);
  CHECK(bytes == (static_cast<uint64_t>(words) * 4 + 255) / 256 * 256);
  DeviceBuffer workspace(*device().api);
  require_ok(workspace.fill(bytes, 0xff));
  launch.args.workspace = workspace.get();
  launch.args.workspace_bytes = bytes;
  const bool same_with_workspace = launch.run(kernel) == owned;
  CHECK(same_with_workspace);
  std::vector<int32_t> summary(words);
  require_ok(workspace.download(summary.data(), words * 4));
  fj::ArrayParam doc;
  doc.data = inputs.doc.data();
  doc.rows = 2;
  doc.cols = inputs.doc_cols;
  doc.row_stride = inputs.doc_stride;
  doc.summary_axis = fj::kSummaryCols;
  std::vector<int32_t> want(words);
  flexjit::build_summary(doc, false, want.data());
  const bool summary_written = summary == want;
  CHECK(summary_written);

  // A launch that needs more than the kernel's buffer holds grows it: document ids of more
  // requests than the batch has (rows past num_reqs are never read).
  launch.args.workspace = nullptr;
  launch.args.workspace_bytes = 0;
  std::vector<int32_t> tall = inputs.doc;
  tall.resize(static_cast<size_t>(64) * inputs.doc_stride, 3);
  DeviceBuffer tall_doc(*device().api);
  require_ok(tall_doc.upload(tall.data(), tall.size() * 4));
  launch.arrays[2] = {tall_doc.get(), 64, inputs.doc_cols, inputs.doc_stride};
  const bool same_after_growing = launch.run(kernel) == owned;
  CHECK(same_after_growing);
  fj_kernel_destroy(kernel);
}

// The summary kernel alone, timed with CUDA events over many iterations (both launches when a
// line is longer than one chunk).
TEST_CASE("array summary kernel speed", "[gpu][.bench]") {
  Device& d = device();
  struct Shape {
    int32_t rows, cols;
  };
  for (const Shape shape : {Shape{64, 16384}, Shape{1, 131072}, Shape{64, 4096}}) {
    std::mt19937_64 rng(1);
    const std::vector<int32_t> elements =
        random_elements(static_cast<size_t>(shape.rows) * shape.cols, false, rng);
    DeviceBuffer data(*d.api), summary(*d.api);
    require_ok(data.upload(elements.data(), elements.size() * 4));
    const int64_t words = fj::summary_words(shape.rows, shape.cols, fj::kSummaryCols);
    require_ok(summary.fill(words * 4, 0));
    fj::ArrayParam array;
    array.data = data.get();
    array.rows = shape.rows;
    array.cols = shape.cols;
    array.row_stride = shape.cols;
    array.summary_axis = fj::kSummaryCols;
    const auto enqueue = [&] {
      require_ok(flexjit::enqueue_array_summary(*d.summary_kernel, array, false,
                                                static_cast<int32_t*>(summary.get()), nullptr));
    };
    for (int i = 0; i < 20; ++i)
      enqueue();
    d.synchronize();
    constexpr int kIterations = 2000;
    CUevent start, stop;
    REQUIRE(d.api->cuEventCreate(&start, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
    REQUIRE(d.api->cuEventCreate(&stop, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
    REQUIRE(d.api->cuEventRecord(start, nullptr) == CUDA_SUCCESS);
    for (int i = 0; i < kIterations; ++i)
      enqueue();
    REQUIRE(d.api->cuEventRecord(stop, nullptr) == CUDA_SUCCESS);
    REQUIRE(d.api->cuEventSynchronize(stop) == CUDA_SUCCESS);
    float ms = 0.0f;
    REQUIRE(d.api->cuEventElapsedTime(&ms, start, stop) == CUDA_SUCCESS);
    d.api->cuEventDestroy(start);
    d.api->cuEventDestroy(stop);
    const double us = 1000.0 * ms / kIterations;
    const double gb_per_s = static_cast<double>(elements.size()) * 4 / (us * 1e3);
    fmt::print("array summary {:>2} x {:>6} int32 ({} launch{}): {:6.2f} us, {:6.1f} GB/s read\n",
               shape.rows, shape.cols,
               fj::summary_levels(shape.cols) > fj::kSummaryChunkLevels ? 2 : 1,
               fj::summary_levels(shape.cols) > fj::kSummaryChunkLevels ? "es" : "", us, gb_per_s);
  }
}
