// No cliffs (issue 29): generated masks and scores, at the language's limits, compile for
// sm_90a and sm_80 at head dims 64, 128 and 256 without spills, without wgmma that ptxas
// serializes, and within the compile budget. The masks come from the random-IR generator
// (tests/compiler/random_ir.h): arithmetic, floor division and modulo, comparisons, ||/&&
// chains, array reads, the mask shapes, and any/all as lowering unrolls them (up to 64 terms,
// nested two deep); half of them with a random score. CI compiles a seeded sample
// ("[cliffs]"); the full set runs on demand on every core, and chosen ones by their numbers:
//   build/bin/flexjit_tests_runtime "[cliffs-full]"
//   FLEXJIT_CLIFFS=78,132 build/bin/flexjit_tests_runtime "[cliffs-some]"
#include <catch2/catch.hpp>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "compiler/random_ir.h"
#include "flexjit/compiler/mask.h"
#include "jit/kernel_source.h"
#include "runtime/ptxas_report.h"

namespace {

using flexjit::Variant;
using flexjit::ir::Type;
using flexjit::testing::generated_variant;

// Generated variants in the full set, and every kSampleStride-th of them in CI's sample.
constexpr int kGeneratedVariants = 240;
constexpr int kSampleStride = 40;
// Cold compile target of one kernel (issue 29), in CPU seconds of the compiling thread (NVRTC
// runs on the caller's thread; CPU time leaves out the other jobs of a shared machine), and the
// limit checked: twice the target, as a loaded 2-core machine (ctest -j2 beside other builds)
// made the same compiles take up to 1.3 times as long. Kernels over the target are listed.
constexpr double kCompileSeconds = 3.0;
constexpr double kCompileSecondsLimit = 2 * kCompileSeconds;
// Cold compiles of a kernel over its limit, the fastest counting (check_generated).
constexpr int kCompileTries = 3;

// One kernel's compile, without Catch (the full set compiles on several threads).
struct Outcome {
  std::string name;
  std::string mask;  // the mask and score, for the message
  bool compiled = false;
  std::string log;
  flexjit::PtxasResources resources;
  double seconds = 0.0;
};

double thread_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

Outcome compile(const Variant& variant, int head_dim, const std::string& arch) {
  flexjit::PrefillKernelConfig config;
  config.head_dim = head_dim;
  config.arch = arch;
  const flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(variant, config);
  Outcome outcome;
  outcome.name = spec.name;
  outcome.mask = "mask " + flexjit::ir::to_string(variant.mask).substr(0, 400);
  if (variant.has_score()) {
    outcome.mask += "\nscore " + flexjit::ir::to_string(variant.score).substr(0, 400);
  }
  // As the kernel cache compiles it (both builds where the spec has a fallback).
  const double start = thread_seconds();
  auto compiled = flexjit::compile_spec(spec, true);
  outcome.seconds = thread_seconds() - start;
  if (!compiled) {
    outcome.log = compiled.error().message + "\n" + compiled.error().log;
    return outcome;
  }
  outcome.log = compiled->output.log;
  auto resources = flexjit::parse_ptxas_resources(outcome.log, spec.name);
  if (!resources) {
    outcome.log += "\n" + resources.error().message;
    return outcome;
  }
  outcome.compiled = true;
  outcome.resources = *resources;
  return outcome;
}

// The plain causal mask's variant: each config's baseline. The mma.sync kernel spills at head
// dim 256 whatever the mask (causal: 72 bytes on sm_80); a generated mask may not add to it.
Variant causal_variant() {
  Variant variant;
  variant.name = variant.mask_name = "causal";
  variant.mask = flexjit::ir::GE::make(flexjit::testing::q(), flexjit::testing::kv());
  return variant;
}

// Kernels of the sample that issue 29 still has to fix (the rest of the spills and
// compile times, found by this test): each must still fail a check, so that the list shrinks
// with every fix.
const std::vector<std::string> kKnownCliffs = {
    // kv <= q - 4 && any(i < 64: all(j < 15: kv / window == 15 i + j)): its kv_range (nested
    // loops of kv bounds) beside the mma.sync kernel's Q fragments and O. The wgmma kernels of
    // the same mask are clean since the producer takes the range from the consumers, and its
    // head-dim-64 mma.sync kernel since the block-id checks.
    "prefill_generated80_hd256_bf16_page16_sm80",
    // A chain of 16 array reads with a score: 12 bytes at head dim 64 with the block-id checks,
    // at both register usage levels (the fallback's 0 included).
    "prefill_generated0_hd64_bf16_page16_sm80",
};

// Kernels of the sample whose cold compile is over the limit, issue 29's compile-time item:
// checked like the others, but against kSlowCompileCeiling, so that they cannot get slower
// unseen while compile-time noise around the limit cannot fail the run either way. Off the list
// once they are back under the limit. Empty since the per-tile hooks write their chains as
// loops with scalar index arithmetic (docs/hopper.md): generated0's and generated200's kernels
// went from 6.0-8.1 CPU s to 1.8-4.4 s.
constexpr double kSlowCompileCeiling = 2 * kCompileSecondsLimit;
const std::vector<std::string> kKnownSlowCompiles = {};

// Compiles `variants` for every config on `threads` threads, then checks each kernel against
// its config's causal baseline.
void check_generated(const std::vector<int>& variants, unsigned threads,
                     const std::vector<std::string>& known,
                     const std::vector<std::string>& slow_compiles) {
  struct Job {
    int variant;  // -1: the causal baseline
    int head_dim;
    const char* arch;
  };
  std::vector<Job> jobs;
  for (const int variant : variants) {
    for (const char* arch : {"sm_90a", "sm_80"}) {
      for (const int head_dim : {64, 128, 256})
        jobs.push_back({variant, head_dim, arch});
    }
  }
  const size_t baselines = jobs.size();
  for (const char* arch : {"sm_90a", "sm_80"}) {
    for (const int head_dim : {64, 128, 256})
      jobs.push_back({-1, head_dim, arch});
  }
  std::vector<Outcome> outcomes(jobs.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const Variant variant =
          jobs[i].variant < 0 ? causal_variant() : generated_variant(jobs[i].variant);
      outcomes[i] = compile(variant, jobs[i].head_dim, jobs[i].arch);
    }
  };
  const auto run_pool = [&](const auto& task) {
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < std::max(threads, 1u); ++t)
      pool.emplace_back(task);
    task();
    for (std::thread& thread : pool)
      thread.join();
  };
  run_pool(work);
  // Noise only adds time: a kernel over its limit is compiled again, up to kCompileTries in
  // all, and keeps its fastest compile (a shared 2-core CI machine once took 6.4 CPU s for a
  // kernel that compiles in 2.8 s idle). Known cliffs fail another check anyway. On the pool
  // too: serial, the retries of the full set's ~20 slow kernels were half its 32 minutes.
  std::vector<std::pair<size_t, double>> retries;  // outcome, its limit
  for (size_t i = 0; i < baselines; ++i) {
    if (std::find(known.begin(), known.end(), outcomes[i].name) != known.end()) continue;
    const bool slow = std::find(slow_compiles.begin(), slow_compiles.end(), outcomes[i].name) !=
                      slow_compiles.end();
    const double limit = slow ? kSlowCompileCeiling : kCompileSecondsLimit;
    if (outcomes[i].compiled && outcomes[i].seconds > limit) retries.emplace_back(i, limit);
  }
  std::atomic<size_t> next_retry{0};
  run_pool([&] {
    for (size_t r = next_retry++; r < retries.size(); r = next_retry++) {
      const auto [i, limit] = retries[r];
      for (int tries = 1; tries < kCompileTries && outcomes[i].seconds > limit; ++tries) {
        const double seconds =
            compile(generated_variant(jobs[i].variant), jobs[i].head_dim, jobs[i].arch).seconds;
        outcomes[i].seconds = std::min(outcomes[i].seconds, seconds);
      }
    }
  });

  double slowest = 0.0;
  std::vector<std::string> failing;
  for (size_t i = 0; i < baselines; ++i) {
    const Outcome& outcome = outcomes[i];
    const Outcome& baseline = outcomes[baselines + i % 6];
    INFO(outcome.name << " (" << outcome.seconds << " s)\n" << outcome.mask << "\n" << outcome.log);
    REQUIRE(outcome.compiled);
    REQUIRE(baseline.compiled);
    // An array in local memory: S indexed by a loop nvcc did not unroll cost a T5 kernel its
    // speed so.
    const bool local_array = flexjit::testing::holds_local_array(
        outcome.resources, baseline.resources.stack_frame_bytes);
    const bool clean =
        outcome.resources.spill_store_bytes <= baseline.resources.spill_store_bytes &&
        outcome.resources.spill_load_bytes <= baseline.resources.spill_load_bytes && !local_array &&
        !outcome.resources.wgmma_serialized && outcome.seconds <= kCompileSecondsLimit;
    slowest = std::max(slowest, outcome.seconds);
    if (!clean || outcome.seconds > kCompileSeconds) failing.push_back(outcome.name);
    if (std::find(known.begin(), known.end(), outcome.name) != known.end()) {
      CHECK_FALSE(clean);  // fixed: take it off the list
      continue;
    }
    CHECK(outcome.resources.spill_store_bytes <= baseline.resources.spill_store_bytes);
    CHECK(outcome.resources.spill_load_bytes <= baseline.resources.spill_load_bytes);
    CHECK_FALSE(local_array);
    CHECK_FALSE(outcome.resources.wgmma_serialized);
    const bool slow =
        std::find(slow_compiles.begin(), slow_compiles.end(), outcome.name) != slow_compiles.end();
    CHECK(outcome.seconds <= (slow ? kSlowCompileCeiling : kCompileSecondsLimit));
  }
  std::string names;
  for (const std::string& name : failing)
    names += "\n  " + name;
  WARN(baselines << " kernels, " << failing.size() << " over a limit or the " << kCompileSeconds
                 << " s target; slowest compile " << slowest << " CPU s" << names);
}

}  // namespace

TEST_CASE("generated masks compile without spills, serialized wgmma or slow compiles (sample)",
          "[cliffs]") {
  std::vector<int> sample;
  for (int i = 0; i < kGeneratedVariants; i += kSampleStride)
    sample.push_back(i);
  check_generated(sample, 1, kKnownCliffs, kKnownSlowCompiles);
}

TEST_CASE("generated masks compile without spills, serialized wgmma or slow compiles (all)",
          "[.][cliffs-full]") {
  std::vector<int> all;
  for (int i = 0; i < kGeneratedVariants; ++i)
    all.push_back(i);
  check_generated(all, std::thread::hardware_concurrency(), {}, {});
}

// The generated variants named by $FLEXJIT_CLIFFS (numbers, comma-separated): a cliff of
// [cliffs-full] again after a change, in seconds instead of its quarter of an hour.
TEST_CASE("chosen generated masks compile without spills, serialized wgmma or slow compiles",
          "[.][cliffs-some]") {
  const char* const list = std::getenv("FLEXJIT_CLIFFS");
  REQUIRE(list != nullptr);
  std::vector<int> chosen;
  std::string item;
  for (const char* c = list;; ++c) {
    if (*c == ',' || *c == '\0') {
      REQUIRE_FALSE(item.empty());
      const int variant = std::stoi(item);
      REQUIRE((variant >= 0 && variant < kGeneratedVariants));
      chosen.push_back(variant);
      item.clear();
      if (*c == '\0') break;
    } else {
      item += *c;
    }
  }
  check_generated(chosen, std::thread::hardware_concurrency(), {}, {});
}
