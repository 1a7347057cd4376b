#include <catch2/catch.hpp>

#include <latch>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jit/kernel_cache.h"
#include "launch/cuda_driver.h"

using namespace flexjit;

namespace {

KernelSpec tiny_spec() {
  return KernelSpec{
      .name = "fill",
      .source =
          "#include \"fj_ops.cuh\"\n"
          "extern \"C\" __global__ void fill(fj::i32* out, fj::i32 value) { *out = value; }\n",
      .arch = "sm_80",
      .options = {"-DFJ_A=1", "-DFJ_B=2"},
  };
}

KernelSpec broken_spec() {
  KernelSpec spec = tiny_spec();
  spec.name = "broken";
  spec.source = "extern \"C\" __global__ void broken() { this is not cuda; }\n";
  return spec;
}

}  // namespace

TEST_CASE("the cache key is a 128-bit hex digest of the spec", "[cache]") {
  const std::string key = KernelCache::key(tiny_spec());
  CHECK(key.size() == 32);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(KernelCache::key(tiny_spec()) == key);
}

TEST_CASE("the cache key changes with every input and only then", "[cache]") {
  const KernelSpec base = tiny_spec();
  const std::string base_key = KernelCache::key(base);

  KernelSpec copy = base;
  CHECK(KernelCache::key(copy) == base_key);

  auto key_with = [&](auto change) {
    KernelSpec spec = base;
    change(spec);
    return KernelCache::key(spec);
  };
  const std::vector<std::string> changed = {
      key_with([](KernelSpec& spec) { spec.name = "fill2"; }),
      key_with([](KernelSpec& spec) { spec.source += " "; }),
      key_with([](KernelSpec& spec) { spec.arch = "sm_90a"; }),
      key_with([](KernelSpec& spec) { spec.options[0] = "-DFJ_A=3"; }),
      key_with([](KernelSpec& spec) { spec.options[1] = "-DFJ_B=3"; }),
      key_with([](KernelSpec& spec) {
        spec.options = {"-DFJ_B=2", "-DFJ_A=1"};
      }),
      key_with([](KernelSpec& spec) { spec.options.push_back(""); }),
      // Length prefixes keep fields apart: moving bytes across a boundary changes the key.
      key_with([](KernelSpec& spec) { spec.options = {"-DFJ_A=1-DFJ_B=2"}; }),
      key_with([](KernelSpec& spec) {
        spec.name = "fil";
        spec.source = "l" + spec.source;
      }),
  };
  std::set<std::string> keys(changed.begin(), changed.end());
  keys.insert(base_key);
  CHECK(keys.size() == changed.size() + 1);
}

TEST_CASE("a compiled kernel carries its name, key and cubin", "[cache]") {
  KernelCache cache;
  auto kernel = cache.get(tiny_spec());
  INFO((kernel ? std::string() : kernel.error().log));
  REQUIRE(kernel.ok());
  CHECK((*kernel)->name() == "fill");
  CHECK((*kernel)->key() == KernelCache::key(tiny_spec()));
  CHECK((*kernel)->cubin().rfind("\x7f"
                                 "ELF",
                                 0) == 0);
  CHECK(cache.compile_count() == 1);

  auto again = cache.get(tiny_spec());
  REQUIRE(again.ok());
  CHECK(again->get() == kernel->get());
  CHECK(cache.compile_count() == 1);

  KernelSpec other_arch = tiny_spec();
  other_arch.arch = "sm_90a";
  auto other = cache.get(other_arch);
  REQUIRE(other.ok());
  CHECK(other->get() != kernel->get());
  CHECK(cache.compile_count() == 2);
}

TEST_CASE("concurrent requests for one kernel compile it once", "[cache]") {
  KernelCache cache;
  constexpr int kThreads = 8;
  std::vector<Result<CompiledKernelPtr>> results(kThreads, Error{"not run", {}});
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = cache.get(tiny_spec());
    });
  }
  for (std::thread& thread : threads)
    thread.join();

  CHECK(cache.compile_count() == 1);
  REQUIRE(results[0].ok());
  for (const auto& result : results) {
    REQUIRE(result.ok());
    CHECK(result->get() == results[0]->get());
  }
}

TEST_CASE("a failed compile reaches every waiter and is not cached", "[cache]") {
  KernelCache cache;
  constexpr int kThreads = 4;
  std::vector<Result<CompiledKernelPtr>> results(kThreads, Error{"not run", {}});
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = cache.get(broken_spec());
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  for (const auto& result : results) {
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().message == "NVRTC failed to compile broken.cu");
    CHECK_THAT(result.error().log, Catch::Contains("options:"));
  }
  // Waiters share the one compile in flight; a late thread may start its own after it failed.
  const size_t after_concurrent = cache.compile_count();
  CHECK(after_concurrent >= 1);
  CHECK(after_concurrent <= kThreads);

  auto retried = cache.get(broken_spec());
  REQUIRE_FALSE(retried.ok());
  CHECK(cache.compile_count() == after_concurrent + 1);
}

TEST_CASE("loading a kernel without a GPU driver is an error", "[cache]") {
  if (cuda::driver_api()) return;  // a driver exists here: the GPU tests cover loading
  KernelCache cache;
  auto kernel = cache.get(tiny_spec());
  REQUIRE(kernel.ok());
  auto function = (*kernel)->function(0);
  REQUIRE_FALSE(function.ok());
  CHECK_THAT(function.error().message, Catch::Contains("libcuda.so.1"));
}
