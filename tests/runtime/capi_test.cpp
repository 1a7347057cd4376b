// The C API without a GPU: argument checking, error messages, and NVRTC compiles of every
// standard kernel for sm_80 and sm_90a (NVRTC needs no GPU).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flexjit/flexjit.h"
#include "flexjit/internal/supported.h"
#include "launch/cuda_driver.h"

namespace {

const std::string kStandard = FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask";

struct Context {
  fj_context* context = nullptr;
  Context() { REQUIRE(fj_context_create(&context) == FJ_SUCCESS); }
  ~Context() { fj_context_destroy(context); }
  std::string error() const { return fj_context_last_error(context); }
};

fj_program* load_standard(const Context& c) {
  fj_program* program = nullptr;
  REQUIRE(fj_program_create_from_file(c.context, kStandard.c_str(), &program) == FJ_SUCCESS);
  return program;
}

fj_kernel_desc make_desc(const char* mask, const char* arch) {
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = mask;
  desc.head_dim = 128;
  desc.dtype = FJ_DTYPE_BF16;
  desc.page_size = 16;
  desc.arch = arch;
  return desc;
}

// Arguments every check passes (one request of 4 tokens, 8 heads over 2 kv heads, head dim
// 128, page 16) over host memory: the driver must never see them.
fj_paged_attention_args valid_args(char* memory, int32_t* window) {
  fj_paged_attention_args args{};
  args.struct_size = sizeof(args);
  args.q = args.k_cache = args.v_cache = memory;
  args.out = memory;
  args.query_start_loc = args.seq_lens = args.block_table = reinterpret_cast<int32_t*>(memory);
  args.num_tokens = 4;
  args.num_reqs = 1;
  args.num_heads = 8;
  args.num_kv_heads = 2;
  args.max_query_len = 4;
  args.max_blocks_per_req = 2;
  args.q_stride_token = args.out_stride_token = 8 * 128;
  args.q_stride_head = args.out_stride_head = 128;
  args.k_stride_block = args.v_stride_block = 16 * 2 * 128;
  args.k_stride_slot = args.v_stride_slot = 2 * 128;
  args.k_stride_head = args.v_stride_head = 128;
  args.block_table_stride = 2;
  args.params = window;
  args.num_params = 1;
  return args;
}

// A launch with `bad` fails with FJ_ERROR_INVALID_ARGUMENT and a message naming `fragment`.
void expect_rejected(const Context& c, fj_kernel* kernel, const fj_paged_attention_args& bad,
                     const char* fragment) {
  INFO(fragment);
  CHECK(fj_paged_attention(kernel, &bad, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find(fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("status strings and version") {
  CHECK(std::string(fj_status_string(FJ_SUCCESS)).rfind("FJ_SUCCESS", 0) == 0);
  CHECK(std::string(fj_status_string(FJ_ERROR_COMPILE)).rfind("FJ_ERROR_COMPILE", 0) == 0);
  CHECK(std::string(fj_status_string(static_cast<fj_status>(99))) == "unknown fj_status value");
  CHECK(fj_runtime_version() == FJ_VERSION);
}

TEST_CASE("null pointers are rejected with a status") {
  CHECK(fj_context_create(nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_context_destroy(nullptr) == FJ_SUCCESS);
  CHECK(std::string(fj_context_last_error(nullptr)) == "context is null");
  Context c;
  fj_program* program = nullptr;
  CHECK(fj_program_create(nullptr, "x", "mask a = true", 13, &program) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_program_create(c.context, "x", nullptr, 5, &program) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error() == "source is null");
  CHECK(fj_program_create(c.context, "x", "mask a = q >= kv", 16, nullptr) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_program_create_from_file(c.context, nullptr, &program) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(program == nullptr);
  fj_kernel* kernel = nullptr;
  CHECK(fj_kernel_create(c.context, nullptr, nullptr, &kernel) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_paged_attention(nullptr, nullptr, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_kernel_name(nullptr, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  int32_t slot = 0;
  CHECK(fj_program_param_slot(nullptr, "window", &slot) == FJ_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("a malformed mask source reports every error with positions") {
  Context c;
  const std::string source = "mask a = q >= kvv\nmask b = q + 1\n";
  fj_program* program = nullptr;
  CHECK(fj_program_create(c.context, "bad.mask", source.data(), source.size(), &program) ==
        FJ_ERROR_INVALID_SOURCE);
  CHECK(program == nullptr);
  const std::string error = c.error();
  CHECK(error.find("bad.mask:1:15: error:") != std::string::npos);
  CHECK(error.find("bad.mask:2:") != std::string::npos);
  CHECK(error.find('^') != std::string::npos);
}

TEST_CASE("a missing file is NOT_FOUND") {
  Context c;
  fj_program* program = nullptr;
  CHECK(fj_program_create_from_file(c.context, "/nonexistent/x.mask", &program) ==
        FJ_ERROR_NOT_FOUND);
  CHECK(c.error().find("/nonexistent/x.mask") != std::string::npos);
}

TEST_CASE("a success clears the calling thread's message and only its own") {
  // A success skips the clearing while no thread of the context has a message: the count it
  // reads must follow every message set and cleared, on every thread.
  Context c;
  fj_program* program = load_standard(c);
  int32_t slot = -1;
  const auto fail = [&] {
    REQUIRE(fj_program_param_slot(program, "nope", &slot) == FJ_ERROR_NOT_FOUND);
  };
  const auto succeed = [&] { REQUIRE(fj_program_param_slot(program, "window", &slot) == 0); };
  const auto in_thread = [](const auto& body) { std::thread(body).join(); };
  CHECK(c.error().empty());
  fail();
  std::string other_before, other_after;
  in_thread([&] {
    other_before = c.error();  // another thread's message is not this one's
    fail();
    succeed();
    other_after = c.error();
  });
  CHECK(other_before.empty());
  CHECK(other_after.empty());
  CHECK(c.error() == "no scalar runtime parameter 'nope'");  // kept by the other's success
  succeed();
  CHECK(c.error().empty());
  fail();
  fail();  // a second message on the same thread replaces the first
  succeed();
  CHECK(c.error().empty());
  in_thread([&] {
    fail();
    other_before = c.error();
  });
  succeed();  // with another thread's message outstanding
  CHECK(c.error().empty());
  CHECK(other_before == "no scalar runtime parameter 'nope'");
  fj_program_destroy(program);
}

TEST_CASE("runtime parameters are found by name") {
  Context c;
  fj_program* program = load_standard(c);
  int32_t slot = -1;
  int32_t count = -1;
  CHECK(fj_program_param_slot(program, "window", &slot) == FJ_SUCCESS);
  CHECK(slot == 0);
  CHECK(fj_program_param_count(program, &count) == FJ_SUCCESS);
  CHECK(count == 1);
  CHECK(fj_program_param_slot(program, "nope", &slot) == FJ_ERROR_NOT_FOUND);
  CHECK(c.error() == "no scalar runtime parameter 'nope'");
  fj_program_destroy(program);
}

TEST_CASE("kernel descriptions are validated") {
  Context c;
  fj_program* program = load_standard(c);
  fj_kernel* kernel = nullptr;

  fj_kernel_desc desc = make_desc("nosuchmask", "sm_90a");
  CHECK(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_ERROR_NOT_FOUND);
  CHECK(c.error().find("nosuchmask") != std::string::npos);

  desc = make_desc("causal", "sm_90a");
  desc.head_dim = 72;
  CHECK(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_ERROR_UNSUPPORTED);
  CHECK(c.error().find("head_dim 72") != std::string::npos);

  desc = make_desc("causal", "sm_90a");
  desc.page_size = 24;
  CHECK(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_ERROR_UNSUPPORTED);

  desc = make_desc("causal", "sm_90a");
  desc.dtype = static_cast<fj_dtype>(7);
  CHECK(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_ERROR_UNSUPPORTED);

  desc = make_desc("causal", "compute_90; rm -rf");
  CHECK(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_ERROR_UNSUPPORTED);

  desc = make_desc("causal", "sm_90a");
  desc.struct_size = 4;
  CHECK(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(kernel == nullptr);
  fj_program_destroy(program);
}

TEST_CASE("every standard kernel compiles with NVRTC for sm_80 and sm_90a") {
  Context c;
  fj_program* program = load_standard(c);
  struct Job {
    fj_kernel_desc desc;
    std::string expected_name;
    fj_status status = FJ_ERROR_INTERNAL;
    std::string name;
  };
  std::vector<Job> jobs;
  // Every mask and variant at head dims 64 and 128; the other head dims with causal only
  // (they exercise the template, not the variant).
  const std::vector<std::string> names = {
      "causal",        "bidirectional", "sliding",       "sliding_sym", "prefix_lm",
      "prefix_ranges", "rswa",          "chunked",       "document",    "causal_softcap",
      "causal_alibi",  "gemma2_local",  "gemma2_global", "llama4_local"};
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const std::string& name : names) {
      const char* mask = name.c_str();
      for (const flexjit::supported::Dtype& supported_dtype : flexjit::supported::kDtypes) {
        const fj_dtype dtype = supported_dtype.dtype;
        for (int head_dim : flexjit::supported::kHeadDims) {
          if (name != "causal" && head_dim != 64 && head_dim != 128) continue;
          for (int page_size : {16, 0}) {
            Job job;
            job.desc = make_desc(mask, arch);
            job.desc.dtype = dtype;
            job.desc.head_dim = head_dim;
            job.desc.page_size = page_size;
            const std::string shape = std::string(mask) + "_hd" + std::to_string(head_dim) + "_" +
                                      (dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16");
            const std::string arch_name = arch == std::string("sm_80") ? "sm80" : "sm90a";
            job.expected_name = page_size == 0 ? "encoder_" + shape + "_" + arch_name
                                               : "prefill_" + shape + "_page16_" + arch_name;
            jobs.push_back(job);
          }
        }
      }
    }
  }
  // Kernel creation is thread-safe: compile on every core.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      fj_kernel* kernel = nullptr;
      jobs[i].status = fj_kernel_create(c.context, program, &jobs[i].desc, &kernel);
      if (jobs[i].status != FJ_SUCCESS) {
        jobs[i].name = c.error();
        continue;
      }
      const char* name = nullptr;
      fj_kernel_name(kernel, &name);
      jobs[i].name = name;
      fj_kernel_destroy(kernel);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < std::max(2u, std::thread::hardware_concurrency()); ++i) {
    threads.emplace_back(work);
  }
  work();
  for (auto& thread : threads)
    thread.join();
  for (const Job& job : jobs) {
    INFO(job.expected_name << ": " << job.name);
    CHECK(job.status == FJ_SUCCESS);
    CHECK(job.name == job.expected_name);
  }
  fj_program_destroy(program);
}

TEST_CASE("launch arguments are checked before the driver is touched") {
  Context c;
  fj_program* program = load_standard(c);
  fj_kernel_desc desc = make_desc("causal", "sm_90a");
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_SUCCESS);

  alignas(16) static char memory[4096];
  int32_t window = 8;
  fj_paged_attention_args args = valid_args(memory, &window);
  const fj_array no_arrays[4] = {};
  args.arrays = no_arrays;
  args.num_arrays = 4;

  const auto expect_invalid = [&](const fj_paged_attention_args& bad, const char* fragment) {
    expect_rejected(c, kernel, bad, fragment);
  };
  fj_paged_attention_args bad = args;
  bad.q = nullptr;
  expect_invalid(bad, "q is null");
  bad = args;
  bad.num_kv_heads = 3;
  expect_invalid(bad, "num_kv_heads");
  bad = args;
  bad.k_stride_slot = 12;
  expect_invalid(bad, "k_stride_slot");
  bad = args;
  bad.out = memory + 2;
  expect_invalid(bad, "out is not 16-byte aligned");
  bad = args;
  bad.num_params = 0;
  expect_invalid(bad, "num_params");
  bad = args;
  bad.max_query_len = 5;
  expect_invalid(bad, "max_query_len");
  bad = args;
  bad.block_table_stride = 1;
  expect_invalid(bad, "block_table_stride");
  bad = args;
  bad.struct_size = 8;
  expect_invalid(bad, "struct_size");

  // Valid arguments on a machine without a driver fail cleanly, naming the cause (with a
  // driver these host pointers must not be launched on).
  if (!flexjit::cuda::driver_api()) {
    CHECK(fj_paged_attention(kernel, &args, nullptr) == FJ_ERROR_CUDA);
    CHECK(c.error().find("libcuda") != std::string::npos);
  }
  fj_kernel_destroy(kernel);
  fj_program_destroy(program);
}

TEST_CASE("array parameters are checked against what the kernel reads") {
  Context c;
  fj_program* program = load_standard(c);
  fj_kernel_desc desc = make_desc("prefix_lm", "sm_90a");
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_SUCCESS);

  alignas(16) static char memory[4096];
  int32_t window = 8;
  fj_paged_attention_args args = valid_args(memory, &window);
  args.num_reqs = 3;
  args.max_query_len = 2;
  // Slot 0 is prefix_len: int[b]; the others (ranges, doc, slopes) are not read by prefix_lm.
  fj_array arrays[4] = {};
  arrays[0] = {memory, 3, 1, 1};
  args.arrays = arrays;
  args.num_arrays = 4;

  const auto expect_invalid = [&](const fj_paged_attention_args& bad, const char* fragment) {
    expect_rejected(c, kernel, bad, fragment);
  };
  fj_paged_attention_args bad = args;
  bad.num_arrays = 0;
  expect_invalid(bad, "num_arrays is 0 but the program declares 4 array parameters");
  bad = args;
  bad.arrays = nullptr;
  expect_invalid(bad, "arrays is null");
  fj_array short_arrays[4] = {};
  short_arrays[0] = {memory, 2, 1, 1};
  bad = args;
  bad.arrays = short_arrays;
  expect_invalid(bad, "dimension 0 (`b`) has 2 entries, fewer than the 3");
  fj_array null_data[4] = {};
  null_data[0] = {nullptr, 3, 1, 1};
  bad.arrays = null_data;
  expect_invalid(bad, "`prefix_len`): data is null");
  fj_array wide[4] = {};
  wide[0] = {memory, 3, 2, 2};
  bad.arrays = wide;
  expect_invalid(bad, "a 1-D array has cols 1");
  fj_array misaligned[4] = {};
  misaligned[0] = {memory + 2, 3, 1, 1};
  bad.arrays = misaligned;
  expect_invalid(bad, "not 4-byte aligned");
  bad = args;
  bad.bad_index = reinterpret_cast<int32_t*>(memory + 2);
  expect_invalid(bad, "bad_index is not 4-byte aligned");
  if (!flexjit::cuda::driver_api()) {
    CHECK(fj_paged_attention(kernel, &args, nullptr) == FJ_ERROR_CUDA);
  }
  fj_kernel_destroy(kernel);
  fj_program_destroy(program);
}

TEST_CASE("a launch's workspace is checked, and structs from 0.2 are still accepted") {
  Context c;
  fj_program* program = load_standard(c);
  fj_kernel_desc desc = make_desc("document", "sm_90a");
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(c.context, program, &desc, &kernel) == FJ_SUCCESS);

  alignas(256) static char memory[4096];
  int32_t window = 8;
  fj_paged_attention_args args = valid_args(memory, &window);
  // Slot 2 is doc: int[b, kv], summarised along kv: 1 line of 20 positions, 2 + 1 pairs.
  fj_array arrays[4] = {};
  arrays[2] = {memory, 1, 20, 24};
  args.arrays = arrays;
  args.num_arrays = 4;
  uint64_t needed = 0;
  REQUIRE(fj_attention_workspace_size(kernel, arrays, 4, &needed) == FJ_SUCCESS);
  CHECK(needed == 256);
  args.workspace = memory;
  args.workspace_bytes = needed;

  fj_paged_attention_args bad = args;
  bad.workspace_bytes = needed - 1;
  expect_rejected(c, kernel, bad,
                  "workspace_bytes (255) is smaller than the 256 bytes this launch needs");
  bad = args;
  bad.workspace = memory + 8;
  expect_rejected(c, kernel, bad, "workspace is not 16-byte aligned");
  bad = args;
  bad.workspace = nullptr;
  expect_rejected(c, kernel, bad, "workspace is null but workspace_bytes is 256");
  // 0.2's struct ends before the workspace fields; anything shorter is refused.
  bad = args;
  bad.struct_size = offsetof(fj_paged_attention_args, workspace) - 8;
  expect_rejected(c, kernel, bad, "struct_size");
  // A 0.2 struct's missing fields read as zero: the garbage past its end is not a workspace.
  bad = args;
  bad.struct_size = offsetof(fj_paged_attention_args, workspace);
  bad.workspace = memory + 8;
  bad.workspace_bytes = 1;
  if (!flexjit::cuda::driver_api()) {
    CHECK(fj_paged_attention(kernel, &bad, nullptr) == FJ_ERROR_CUDA);
    CHECK(c.error().find("libcuda") != std::string::npos);
    CHECK(fj_paged_attention(kernel, &args, nullptr) == FJ_ERROR_CUDA);
  }

  // The encoder call reads the same fields.
  fj_kernel_desc encoder_desc = make_desc("document", "sm_90a");
  encoder_desc.page_size = 0;
  fj_kernel* encoder = nullptr;
  REQUIRE(fj_kernel_create(c.context, program, &encoder_desc, &encoder) == FJ_SUCCESS);
  fj_varlen_attention_args varlen{};
  varlen.struct_size = sizeof(varlen);
  varlen.q = varlen.k = varlen.v = memory;
  varlen.out = memory;
  varlen.cu_seqlens = reinterpret_cast<int32_t*>(memory);
  varlen.num_tokens = 4;
  varlen.num_seqs = 1;
  varlen.num_heads = 8;
  varlen.num_kv_heads = 2;
  varlen.max_seq_len = 4;
  varlen.q_stride_token = varlen.out_stride_token = 8 * 128;
  varlen.k_stride_token = varlen.v_stride_token = 2 * 128;
  varlen.q_stride_head = varlen.k_stride_head = varlen.v_stride_head = varlen.out_stride_head = 128;
  varlen.params = &window;
  varlen.num_params = 1;
  varlen.arrays = arrays;
  varlen.num_arrays = 4;
  varlen.workspace = memory;
  varlen.workspace_bytes = 100;
  CHECK(fj_varlen_attention(encoder, &varlen, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find("workspace_bytes (100) is smaller than the 256 bytes") != std::string::npos);
  varlen.struct_size = offsetof(fj_varlen_attention_args, workspace) - 1;
  CHECK(fj_varlen_attention(encoder, &varlen, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(c.error().find("struct_size") != std::string::npos);
  varlen.struct_size = offsetof(fj_varlen_attention_args, workspace);
  if (!flexjit::cuda::driver_api()) {
    CHECK(fj_varlen_attention(encoder, &varlen, nullptr) == FJ_ERROR_CUDA);
  }
  fj_kernel_destroy(encoder);

  // A mask that reads no array needs no workspace: 0 bytes will do.
  fj_kernel* causal = nullptr;
  desc = make_desc("causal", "sm_90a");
  REQUIRE(fj_kernel_create(c.context, program, &desc, &causal) == FJ_SUCCESS);
  bad = args;
  bad.workspace_bytes = 0;
  if (!flexjit::cuda::driver_api()) {
    CHECK(fj_paged_attention(causal, &bad, nullptr) == FJ_ERROR_CUDA);
  }
  fj_kernel_destroy(causal);
  fj_kernel_destroy(kernel);
  fj_program_destroy(program);
}

TEST_CASE("scores, variants and defines select the kernel") {
  Context c;
  fj_program* program = load_standard(c);
  const auto name_of = [&](fj_kernel_desc desc) -> std::string {
    fj_kernel* kernel = nullptr;
    if (fj_kernel_create(c.context, program, &desc, &kernel) != FJ_SUCCESS) return "error";
    const char* name = nullptr;
    fj_kernel_name(kernel, &name);
    std::string result = name;
    fj_kernel_destroy(kernel);
    return result;
  };
  fj_kernel_desc desc = make_desc("sliding", "sm_90a");
  desc.score = "alibi";
  CHECK(name_of(desc) == "prefill_sliding_alibi_hd128_bf16_page16_sm90a");
  desc = make_desc("gemma2_local", "sm_90a");
  CHECK(name_of(desc) == "prefill_gemma2_local_hd128_bf16_page16_sm90a");

  desc.score = "alibi";
  CHECK(name_of(desc) == "error");
  CHECK(c.error().find("`gemma2_local` is a variant, which names its own score") !=
        std::string::npos);
  desc = make_desc("causal", "sm_90a");
  desc.score = "causal";
  CHECK(name_of(desc) == "error");
  CHECK(c.error().find("`causal` is a mask, not a score") != std::string::npos);

  const fj_define good[] = {{"cap", "30"}, {"chunk", "4096"}};
  desc = make_desc("causal_softcap", "sm_90a");
  desc.defines = good;
  desc.num_defines = 2;
  CHECK(name_of(desc) == "prefill_causal_softcap_cap30p0_chunk4096_hd128_bf16_page16_sm90a");
  const fj_define fractional[] = {{"cap", "-2.5"}};
  desc.defines = fractional;
  desc.num_defines = 1;
  CHECK(name_of(desc) == "prefill_causal_softcap_capm2p5_hd128_bf16_page16_sm90a");
  const fj_define unknown[] = {{"kap", "30"}};
  desc.defines = unknown;
  desc.num_defines = 1;
  CHECK(name_of(desc) == "error");
  CHECK(c.error().find("no const named `kap`") != std::string::npos);
  const fj_define not_int[] = {{"chunk", "1.5"}};
  desc.defines = not_int;
  CHECK(name_of(desc) == "error");
  CHECK(c.error().find("`chunk` is a int const; expected a decimal int32") != std::string::npos);
  const fj_define control[] = {{"cap", "3\x1f"}};
  desc.defines = control;
  CHECK(name_of(desc) == "error");
  CHECK(c.error().find("control character") != std::string::npos);
  desc.defines = nullptr;
  CHECK(name_of(desc) == "error");
  CHECK(c.error() == "desc->defines is null");
  fj_program_destroy(program);
}

TEST_CASE("parameter info names every scalar and array") {
  Context c;
  fj_program* program = load_standard(c);
  int32_t count = 0;
  REQUIRE(fj_program_param_count(program, &count) == FJ_SUCCESS);
  CHECK(count == 1);
  REQUIRE(fj_program_array_count(program, &count) == FJ_SUCCESS);
  CHECK(count == 4);
  fj_param_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(fj_program_param_info(program, "doc", &info) == FJ_SUCCESS);
  CHECK(info.type == FJ_PARAM_INT_ARRAY);
  CHECK(info.slot == 2);
  CHECK(info.rank == 2);
  CHECK(std::string(info.dims[0]) == "b");
  CHECK(std::string(info.dims[1]) == "kv");
  REQUIRE(fj_program_param_info(program, "slopes", &info) == FJ_SUCCESS);
  CHECK(info.type == FJ_PARAM_FLOAT_ARRAY);
  CHECK(info.slot == 3);
  REQUIRE(fj_program_param_info(program, "window", &info) == FJ_SUCCESS);
  CHECK(info.type == FJ_PARAM_INT);
  CHECK(info.rank == 0);
  CHECK(fj_program_param_info(program, "cap", &info) == FJ_ERROR_NOT_FOUND);
  int32_t slot = -1;
  CHECK(fj_program_param_slot(program, "doc", &slot) == FJ_ERROR_NOT_FOUND);
  CHECK(c.error().find("array parameter") != std::string::npos);
  info.struct_size = 4;
  CHECK(fj_program_param_info(program, "window", &info) == FJ_ERROR_INVALID_ARGUMENT);
  fj_program_destroy(program);
}
