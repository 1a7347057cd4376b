// fj_precompile: builds many kernels in parallel, reports each one, and the first failure.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "flexjit/flexjit.h"
#include "launch/handles.h"

namespace {

constexpr const char* kSource =
    "param window: int\n"
    "mask causal = q >= kv\n"
    "mask sliding = causal && q - kv < window\n";

struct Fixture {
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  Fixture() {
    REQUIRE(fj_context_create(&context) == FJ_SUCCESS);
    REQUIRE(fj_program_create(context, "test.mask", kSource, std::string(kSource).size(),
                              &program) == FJ_SUCCESS);
  }
  ~Fixture() {
    fj_program_destroy(program);
    fj_context_destroy(context);
  }
};

fj_kernel_desc desc(const char* mask, int32_t head_dim, fj_dtype dtype) {
  fj_kernel_desc d{};
  d.struct_size = sizeof(d);
  d.mask = mask;
  d.head_dim = head_dim;
  d.dtype = dtype;
  d.page_size = 16;
  d.arch = "sm_80";
  return d;
}

struct Progress {
  std::vector<size_t> done;
  std::vector<size_t> indices;
  static void record(void* self, size_t done, size_t total, size_t index, fj_status) {
    auto* progress = static_cast<Progress*>(self);
    progress->done.push_back(done);
    progress->indices.push_back(index);
    CHECK(total == 4);
  }
};

}  // namespace

TEST_CASE("fj_precompile builds every description once, in parallel", "[precompile]") {
  Fixture f;
  const std::vector<fj_kernel_desc> descs = {
      desc("causal", 64, FJ_DTYPE_BF16), desc("causal", 64, FJ_DTYPE_FP16),
      desc("sliding", 64, FJ_DTYPE_BF16), desc("causal", 64, FJ_DTYPE_BF16)};
  Progress progress;
  fj_precompile_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = 3;
  options.progress = &Progress::record;
  options.progress_user_data = &progress;
  std::vector<fj_status> statuses(descs.size(), FJ_ERROR_INTERNAL);
  REQUIRE(fj_precompile(f.context, f.program, descs.data(), descs.size(), &options,
                        statuses.data()) == FJ_SUCCESS);
  CHECK(statuses == std::vector<fj_status>(4, FJ_SUCCESS));
  CHECK(progress.done == std::vector<size_t>{1, 2, 3, 4});
  std::sort(progress.indices.begin(), progress.indices.end());
  CHECK(progress.indices == std::vector<size_t>{0, 1, 2, 3});
  CHECK(std::string(fj_context_last_error(f.context)).empty());

  // Three distinct kernels: built (or loaded from disk) once each, now all in memory.
  CHECK(f.context->cache.compile_count() + f.context->cache.disk_hit_count() == 3);
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(f.context, f.program, &descs[2], &kernel) == FJ_SUCCESS);
  CHECK(f.context->cache.compile_count() + f.context->cache.disk_hit_count() == 3);
  fj_kernel_destroy(kernel);
}

TEST_CASE("fj_precompile reports each failure and returns the first", "[precompile]") {
  Fixture f;
  std::vector<fj_kernel_desc> descs = {desc("causal", 64, FJ_DTYPE_BF16),
                                       desc("nope", 64, FJ_DTYPE_BF16),
                                       desc("causal", 64, FJ_DTYPE_BF16)};
  descs[2].page_size = 17;
  std::vector<fj_status> statuses(descs.size(), FJ_SUCCESS);
  CHECK(fj_precompile(f.context, f.program, descs.data(), descs.size(), nullptr, statuses.data()) ==
        FJ_ERROR_NOT_FOUND);
  CHECK(statuses == std::vector<fj_status>{FJ_SUCCESS, FJ_ERROR_NOT_FOUND, FJ_ERROR_UNSUPPORTED});
  const std::string error = fj_context_last_error(f.context);
  CHECK_THAT(error, Catch::Contains("2 of 3 kernels failed") && Catch::Contains("descs[1]") &&
                        Catch::Contains("nope"));
}

TEST_CASE("fj_precompile rejects bad arguments", "[precompile]") {
  Fixture f;
  const fj_kernel_desc one = desc("causal", 64, FJ_DTYPE_BF16);
  CHECK(fj_precompile(nullptr, f.program, &one, 1, nullptr, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_precompile(f.context, nullptr, &one, 1, nullptr, nullptr) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_precompile(f.context, f.program, nullptr, 1, nullptr, nullptr) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK(fj_precompile(f.context, f.program, nullptr, 0, nullptr, nullptr) == FJ_SUCCESS);
  fj_precompile_options options{};
  options.struct_size = 4;
  CHECK(fj_precompile(f.context, f.program, &one, 1, &options, nullptr) ==
        FJ_ERROR_INVALID_ARGUMENT);
  options.struct_size = sizeof(options);
  options.num_threads = -1;
  CHECK(fj_precompile(f.context, f.program, &one, 1, &options, nullptr) ==
        FJ_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(fj_context_last_error(f.context)), Catch::Contains("num_threads"));
}

TEST_CASE("descriptions of an older header (before kv_dtype, 0.8) build, one by one and in arrays",
          "[precompile]") {
  Fixture f;
  // A 0.7 caller's fj_kernel_desc ends where kv_dtype begins: its arrays step by that size, and
  // the field reads as 0 (the cache has q's dtype). The bytes past each description are another
  // description's, never read as its kv_dtype.
  constexpr size_t kOld = offsetof(fj_kernel_desc, kv_dtype);
  const fj_kernel_desc wanted[] = {desc("causal", 64, FJ_DTYPE_BF16),
                                   desc("sliding", 128, FJ_DTYPE_FP16)};
  std::vector<unsigned char> old_array(2 * kOld + 4, 0xff);  // 0xff: poison past the last
  for (size_t i = 0; i < 2; ++i) {
    fj_kernel_desc d = wanted[i];
    d.arch = "cpu";
    d.struct_size = kOld;
    std::memcpy(old_array.data() + i * kOld, &d, kOld);
  }
  const auto* old_descs = reinterpret_cast<const fj_kernel_desc*>(old_array.data());
  fj_status statuses[2] = {FJ_ERROR_INTERNAL, FJ_ERROR_INTERNAL};
  REQUIRE(fj_precompile(f.context, f.program, old_descs, 2, nullptr, statuses) == FJ_SUCCESS);
  CHECK(statuses[0] == FJ_SUCCESS);
  CHECK(statuses[1] == FJ_SUCCESS);
  fj_kernel_desc second;
  std::memcpy(&second, old_array.data() + kOld, kOld);
  fj_kernel* kernel = nullptr;
  REQUIRE(fj_kernel_create(f.context, f.program, &second, &kernel) == FJ_SUCCESS);
  const char* name = nullptr;
  REQUIRE(fj_kernel_name(kernel, &name) == FJ_SUCCESS);
  CHECK(std::string(name) == "cpu_prefill_sliding_hd128_fp16_page16");
  fj_kernel_destroy(kernel);

  // Shorter than the first version: refused, naming the field.
  fj_kernel_desc short_desc = wanted[0];
  short_desc.struct_size = kOld - 4;
  CHECK(fj_kernel_create(f.context, f.program, &short_desc, &kernel) == FJ_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fj_context_last_error(f.context)).find("struct_size") != std::string::npos);
  CHECK(fj_precompile(f.context, f.program, &short_desc, 1, nullptr, nullptr) ==
        FJ_ERROR_INVALID_ARGUMENT);
}
