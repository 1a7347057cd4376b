// Array summaries without a GPU: the summary kernel compiles cleanly with NVRTC, and the
// workspace a launch needs covers exactly the arrays it summarises (runtime/launch/summaries).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "array_summary.cuh"
#include "flexjit/flexjit.h"
#include "jit/nvrtc_compiler.h"
#include "launch/handles.h"
#include "launch/summaries.h"
#include "runtime/ptxas_report.h"

namespace {

// Arrays along kv (doc, by column; pos, by row), along q by row (qrow: one line per column),
// without a position (len), and one the mask `m` does not read (other).
constexpr const char* kSource =
    "param doc: int[b, kv]\n"
    "param pos: float[kv]\n"
    "param qrow: int[q, n]\n"
    "param len: int[b]\n"
    "param other: int[b, kv]\n"
    "mask m = q >= kv && doc[b, q] == doc[b, kv] && pos[kv] < 5.0 && qrow[q, 1] >= len[b]\n"
    "mask o = other[b, kv] > 0\n"
    "mask plain = q >= kv\n";

struct Fixture {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  Fixture() {
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    REQUIRE(fj_program_create(context, "summary.mask", kSource, std::string(kSource).size(),
                              &program) == FJ_SUCCESS);
  }
  ~Fixture() {
    fj_program_destroy(program);
    fj_context_destroy(context);
  }
  std::string error() const { return fj_context_last_error(context); }

  fj_kernel* kernel(const char* mask) {
    fj_kernel_desc desc{};
    desc.struct_size = sizeof(desc);
    desc.mask = mask;
    desc.head_dim = 64;
    desc.dtype = FJ_DTYPE_BF16;
    desc.page_size = 16;
    desc.arch = "sm_80";
    fj_kernel* created = nullptr;
    REQUIRE(fj_kernel_create(context, program, &desc, &created) == FJ_SUCCESS);
    return created;
  }
};

uint64_t aligned(uint64_t bytes) {
  return (bytes + flexjit::kSummaryAlignment - 1) / flexjit::kSummaryAlignment *
         flexjit::kSummaryAlignment;
}

uint64_t workspace_size(fj_kernel* kernel, const std::vector<fj_array>& arrays) {
  uint64_t bytes = ~uint64_t{0};
  REQUIRE(fj_attention_workspace_size(kernel, arrays.data(), static_cast<int32_t>(arrays.size()),
                                      &bytes) == FJ_SUCCESS);
  return bytes;
}

}  // namespace

TEST_CASE("the array summary kernel compiles for sm_80 and sm_90a without warnings", "[summary]") {
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    const flexjit::KernelSpec spec = flexjit::array_summary_spec(arch);
    CHECK(spec.name == (arch == "sm_80" ? "array_summary_sm80" : "array_summary_sm90a"));
    const flexjit::testing::PtxasReport report = flexjit::testing::compile_with_report(spec);
    INFO(spec.name << "\n" << report.log);
    CHECK(report.log.find("warning") == std::string::npos);
    CHECK(report.resources.registers > 0);
    CHECK(report.resources.registers <= 128);  // at least two CTAs of 256 threads per SM
    CHECK(report.resources.spill_store_bytes == 0);
    CHECK(report.resources.spill_load_bytes == 0);
    CHECK(report.resources.stack_frame_bytes == 0);
    // The chunk's keys and the 16 level-2 pairs.
    CHECK(report.resources.shared_bytes ==
          4 * (fj::kSummaryChunk + fj::kSummaryChunk / fj::kSummaryFanout) +
              8 * (fj::kSummaryThreads / fj::kSummaryFanout));
  }
}

TEST_CASE("the workspace covers the summaries of the arrays a kernel reads", "[summary]") {
  Fixture f;
  fj_kernel* kernel = f.kernel("m");
  static int32_t memory[16];

  // doc: 2 lines of 96 positions: 6 + 1 pairs each, 112 bytes. pos: one line of 100: 7 + 1
  // pairs, 64 bytes. qrow: 3 lines of 20: 2 + 1 pairs each, 72 bytes. Each rounded up to 256;
  // len has no position dimension and `other` is not read.
  std::vector<fj_array> arrays = {
      {memory, 2, 96, 100}, {memory, 100, 1, 1},     {memory, 20, 3, 3},
      {memory, 2, 1, 1},    {memory, 2, 5000, 5000},
  };
  CHECK(workspace_size(kernel, arrays) == 3 * 256);

  const auto expected = [](const std::vector<fj_array>& a) {
    return aligned(4 * fj::summary_words(a[0].rows, a[0].cols, fj::kSummaryCols)) +
           aligned(4 * fj::summary_words(a[1].rows, a[1].cols, fj::kSummaryRows)) +
           aligned(4 * fj::summary_words(a[2].rows, a[2].cols, fj::kSummaryRows));
  };
  for (const auto& [rows, cols] : {std::pair{64, 16384}, {1, 131072}, {3, 4097}, {7, 1}}) {
    INFO(rows << "x" << cols);
    arrays[0] = {memory, rows, cols, cols};
    arrays[1] = {memory, cols, 1, 1};
    arrays[2] = {memory, cols, rows, rows};
    CHECK(workspace_size(kernel, arrays) == expected(arrays));
  }
  // 64 x 16k document ids: 64 lines of 1024 + 64 + 4 + 1 pairs.
  arrays[1] = arrays[2] = {nullptr, 0, 0, 0};
  arrays[0] = {memory, 64, 16384, 16384};
  CHECK(workspace_size(kernel, arrays) == 64 * (1024 + 64 + 4 + 1) * 8);

  // Empty arrays are not summarised (data is not looked at).
  arrays[0] = {nullptr, 0, 16384, 16384};
  CHECK(workspace_size(kernel, arrays) == 0);

  // The layout the launch uses: one entry per summarised array, by slot, each aligned.
  arrays = {{memory, 2, 96, 100}, {memory, 100, 1, 1}, {memory, 20, 3, 3}, {}, {}};
  fj::ArrayParam shapes[fj::kMaxArrayParams] = {};
  for (size_t i = 0; i < arrays.size(); ++i) {
    shapes[i].rows = arrays[i].rows;
    shapes[i].cols = arrays[i].cols;
  }
  auto layout = flexjit::summary_layout(*kernel->entry, shapes);
  REQUIRE(layout.ok());
  REQUIRE(layout->entries.size() == 3);
  CHECK(layout->bytes == 3 * 256);
  for (int i = 0; i < 3; ++i) {
    CHECK(layout->entries[i].slot == i);
    CHECK(layout->entries[i].offset == 256u * i);
    CHECK(layout->entries[i].is_float == (i == 1));
  }
  CHECK(layout->entries[0].axis == fj::kSummaryCols);
  CHECK(layout->entries[1].axis == fj::kSummaryRows);
  CHECK(layout->entries[2].axis == fj::kSummaryRows);
  fj_kernel_destroy(kernel);

  // A kernel that reads no array needs none, and takes no arrays at all.
  kernel = f.kernel("plain");
  uint64_t bytes = 1;
  CHECK(fj_attention_workspace_size(kernel, nullptr, 0, &bytes) == FJ_SUCCESS);
  CHECK(bytes == 0);
  fj_kernel_destroy(kernel);
  // `o` reads only `other`.
  kernel = f.kernel("o");
  arrays = {{}, {}, {}, {}, {memory, 3, 17, 17}};
  CHECK(workspace_size(kernel, arrays) == 256);
  fj_kernel_destroy(kernel);
}

TEST_CASE("workspace size arguments are checked", "[summary]") {
  Fixture f;
  fj_kernel* kernel = f.kernel("m");
  static int32_t memory[16];
  std::vector<fj_array> arrays = {{memory, 2, 96, 96}, {}, {}, {}, {}};
  uint64_t bytes = 0;
  CHECK(fj_attention_workspace_size(nullptr, arrays.data(), 5, &bytes) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_attention_workspace_size(kernel, arrays.data(), 5, nullptr) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(f.error() == "bytes is null");
  CHECK(fj_attention_workspace_size(kernel, arrays.data(), 0, &bytes) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(f.error().find("num_arrays is 0 but the program declares 5") != std::string::npos);
  CHECK(fj_attention_workspace_size(kernel, nullptr, 5, &bytes) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(f.error() == "arrays is null");
  arrays[0] = {memory, 2, -96, 96};
  CHECK(fj_attention_workspace_size(kernel, arrays.data(), 5, &bytes) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(f.error().find("`doc`): negative shape 2x-96") != std::string::npos);
  arrays[0] = {};
  arrays[1] = {memory, 100, 2, 2};
  CHECK(fj_attention_workspace_size(kernel, arrays.data(), 5, &bytes) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(f.error().find("a 1-D array has cols 1") != std::string::npos);

  // The largest shapes: a summary of about 2^61 bytes is refused, never wrapped around.
  arrays[1] = {};
  arrays[0] = {memory, 0x7fffffff, 0x7fffffff, 0x7fffffff};
  bytes = 7;
  CHECK(fj_attention_workspace_size(kernel, arrays.data(), 5, &bytes) == FJ_ERROR_UNSUPPORTED);
  CHECK(f.error().find("too large to summarise") != std::string::npos);
  CHECK(bytes == 7);
  // Long lines or many lines that do fit are sized exactly.
  for (const auto& [rows, cols] : {std::pair{1, 0x7fffffff}, {0x7fffffff, 1}}) {
    arrays[0] = {memory, rows, cols, cols};
    CHECK(workspace_size(kernel, arrays) ==
          aligned(4 * fj::summary_words(rows, cols, fj::kSummaryCols)));
  }
  fj_kernel_destroy(kernel);
}
