// [gpu] tests of what the kernels do with two kinds of bad input that only device memory shows
// (issue 31): block-table entries outside the cache, which are absent keys (never read, masked
// as if the mask were false there, the first reported through bad_index), and a request longer
// than the launch's max_query_len, whose rows are zeroed and reported. The expected output is
// the float64 reference of a twin mask that drops the absent keys through an array (`keep`).
// Run on a machine with a CUDA GPU: build/bin/flexjit_tests_gpu "[bad-blocks]"
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "check/check_support.h"
#include "check/paged_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"
#include "launch/cuda_driver.h"
#include "launch/handles.h"

namespace {

using flexjit::DeviceBuffer;
using flexjit::PagedCheckConfig;
using flexjit::PagedCheckReport;
using flexjit::PagedLaunch;
using flexjit::testing::fixture;

// REQUIREs a C API call's success, with the context's message when it fails.
void require_success(fj_status status) {
  INFO(fj_context_last_error(fixture().context));
  REQUIRE(status == FJ_SUCCESS);
}

// Each mask and its twin without the keys whose keep[b, kv] is 0.
constexpr const char* kSource = R"(
param window: int
param keep: int[b, kv]
mask causal = q >= kv
mask sliding = causal && q - kv < window
mask causal_kept = causal && keep[b, kv] != 0
mask sliding_kept = sliding && keep[b, kv] != 0
)";

fj_program* program() {
  static fj_program* created = [] {
    fj_program* p = nullptr;
    require_success(
        fj_program_create(fixture().context, "bad_blocks", kSource, std::strlen(kSource), &p));
    return p;
  }();
  return created;
}

// A logical block of a request and the id its block-table entry gets.
struct BadEntry {
  int request;
  int block;
  int32_t id;  // or kNumBlocks
};
constexpr int32_t kNumBlocks = -1000;  // stands for the cache's block count (num_blocks)

struct Outputs {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  int32_t bad_index[4] = {0, 0, 0, 0};
};

// What a launch changes from the plain call.
struct LaunchOptions {
  PagedLaunch launch = PagedLaunch::Direct;
  std::vector<BadEntry> bad;
  bool pass_num_blocks = true;
  int32_t max_query_len = 0;  // > 0: instead of the batch's longest query
};

// Launches config.mask over `inputs` with the bad entries written into the block table.
Outputs run_gpu(const PagedCheckConfig& config, const flexjit::PagedInputs& inputs,
                const LaunchOptions& options, int32_t num_blocks) {
  const flexjit::HostPagedBatch& batch = inputs.batch;
  std::vector<fj_define> defines;
  const fj_kernel_desc desc = flexjit::kernel_desc(config, defines);
  fj_kernel* kernel = nullptr;
  require_success(fj_kernel_create(fixture().context, program(), &desc, &kernel));
  std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)> kernel_owner(kernel, fj_kernel_destroy);

  auto api_result = flexjit::cuda::driver_api();
  REQUIRE(api_result.ok());
  const flexjit::cuda::DriverApi& api = **api_result;
  REQUIRE(flexjit::cuda::current_or_primary_context().ok());

  std::vector<int32_t> table = batch.block_table;
  for (const BadEntry& e : options.bad) {
    table[e.request * batch.block_table_stride + e.block] = e.id == kNumBlocks ? num_blocks : e.id;
  }
  const int64_t rows = int64_t{batch.num_tokens()} * batch.num_heads;
  const size_t out_bytes = rows * batch.head_dim * 2;
  DeviceBuffer q(api), k(api), v(api), out(api), lse(api), qsl(api), seq_lens(api),
      table_buffer(api), bad_index(api), k_scale(api), v_scale(api);
  const size_t scale_bytes = inputs.k_scale.size() * sizeof(float);
  for (auto status : {
           q.upload(inputs.q_bits.data(), inputs.q_bits.size() * 2),
           k.upload(inputs.k_cache(), inputs.k_cache_bytes()),
           v.upload(inputs.v_cache(), inputs.v_cache_bytes()),
           scale_bytes > 0 ? k_scale.upload(inputs.k_scale.data(), scale_bytes)
                           : k_scale.fill(4, 0),
           scale_bytes > 0 ? v_scale.upload(inputs.v_scale.data(), scale_bytes)
                           : v_scale.fill(4, 0),
           out.fill(out_bytes, 0xff),
           lse.fill(rows * sizeof(float), 0xff),
           qsl.upload(batch.query_start_loc.data(), batch.query_start_loc.size() * 4),
           seq_lens.upload(batch.seq_lens.data(), batch.seq_lens.size() * 4),
           table_buffer.upload(table.data(), table.size() * 4),
           bad_index.fill(4 * sizeof(int32_t), 0),
       }) {
    INFO((status ? std::string() : status.error().message));
    REQUIRE(status.ok());
  }
  // The kernel's mask reads no array: none are passed.
  const std::vector<fj_array> no_arrays;
  fj_paged_attention_args args =
      flexjit::paged_args(batch, inputs, q.get(), out.get(), k.get(), v.get(), lse.get(), qsl.get(),
                          seq_lens.get(), table_buffer.get(), no_arrays);
  args.bad_index = static_cast<int32_t*>(bad_index.get());
  if (inputs.kv_fp8()) {
    args.k_scale = static_cast<const float*>(k_scale.get());
    args.v_scale = static_cast<const float*>(v_scale.get());
  }
  args.num_blocks = options.pass_num_blocks ? num_blocks : 0;
  if (options.max_query_len > 0) args.max_query_len = options.max_query_len;

  std::unique_ptr<fj_plan, decltype(&fj_plan_destroy)> plan(nullptr, fj_plan_destroy);
  if (config.contiguous) {
    fj_varlen_attention_args varlen = flexjit::varlen_args(args, batch);
    require_success(fj_varlen_attention(kernel, &varlen, nullptr));
  } else if (options.launch == PagedLaunch::Direct) {
    require_success(fj_paged_attention(kernel, &args, nullptr));
  } else {
    const fj_plan_shape shape = flexjit::plan_shape_of(args);
    fj_plan* created = nullptr;
    require_success(fj_plan_create(kernel, &shape, &created));
    plan.reset(created);
    require_success(fj_plan_update(plan.get(), batch.query_start_loc.data(), batch.seq_lens.data(),
                                   batch.num_reqs(), batch.max_blocks_per_req, nullptr));
    require_success(fj_plan_run(plan.get(), &args, nullptr));
  }
  REQUIRE(api.cuCtxSynchronize() == CUDA_SUCCESS);
  Outputs result;
  result.out.resize(rows * batch.head_dim);
  result.lse.resize(rows);
  REQUIRE(out.download(result.out.data(), out_bytes).ok());
  REQUIRE(lse.download(result.lse.data(), rows * sizeof(float)).ok());
  REQUIRE(bad_index.download(result.bad_index, sizeof result.bad_index).ok());
  return result;
}

// config.mask's twin over `batch`, without the keys of the bad entries' blocks.
flexjit::ReferenceOutput reference_without(const PagedCheckConfig& config,
                                           const flexjit::HostPagedBatch& batch,
                                           const std::vector<BadEntry>& bad) {
  flexjit::HostPagedBatch kept = batch;
  int max_seq_len = 1;
  for (const int32_t len : batch.seq_lens)
    max_seq_len = std::max(max_seq_len, len);
  flexjit::HostArray keep;
  keep.rows = batch.num_reqs();
  keep.cols = max_seq_len;
  keep.bits.assign(int64_t{keep.rows} * keep.cols, 1);
  for (const BadEntry& e : bad) {
    for (int kv = e.block * batch.page_size;
         kv < std::min((e.block + 1) * batch.page_size, max_seq_len); ++kv) {
      keep.bits[int64_t{e.request} * keep.cols + kv] = 0;
    }
  }
  kept.arrays = {keep};
  flexjit::VariantSelection selection;
  selection.name = config.mask + "_kept";
  auto variant = flexjit::program_variant(*program(), selection);
  REQUIRE(variant.ok());
  return flexjit::reference_paged_attention(*variant, kept);
}

// The launch's debug word, for a failing check's message.
std::string describe(const Outputs& got) {
  return fmt::format("bad_index {{{}, {}, {}, {}}}", got.bad_index[0], got.bad_index[1],
                     got.bad_index[2], got.bad_index[3]);
}

PagedCheckConfig base_config(const std::string& mask, int head_dim, int page_size) {
  PagedCheckConfig config;
  config.mask = mask;
  config.head_dim = head_dim;
  config.page_size = page_size;
  config.num_heads = 8;
  config.num_kv_heads = 2;
  config.layout = flexjit::KvLayout::NHD;
  config.params = {0};  // window
  // The twin's array; make_paged_inputs only carries it (the GPU kernel reads none).
  config.arrays = {flexjit::HostArray{}};
  config.seed = 31 + head_dim + page_size;
  return config;
}

// The cache's block count: the K buffer holds whole blocks.
int32_t cache_blocks(const flexjit::PagedInputs& inputs) {
  const int64_t elements =
      static_cast<int64_t>(inputs.k_cache_bytes()) / inputs.cache_element_bytes();
  return static_cast<int32_t>(elements / inputs.batch.k.stride_block);
}

PagedCheckReport compare(const PagedCheckConfig& config, const flexjit::HostPagedBatch& batch,
                         const flexjit::ReferenceOutput& reference, const Outputs& got) {
  PagedCheckReport report;
  flexjit::compare_paged_outputs(config, batch, reference, got.out, got.lse, report);
  INFO(fmt::format("rel err {:.3e}, bad {}, empty rows wrong {}, lse err {:.3e}",
                   report.relative_error, report.bad_outputs, report.empty_rows_wrong,
                   report.lse_max_abs_error));
  CHECK(report.bad_outputs == 0);
  CHECK(report.empty_rows_wrong == 0);
  CHECK(report.relative_error <= flexjit::relative_error_tolerance(config.dtype));
  CHECK(report.lse_max_abs_error <= 2e-2);
  return report;
}

// Runs config with the bad entries and checks the output against the reference without their
// keys, and the report against `reported` (the entries a kernel may report first; empty: none).
void check_bad_entries(const PagedCheckConfig& config, const LaunchOptions& options,
                       const std::vector<BadEntry>& reported) {
  auto inputs = flexjit::make_paged_inputs(config);
  REQUIRE(inputs.ok());
  const int32_t num_blocks = cache_blocks(*inputs);
  const Outputs got = run_gpu(config, *inputs, options, num_blocks);
  compare(config, inputs->batch, reference_without(config, inputs->batch, options.bad), got);
  INFO(describe(got));
  if (reported.empty()) {
    CHECK(got.bad_index[0] == 0);
    return;
  }
  CHECK(got.bad_index[0] == 2);
  bool listed = false;
  for (const BadEntry& e : reported) {
    const int32_t id = e.id == kNumBlocks ? num_blocks : e.id;
    listed = listed || (got.bad_index[1] == e.request && got.bad_index[2] == e.block &&
                        got.bad_index[3] == id);
  }
  CHECK(listed);
}

}  // namespace

// Requests: 0 a decode-sized query after 700 cached keys, 1 a chunk of 7 after 50, 2 a prefill
// of 300, 3 a query of 129 after 200. Bad entries in the first block, in the middle and in the
// partial last block, with ids -1, num_blocks and INT_MAX.
TEST_CASE("GPU prefill treats block ids outside the cache as absent keys", "[gpu][bad-blocks]") {
  const int head_dim = GENERATE(64, 80, 96, 128, 256);  // wgmma at 64/128/256, mma.sync else
  const int page_size = GENERATE(16, 64);
  const std::string mask = GENERATE("causal", "sliding");
  PagedCheckConfig config = base_config(mask, head_dim, page_size);
  config.query_lens = {1, 7, 300, 129};
  config.context_lens = {700, 50, 0, 200};
  config.params = {400};  // a window that sees every bad block below
  INFO(fmt::format("{} hd {} page {}", mask, head_dim, page_size));

  const int last_of_2 = (300 - 1) / page_size;  // request 2's partial last block
  const std::vector<std::vector<BadEntry>> cases = {
      {{2, 0, -1}},
      {{2, last_of_2 / 2, kNumBlocks}},
      {{2, last_of_2, INT_MAX}},
      {{3, 0, INT_MIN}, {3, 1, kNumBlocks}, {0, (700 / page_size) / 2, -7}},
  };
  for (const auto& bad : cases) {
    LaunchOptions options;
    options.bad = bad;
    check_bad_entries(config, options, bad);
  }
}

// An fp8 cache: its copies (the mma.sync kernel's, the wgmma producer's e4m3 ring, the decode
// kernel's stage that K's and V's fragments are read from) skip the bad pages alike.
TEST_CASE("fp8 caches treat block ids outside the cache as absent keys", "[gpu][bad-blocks]") {
  const int head_dim = GENERATE(64, 96, 128);
  const int page_size = GENERATE(16, 64);
  const PagedLaunch launch = GENERATE(PagedLaunch::Direct, PagedLaunch::Planned);
  PagedCheckConfig config = base_config("causal", head_dim, page_size);
  config.kv_fp8 = true;
  config.query_lens = {1, 7, 300, 1};
  config.context_lens = {3000, 50, 0, 200};
  INFO(fmt::format("fp8 hd {} page {} {}", head_dim, page_size,
                   launch == PagedLaunch::Direct ? "direct" : "planned"));
  const int last_of_2 = (300 - 1) / page_size;
  const std::vector<std::vector<BadEntry>> cases = {
      {{0, 1, -1}},
      {{2, last_of_2, INT_MAX}, {3, 0, kNumBlocks}},
  };
  for (const auto& bad : cases) {
    LaunchOptions options;
    options.launch = launch;
    options.bad = bad;
    check_bad_entries(config, options, bad);
  }
}

TEST_CASE("in-range block tables are unchanged by the block-id check", "[gpu][bad-blocks]") {
  const int head_dim = GENERATE(64, 96, 128);
  const bool pass_num_blocks = GENERATE(true, false);
  PagedCheckConfig config = base_config("causal", head_dim, 16);
  config.query_lens = {1, 7, 300, 129};
  config.context_lens = {700, 50, 0, 200};
  LaunchOptions options;
  options.pass_num_blocks = pass_num_blocks;
  check_bad_entries(config, options, {});
  options.launch = PagedLaunch::Planned;
  check_bad_entries(config, options, {});
}

// A block outside every row's window is never visited: its id is never read nor reported, and
// the output is the plain mask's.
TEST_CASE("a bad block that no row sees is not reported", "[gpu][bad-blocks]") {
  PagedCheckConfig config = base_config("sliding", 128, 16);
  config.query_lens = {64};
  config.context_lens = {2000};
  config.params = {100};
  LaunchOptions options;
  options.bad = {{0, 3, INT_MAX}};
  check_bad_entries(config, options, {});
}

// Planned runs: decodes (4 packed rows: the split-KV decode kernel, split when long) and a
// prefill chunk (the persistent prefill grid) in one plan.
TEST_CASE("planned runs treat block ids outside the cache as absent keys", "[gpu][bad-blocks]") {
  const int head_dim = GENERATE(64, 96, 128, 256);
  const int page_size = GENERATE(16, 64);
  PagedCheckConfig config = base_config("causal", head_dim, page_size);
  config.query_lens = {1, 1, 200, 1};
  config.context_lens = {20000, 300, 100, 40};
  INFO(fmt::format("hd {} page {}", head_dim, page_size));
  const int last_of_1 = 300 / page_size;  // request 1's last block (301 keys)
  const std::vector<std::vector<BadEntry>> cases = {
      {{0, 0, -1}},                   // a long, split decode: its first block
      {{0, 150, kNumBlocks}},         // the middle of a split
      {{1, last_of_1, INT_MAX}},      // a decode's partial last block
      {{2, 2, -5}, {3, 0, INT_MAX}},  // the prefill chunk's context and a short decode
  };
  for (const auto& bad : cases) {
    LaunchOptions options;
    options.launch = PagedLaunch::Planned;
    options.bad = bad;
    check_bad_entries(config, options, bad);
  }
}

// A max_query_len below a request's query rows: the GPU cannot see the lengths before the
// launch, so the kernel zeroes that request's rows (out 0, lse -inf) and reports it; the other
// requests are computed as usual.
TEST_CASE("a request longer than max_query_len is zeroed and reported", "[gpu][bad-blocks]") {
  const int head_dim = GENERATE(64, 96, 128, 256);
  const bool contiguous = GENERATE(false, true);
  PagedCheckConfig config = base_config("causal", head_dim, 16);
  config.contiguous = contiguous;
  config.query_lens = {300, 20, 129, 700};
  config.context_lens = contiguous ? std::vector<int>{0, 0, 0, 0} : std::vector<int>{0, 50, 9, 3};
  const int32_t max_query_len = 150;  // requests 0 and 3 are longer
  INFO(fmt::format("hd {} {}", head_dim, contiguous ? "encoder" : "paged"));

  auto inputs = flexjit::make_paged_inputs(config);
  REQUIRE(inputs.ok());
  const flexjit::HostPagedBatch& batch = inputs->batch;
  LaunchOptions options;
  options.max_query_len = max_query_len;
  options.pass_num_blocks = !contiguous;
  const Outputs got = run_gpu(config, *inputs, options, contiguous ? 0 : cache_blocks(*inputs));

  flexjit::ReferenceOutput expected = reference_without(config, batch, {});
  for (int r = 0; r < batch.num_reqs(); ++r) {
    if (config.query_lens[r] <= max_query_len) continue;
    for (int64_t row = int64_t{batch.query_start_loc[r]} * batch.num_heads;
         row < int64_t{batch.query_start_loc[r + 1]} * batch.num_heads; ++row) {
      expected.lse[row] = -std::numeric_limits<double>::infinity();
      std::fill_n(expected.out.begin() + row * batch.head_dim, batch.head_dim, 0.0);
    }
  }
  compare(config, batch, expected, got);
  INFO(describe(got));
  CHECK(got.bad_index[0] == 3);
  CHECK((got.bad_index[1] == 0 || got.bad_index[1] == 3));
  CHECK(got.bad_index[2] == config.query_lens[got.bad_index[1] == 3 ? 3 : 0]);
  CHECK(got.bad_index[3] == max_query_len);
}

// Both kinds at once: one report, of either kind, whole.
TEST_CASE("the first report of either kind wins", "[gpu][bad-blocks]") {
  PagedCheckConfig config = base_config("causal", 128, 16);
  config.query_lens = {300, 7};
  config.context_lens = {0, 50};
  auto inputs = flexjit::make_paged_inputs(config);
  REQUIRE(inputs.ok());
  LaunchOptions options;
  options.max_query_len = 100;  // request 0 is zeroed
  options.bad = {{1, 0, -1}};   // request 1 reads an absent block
  const Outputs got = run_gpu(config, *inputs, options, cache_blocks(*inputs));
  INFO(describe(got));
  const bool query = got.bad_index[0] == 3 && got.bad_index[1] == 0 && got.bad_index[2] == 300 &&
                     got.bad_index[3] == 100;
  const bool block = got.bad_index[0] == 2 && got.bad_index[1] == 1 && got.bad_index[2] == 0 &&
                     got.bad_index[3] == -1;
  CHECK((query || block));
}
