// [gpu] correctness sweep: a few hundred paged and encoder attention calls, each checked
// against the float64 reference on random inputs (tools/check/paged_check), over masks x scores
// x head dims x dtypes (with fp8 K/V caches, per-tensor or per-kv-head scales, for paged calls)
// x page sizes x GQA groups x KV layouts x query-length mixes x launches x attention sinks.
// The full product is far too large; the configurations come from a seeded, deterministic
// covering design instead: [sweep] holds every pair of values of any two axes at least once,
// [sweep-reduced] every value of every axis (few enough for compute-sanitizer). Each distinct
// kernel is built once, in parallel (fj_precompile), into one context that the whole binary
// shares; the configurations of a kernel run one after another.
// Run on a machine with a CUDA GPU:
//   FLEXJIT_SOURCE_DIR=$PWD build/bin/flexjit_tests_gpu "[sweep]"
//   compute-sanitizer --tool memcheck build/bin/flexjit_tests_gpu "[sweep-reduced]"
// FLEXJIT_SWEEP_LIMIT=N runs the first N configurations only. "[sweep-plan]" checks the
// design's coverage and prints its size and the reference's work; it needs no GPU.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "check/paged_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"

namespace {

using flexjit::testing::fixture;

// The axes, in this order in every space; the first kNumKernelAxes select the compiled kernel,
// the others are launch shapes that one kernel serves.
enum AxisId {
  kMask,
  kScore,
  kHeadDim,
  kDtype,
  kPageSize,
  kGroup,
  kLayout,
  kQueries,
  kLaunch,
  kSinks,
  kNumAxes
};
constexpr int kNumKernelAxes = kGroup;

struct Axis {
  const char* name;
  std::vector<std::string> values;
};

// The paged call (fj_paged_attention) or the encoder call over contiguous K/V
// (fj_varlen_attention), whose page size and layout axes hold one value.
struct Space {
  const char* name;
  bool contiguous;
  std::vector<Axis> axes;  // by AxisId

  std::vector<int> sizes() const {
    std::vector<int> result;
    for (const Axis& axis : axes)
      result.push_back(static_cast<int>(axis.values.size()));
    return result;
  }
};

const std::vector<std::string> kScores = {"none", "softcap", "alibi"};
const std::vector<std::string> kHeadDims = {"64", "80", "96", "128", "256"};
const std::vector<std::string> kDtypes = {"bf16", "fp16"};
const std::vector<std::string> kGroups = {"1", "2", "4", "8", "mqa"};

const Space& paged_space() {
  static const Space space{
      "paged",
      false,
      {{"mask",
        {"causal", "sliding", "prefix_lm", "rswa", "chunked", "document", "prefix_ranges",
         "bidirectional"}},
       {"score", kScores},
       {"head_dim", kHeadDims},
       // q's dtype, and an fp8 (e4m3) cache's scales: one per tensor or one per kv head.
       {"dtype", {"bf16", "fp16", "bf16_kvfp8_tensor", "fp16_kvfp8_head"}},
       {"page_size", {"16", "32", "64", "128", "256"}},
       {"gqa", kGroups},
       {"layout", {"NHD", "HND", "NHD_JOINT", "HND_JOINT", "NHD_2D"}},
       {"queries", {"decode", "prefill", "mixed", "long_context", "long_decode"}},
       {"launch", {"direct", "planned", "graph"}},
       {"sinks", {"none", "sinks"}}}};
  return space;
}

const Space& encoder_space() {
  static const Space space{"encoder",
                           true,
                           {{"mask", {"bidirectional", "sliding_sym", "document"}},
                            {"score", kScores},
                            {"head_dim", kHeadDims},
                            {"dtype", kDtypes},
                            {"page_size", {"contiguous"}},
                            {"gqa", kGroups},
                            {"layout", {"contiguous"}},
                            {"queries", {"packed", "long"}},
                            {"launch", {"direct"}},
                            {"sinks", {"none", "sinks"}}}};
  return space;
}

// Query and kv heads of each GQA value: at most 8 query heads keeps the reference fast. Group 8
// has a single kv head too; "mqa" shares one kv head among 6 query heads, a group that is not a
// power of two, so a packed tile of (query, head) rows ends inside a query position.
std::pair<int, int> heads_of(const std::string& group) {
  if (group == "1") return {4, 4};
  if (group == "2") return {6, 3};
  if (group == "4") return {8, 2};
  if (group == "8") return {8, 1};
  return {6, 1};
}

flexjit::KvLayout layout_of(const std::string& name) {
  if (name == "HND") return flexjit::KvLayout::HND;
  if (name == "NHD_JOINT") return flexjit::KvLayout::NHD_JOINT;
  if (name == "HND_JOINT") return flexjit::KvLayout::HND_JOINT;
  if (name == "NHD_2D") return flexjit::KvLayout::NHD_2D;
  return flexjit::KvLayout::NHD;
}

// Deterministic on every platform, unlike std::uniform_int_distribution.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int below(int n) { return static_cast<int>(engine_() % static_cast<uint64_t>(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }  // inclusive

 private:
  std::mt19937_64 engine_;
};

using Row = std::vector<int>;  // a value index per axis; -1: not chosen yet

// How often the rows added so far hold each value combination of `strength` axes: each value
// of each axis (strength 1), or each pair of values of two axes (strength 2).
class Coverage {
 public:
  Coverage(std::vector<int> sizes, int strength) : sizes_(std::move(sizes)) {
    const int n = static_cast<int>(sizes_.size());
    for (int i = 0; i < n; ++i) {
      if (strength == 1) {
        tuples_.push_back({{i}, std::vector<int>(sizes_[i], 0)});
        continue;
      }
      for (int j = i + 1; j < n; ++j)
        tuples_.push_back({{i, j}, std::vector<int>(sizes_[i] * sizes_[j], 0)});
    }
  }

  // Combinations the complete `row` holds that no row added so far does.
  int gain(const Row& row) const {
    int count = 0;
    for (const Tuple& tuple : tuples_)
      count += tuple.count[index(tuple, row)] == 0;
    return count;
  }

  void add(const Row& row) {
    for (Tuple& tuple : tuples_)
      ++tuple.count[index(tuple, row)];
  }

  // `fixed` with the values of the first combination that no row holds and that agrees with
  // `fixed` (whose -1 entries agree with anything); nullopt when there is none.
  std::optional<Row> first_missing(const Row& fixed) const {
    for (const Tuple& tuple : tuples_) {
      for (int item = 0; item < static_cast<int>(tuple.count.size()); ++item) {
        if (tuple.count[item] != 0) continue;
        Row row = fixed;
        bool agrees = true;
        int rest = item;
        for (auto axis = tuple.axes.rbegin(); axis != tuple.axes.rend(); ++axis) {
          const int value = rest % sizes_[*axis];
          rest /= sizes_[*axis];
          agrees = agrees && (row[*axis] < 0 || row[*axis] == value);
          row[*axis] = value;
        }
        if (agrees) return row;
      }
    }
    return std::nullopt;
  }

  // The fewest rows holding any one combination: 0 while one is missing.
  int min_count() const {
    int result = INT32_MAX;
    for (const Tuple& tuple : tuples_)
      result = std::min(result, *std::min_element(tuple.count.begin(), tuple.count.end()));
    return result;
  }

 private:
  struct Tuple {
    std::vector<int> axes;
    std::vector<int> count;  // by the combination's index: values in axis order, row-major
  };

  int index(const Tuple& tuple, const Row& row) const {
    int result = 0;
    for (const int axis : tuple.axes)
      result = result * sizes_[axis] + row[axis];
    return result;
  }

  std::vector<int> sizes_;
  std::vector<Tuple> tuples_;
};

// A covering design over `sizes` at `strength`, greedy as in AETG: each new row is the best of
// a few random completions of the first missing combination. Kernel rows (the first
// kNumKernelAxes values) come first and cover the kernel axes; each kernel then gets the same
// number of launches (at least `min_rows` in all), chosen to cover combinations with the
// launch axes, and more where one is still missing. Rows come out grouped by kernel, kernels
// in the order picked: the first cover the most, so that the first rows alone (a run with
// FLEXJIT_SWEEP_LIMIT) see many values. Deterministic: the arguments decide it.
std::vector<Row> covering_design(const std::vector<int>& sizes, int strength, int min_rows,
                                 uint64_t seed) {
  constexpr int kCandidates = 40;
  Rng rng(seed);
  const auto best_completion = [&](const Coverage& coverage, const Row& fixed) {
    Row best;
    int best_gain = -1;
    for (int c = 0; c < kCandidates; ++c) {
      Row row = fixed;
      for (size_t axis = 0; axis < row.size(); ++axis) {
        if (row[axis] < 0) row[axis] = rng.below(sizes[axis]);
      }
      const int gain = coverage.gain(row);
      if (gain > best_gain) {
        best = std::move(row);
        best_gain = gain;
      }
    }
    return best;
  };

  const std::vector<int> kernel_sizes(sizes.begin(), sizes.begin() + kNumKernelAxes);
  Coverage kernel_coverage(kernel_sizes, strength);
  std::vector<Row> kernels;
  while (auto missing = kernel_coverage.first_missing(Row(kNumKernelAxes, -1))) {
    kernels.push_back(best_completion(kernel_coverage, *missing));
    kernel_coverage.add(kernels.back());
  }

  Coverage coverage(sizes, strength);
  std::vector<std::vector<Row>> launches(kernels.size());
  const auto add_launch = [&](size_t kernel, const Row& fixed) {
    launches[kernel].push_back(best_completion(coverage, fixed));
    coverage.add(launches[kernel].back());
  };
  const size_t per_kernel = (min_rows + kernels.size() - 1) / kernels.size();
  for (size_t k = 0; k < kernels.size(); ++k) {
    Row fixed(sizes.size(), -1);
    std::copy(kernels[k].begin(), kernels[k].end(), fixed.begin());
    for (size_t l = 0; l < per_kernel; ++l)
      add_launch(k, coverage.first_missing(fixed).value_or(fixed));
  }
  // Kernel rows hold every value of every kernel axis, so some kernel agrees with each
  // combination still missing.
  while (auto missing = coverage.first_missing(Row(sizes.size(), -1))) {
    const auto agrees = [&](const Row& kernel) {
      for (int axis = 0; axis < kNumKernelAxes; ++axis) {
        if ((*missing)[axis] >= 0 && (*missing)[axis] != kernel[axis]) return false;
      }
      return true;
    };
    const auto kernel = std::find_if(kernels.begin(), kernels.end(), agrees);
    if (kernel == kernels.end()) break;  // impossible; the plan test would report the gap
    std::copy(kernel->begin(), kernel->end(), missing->begin());
    add_launch(kernel - kernels.begin(), *missing);
  }
  std::vector<Row> rows;
  for (const auto& kernel_launches : launches)
    rows.insert(rows.end(), kernel_launches.begin(), kernel_launches.end());
  return rows;
}

struct SweepCase {
  const Space* space;
  Row row;
  int index;  // in its sweep
  flexjit::PagedCheckConfig config;
  int window;
};

// Request lengths of a query mix: at most ~600 keys per request, so that the reference stays
// fast, and enough to cross many pages (of 16) and several query tiles.
void add_lengths(const std::string& queries, Rng& rng, flexjit::PagedCheckConfig& config) {
  const auto add = [&](int query_len, int context_len) {
    config.query_lens.push_back(query_len);
    config.context_lens.push_back(context_len);
  };
  if (queries == "decode") {
    // One new token per request over long cached contexts; a context of 0 starts a sequence.
    add(1, rng.between(300, 599));
    for (int r = rng.between(1, 5); r > 0; --r)
      add(1, rng.between(0, 599));
  } else if (queries == "prefill") {
    // Whole prompts, no cached context.
    add(rng.between(129, 330), 0);
    for (int r = rng.between(0, 2); r > 0; --r)
      add(rng.between(1, 200), 0);
  } else if (queries == "mixed") {
    // vLLM's chunked prefill: decodes, prompt chunks after cached context, at times a new
    // prompt and a request with no new token this step; in a shuffled order.
    for (int r = rng.between(1, 3); r > 0; --r)
      add(1, rng.between(50, 599));
    for (int r = rng.between(1, 2); r > 0; --r) {
      const int context = rng.between(1, 400);
      add(rng.between(2, std::min(200, 600 - context)), context);
    }
    if (rng.below(2) == 0) add(rng.between(1, 128), 0);
    if (rng.below(2) == 0) add(0, rng.between(0, 300));
    for (size_t r = config.query_lens.size() - 1; r > 0; --r) {
      const int other = rng.below(static_cast<int>(r) + 1);
      std::swap(config.query_lens[r], config.query_lens[other]);
      std::swap(config.context_lens[r], config.context_lens[other]);
    }
  } else if (queries == "long_decode") {
    // Few requests of one to four new tokens (decodes, speculative tokens) over thousands of
    // keys: what planned launches split.
    for (int r = rng.between(1, 2); r > 0; --r)
      add(rng.between(1, 4), rng.between(1500, 3000));
  } else if (queries == "long_context") {
    // Few requests of several query tiles over keys spanning many pages.
    for (int r = rng.between(1, 2); r > 0; --r)
      add(rng.between(16, 80), rng.between(400, 520));
  } else if (queries == "packed") {
    // Encoder sequences of any length from 1, at times an empty one among them.
    for (int r = rng.between(2, 5); r > 0; --r)
      add(rng.between(1, 200), 0);
    if (rng.below(3) == 0) {
      const int at = rng.below(static_cast<int>(config.query_lens.size()) + 1);
      config.query_lens.insert(config.query_lens.begin() + at, 0);
      config.context_lens.insert(config.context_lens.begin() + at, 0);
    }
  } else {
    REQUIRE(queries == "long");  // the encoder's
    for (int r = rng.between(1, 2); r > 0; --r)
      add(rng.between(256, 600), 0);
  }
}

// The case of `row`; the program's scalar parameters are all 0 but `window`.
SweepCase make_case(const Space& space, const Row& row, int index, uint64_t seed, int num_params,
                    int window_slot) {
  const auto value = [&](AxisId axis) -> const std::string& {
    return space.axes[axis].values[row[axis]];
  };
  SweepCase result{&space, row, index, {}, 0};
  flexjit::PagedCheckConfig& config = result.config;
  config.contiguous = space.contiguous;
  config.mask = value(kMask);
  config.score = value(kScore) == "none" ? "" : value(kScore);
  // The library's named variants for these pairs, so that variants are swept as well as masks
  // paired with a score at launch.
  const std::map<std::pair<std::string, std::string>, std::string> variants = {
      {{"causal", "softcap"}, "causal_softcap"},
      {{"causal", "alibi"}, "causal_alibi"},
      {{"sliding", "softcap"}, "gemma2_local"},
      {{"chunked", ""}, "llama4_local"}};
  if (auto variant = variants.find({config.mask, config.score}); variant != variants.end()) {
    config.mask = variant->second;
    config.score.clear();
  }
  // Constants small enough to matter in a few hundred keys: chunk boundaries inside every
  // request, a cap that bends most scores.
  if (value(kMask) == "chunked") config.defines.push_back({"chunk", "96"});
  if (value(kScore) == "softcap") config.defines.push_back({"cap", "2.5"});
  config.head_dim = std::stoi(value(kHeadDim));
  config.dtype = value(kDtype).starts_with("bf16") ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  config.kv_fp8 = value(kDtype).find("kvfp8") != std::string::npos;
  config.kv_scale =
      value(kDtype).ends_with("_tensor") ? flexjit::KvScale::Tensor : flexjit::KvScale::Head;
  config.page_size = space.contiguous ? 16 : std::stoi(value(kPageSize));
  std::tie(config.num_heads, config.num_kv_heads) = heads_of(value(kGroup));
  config.layout = layout_of(value(kLayout));
  config.launch = value(kLaunch) == "planned" ? flexjit::PagedLaunch::Planned
                  : value(kLaunch) == "graph" ? flexjit::PagedLaunch::Graph
                                              : flexjit::PagedLaunch::Direct;
  config.seed = seed;
  Rng rng(seed);
  add_lengths(value(kQueries), rng, config);
  // From one key (the query's own) to wider than any sequence; a runtime parameter, so every
  // window runs on the same kernel.
  constexpr int kWindows[] = {1, 7, 64, 100, 250, 1 << 30};
  result.window = kWindows[rng.below(std::size(kWindows))];
  config.params.assign(num_params, 0);
  config.params[window_slot] = result.window;
  if (value(kSinks) == "sinks") config.sinks = flexjit::random_sinks(config.num_heads, seed);
  return result;
}

// Paged cases first, then encoder ones, each group ordered by kernel. `strength` 2: every pair
// of values of two axes; 1: every value.
std::vector<SweepCase> sweep_cases(int strength, int min_paged, int min_encoder) {
  int32_t num_params = 0;
  int32_t window_slot = -1;
  REQUIRE(fj_program_param_count(fixture().program, &num_params) == FJ_SUCCESS);
  REQUIRE(fj_program_param_slot(fixture().program, "window", &window_slot) == FJ_SUCCESS);
  std::vector<SweepCase> cases;
  for (const auto& [space, min_rows] :
       {std::pair{&paged_space(), min_paged}, std::pair{&encoder_space(), min_encoder}}) {
    const uint64_t design_seed = space->contiguous ? 0xe4c0de : 0x9a6ed;
    for (const Row& row : covering_design(space->sizes(), strength, min_rows, design_seed)) {
      const int index = static_cast<int>(cases.size());
      cases.push_back(make_case(*space, row, index, 1000 + index, num_params, window_slot));
    }
  }
  return cases;
}

std::string kernel_key(const flexjit::PagedCheckConfig& config) {
  std::string defines;
  for (const auto& [name, value] : config.defines)
    defines += fmt::format(" -D {}={}", name, value);
  return fmt::format(
      "{}{}{}{} hd{} {}{} {}", config.mask, config.score.empty() ? "" : " with ", config.score,
      defines, config.head_dim, config.dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16",
      config.kv_fp8 ? " kvfp8" : "",
      config.contiguous ? std::string("contiguous") : fmt::format("page{}", config.page_size));
}

// Everything that decides the case, and the `flexjit run` line that reruns it (same seed, same
// inputs) where the CLI has its layout.
std::string describe(const SweepCase& sweep_case) {
  const flexjit::PagedCheckConfig& config = sweep_case.config;
  std::string axes;
  for (int axis = 0; axis < kNumAxes; ++axis) {
    const Axis& a = sweep_case.space->axes[axis];
    axes += fmt::format(" {}={}", a.name, a.values[sweep_case.row[axis]]);
  }
  std::string command =
      fmt::format("flexjit run {} --mask {}{}", fixture().mask_file, config.mask,
                  config.score.empty() ? std::string() : fmt::format(" --score {}", config.score));
  for (const auto& [name, value] : config.defines)
    command += fmt::format(" -D {}={}", name, value);
  command += fmt::format(
      " --head-dim {} --dtype {} --heads {} --kv-heads {} --query-lens {} --set window={} "
      "--seed {} --iterations 0",
      config.head_dim, config.dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16", config.num_heads,
      config.num_kv_heads, fmt::join(config.query_lens, ","), sweep_case.window, config.seed);
  if (!config.sinks.empty()) command += fmt::format(" --sinks {}", fmt::join(config.sinks, ","));
  if (config.kv_fp8) {
    command += fmt::format(" --kv-dtype fp8 --kv-scale {}",
                           config.kv_scale == flexjit::KvScale::Tensor ? "tensor" : "head");
  }
  const std::string& layout = sweep_case.space->axes[kLayout].values[sweep_case.row[kLayout]];
  if (config.contiguous) {
    command += " --encoder";
  } else {
    command += fmt::format(" --page-size {} --context-lens {}", config.page_size,
                           fmt::join(config.context_lens, ","));
    if (layout == "NHD" || layout == "HND") {
      command += fmt::format(" --layout {}", layout == "NHD" ? "nhd" : "hnd");
    } else {
      command += fmt::format("  (the CLI has no {} layout)", layout);
    }
  }
  return fmt::format(
      "{} case #{}:{}\n  kernel {}, heads {}/{}, query_lens [{}], context_lens [{}], window {}, "
      "seed {}\n  {}",
      sweep_case.space->name, sweep_case.index, axes, kernel_key(config), config.num_heads,
      config.num_kv_heads, fmt::join(config.query_lens, ", "), fmt::join(config.context_lens, ", "),
      sweep_case.window, config.seed, command);
}

// The split-KV decode kernels of the cases that launch through a plan, built on every hardware
// thread: fj_plan_create compiles its kernel's, so each thread creates plans in turn.
void precompile_decode(const std::vector<SweepCase>& cases) {
  std::vector<const flexjit::PagedCheckConfig*> configs;
  std::vector<std::string> keys;
  for (const SweepCase& sweep_case : cases) {
    const flexjit::PagedCheckConfig& config = sweep_case.config;
    if (config.launch == flexjit::PagedLaunch::Direct) continue;
    std::string key = kernel_key(config);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    keys.push_back(std::move(key));
    configs.push_back(&config);
  }
  std::atomic<size_t> next = 0;
  std::vector<std::string> errors(configs.size());
  const auto work = [&] {
    for (size_t i = next++; i < configs.size(); i = next++) {
      std::vector<fj_define> defines;
      const fj_kernel_desc desc = flexjit::kernel_desc(*configs[i], defines);
      fj_kernel* kernel = nullptr;
      fj_plan* plan = nullptr;
      fj_plan_shape shape{sizeof(fj_plan_shape),   1, 1, 1, configs[i]->num_heads,
                          configs[i]->num_kv_heads};
      if (fj_kernel_create(fixture().context, fixture().program, &desc, &kernel) != FJ_SUCCESS ||
          fj_plan_create(kernel, &shape, &plan) != FJ_SUCCESS) {
        errors[i] = fj_context_last_error(fixture().context);
      }
      fj_plan_destroy(plan);
      fj_kernel_destroy(kernel);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = std::max(1u, std::thread::hardware_concurrency()); t > 0; --t)
    threads.emplace_back(work);
  for (std::thread& thread : threads)
    thread.join();
  for (const std::string& error : errors) {
    INFO(error);
    CHECK(error.empty());
  }
}

// Builds the distinct kernels of `cases` on every hardware thread, so that each check's
// fj_kernel_create is a cache hit. Returns how many there were.
size_t precompile(const std::vector<SweepCase>& cases) {
  std::vector<std::string> keys;
  std::vector<std::vector<fj_define>> defines;
  std::vector<fj_kernel_desc> descs;
  defines.reserve(cases.size());  // descs point into it
  for (const SweepCase& sweep_case : cases) {
    const flexjit::PagedCheckConfig& config = sweep_case.config;
    std::string key = kernel_key(config);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    keys.push_back(std::move(key));
    descs.push_back(flexjit::kernel_desc(config, defines.emplace_back()));
  }
  const fj_status status = fj_precompile(fixture().context, fixture().program, descs.data(),
                                         descs.size(), nullptr, nullptr);
  INFO(fj_context_last_error(fixture().context));
  REQUIRE(status == FJ_SUCCESS);
  precompile_decode(cases);
  return descs.size();
}

// Runs the first FLEXJIT_SWEEP_LIMIT cases (all by default), checks each against the
// reference and prints the count and the worst errors per dtype.
void run_sweep(const char* name, const std::vector<SweepCase>& all_cases) {
  size_t limit = all_cases.size();
  if (const char* text = std::getenv("FLEXJIT_SWEEP_LIMIT")) {
    const char* end = text + std::strlen(text);
    const auto [rest, error] = std::from_chars(text, end, limit);
    INFO("FLEXJIT_SWEEP_LIMIT=" << text);
    REQUIRE((error == std::errc() && rest == end));
  }
  const std::vector<SweepCase> cases(all_cases.begin(),
                                     all_cases.begin() + std::min(limit, all_cases.size()));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const size_t kernels = precompile(cases);
  const double compile_s = std::chrono::duration<double>(Clock::now() - start).count();

  struct Worst {
    double ratio = 0;  // relative error over the dtype's tolerance
    double relative_error = 0;
    double lse_error = 0;
    int index = -1;
    int count = 0;
  };
  std::map<std::string, Worst> worst;  // by dtype
  std::vector<int> failed;             // case indices
  for (const SweepCase& sweep_case : cases) {
    const flexjit::PagedCheckConfig& config = sweep_case.config;
    INFO(describe(sweep_case));
    flexjit::PagedCheckConfig with_cpu = config;  // the CPU backend runs the same inputs too
    with_cpu.compare_cpu = true;
    auto report = flexjit::run_paged_check(fixture().context, fixture().program, with_cpu);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    const double tolerance = flexjit::relative_error_tolerance(config.dtype);
    INFO(
        fmt::format("{}: rel err {:.3e} (tolerance {:.0e}), bad {}, empty rows wrong {}, lse err "
                    "{:.3e}, visible pairs {}",
                    report->kernel_name, report->relative_error, tolerance, report->bad_outputs,
                    report->empty_rows_wrong, report->lse_max_abs_error, report->visible_pairs));
    CHECK(report->visible_pairs > 0);
    CHECK(report->bad_outputs == 0);
    CHECK(report->empty_rows_wrong == 0);
    CHECK(report->relative_error <= tolerance);
    CHECK(report->lse_max_abs_error <= 2e-2);
    INFO(fmt::format("GPU vs CPU backend: rel diff {:.3e}, lse diff {:.3e}, finite on one only {}",
                     report->cpu_relative_error, report->cpu_lse_max_abs_error,
                     report->cpu_mismatched_non_finite));
    CHECK(report->cpu_relative_error <= tolerance);
    CHECK(report->cpu_lse_max_abs_error <= 2e-2);
    CHECK(report->cpu_mismatched_non_finite == 0);
    const bool pass =
        report->visible_pairs > 0 && report->bad_outputs == 0 && report->empty_rows_wrong == 0 &&
        report->relative_error <= tolerance && report->lse_max_abs_error <= 2e-2 &&
        report->cpu_relative_error <= tolerance && report->cpu_lse_max_abs_error <= 2e-2 &&
        report->cpu_mismatched_non_finite == 0;
    if (!pass) failed.push_back(sweep_case.index);
    Worst& dtype_worst = worst[config.dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16"];
    ++dtype_worst.count;
    dtype_worst.lse_error = std::max(dtype_worst.lse_error, report->lse_max_abs_error);
    if (report->relative_error / tolerance >= dtype_worst.ratio) {
      dtype_worst.ratio = report->relative_error / tolerance;
      dtype_worst.relative_error = report->relative_error;
      dtype_worst.index = sweep_case.index;
    }
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "%s: %zu of %zu configurations over %zu kernels, %zu failed%s; %.1f s (%.1f s building "
      "kernels)\n",
      name, cases.size(), all_cases.size(), kernels, failed.size(),
      failed.empty() ? "" : fmt::format(" (cases #{})", fmt::join(failed, ", #")).c_str(), total_s,
      compile_s);
  for (const auto& [dtype, w] : worst) {
    std::printf(
        "  %s: %d configurations, worst relative error %.3e (%.2f of the tolerance, case "
        "#%d), worst lse error %.3e\n",
        dtype.c_str(), w.count, w.relative_error, w.ratio, w.index, w.lse_error);
  }
  std::fflush(stdout);
}

const std::vector<SweepCase>& full_sweep() {
  static const std::vector<SweepCase> cases = sweep_cases(2, 300, 30);
  return cases;
}

const std::vector<SweepCase>& reduced_sweep() {
  static const std::vector<SweepCase> cases = sweep_cases(1, 24, 8);
  return cases;
}

}  // namespace

TEST_CASE("the sweeps cover every value pair (full) and every value (reduced)", "[sweep-plan]") {
  for (const auto& [name, cases, strength] : {std::tuple{"[sweep]", &full_sweep(), 2},
                                              std::tuple{"[sweep-reduced]", &reduced_sweep(), 1}}) {
    INFO(name);
    std::map<const Space*, Coverage> coverage;
    std::map<const Space*, std::vector<std::vector<int>>> value_counts;  // by axis and value
    std::vector<std::string> kernels;
    double mask_evaluations = 0;
    double multiply_adds = 0;
    for (const SweepCase& sweep_case : *cases) {
      const flexjit::PagedCheckConfig& config = sweep_case.config;
      INFO(describe(sweep_case));
      coverage.try_emplace(sweep_case.space, sweep_case.space->sizes(), strength)
          .first->second.add(sweep_case.row);
      auto& counts = value_counts[sweep_case.space];
      counts.resize(kNumAxes);
      for (int axis = 0; axis < kNumAxes; ++axis) {
        counts[axis].resize(sweep_case.space->axes[axis].values.size());
        ++counts[axis][sweep_case.row[axis]];
      }
      // A kernel's cases are adjacent, so a new key is a kernel not seen before.
      const std::string key = kernel_key(config);
      if (kernels.empty() || kernels.back() != key) {
        CHECK(std::find(kernels.begin(), kernels.end(), key) == kernels.end());
        kernels.push_back(key);
      }
      CHECK(config.num_heads <= 8);
      int rows = 0;
      for (size_t r = 0; r < config.query_lens.size(); ++r) {
        // Short enough for a fast reference; long decodes (a few rows each) up to 3k keys.
        CHECK(config.query_lens[r] + config.context_lens[r] <=
              (config.query_lens[r] <= 4 ? 3100 : 640));
        if (config.contiguous) CHECK(config.context_lens[r] == 0);
        rows += config.query_lens[r];
        // The reference evaluates the mask at every (row, key) and, for a visible one, a dot
        // product with K and a multiply-add with V.
        const double pairs = static_cast<double>(config.query_lens[r]) * config.num_heads *
                             (config.query_lens[r] + config.context_lens[r]);
        mask_evaluations += pairs;
        multiply_adds += 2 * pairs * config.head_dim;
      }
      CHECK(rows > 0);
    }
    for (const auto& [space, space_coverage] : coverage) {
      INFO(space->name);
      CHECK(space_coverage.min_count() >= 1);
      std::string line;
      for (int axis = 0; axis < kNumAxes; ++axis) {
        const std::vector<int>& counts = value_counts[space][axis];
        line += fmt::format(" {} {}-{},", space->axes[axis].name,
                            *std::min_element(counts.begin(), counts.end()),
                            *std::max_element(counts.begin(), counts.end()));
      }
      line.pop_back();
      std::printf("%s %s cases: each value of%s times\n", name, space->name, line.c_str());
    }
    CHECK(coverage.size() == 2);
    if (strength == 2) CHECK(cases->size() >= 300);
    std::printf(
        "%s: %zu configurations over %zu kernels; the reference's work: %.0f M mask "
        "evaluations, at most %.1f G multiply-adds\n",
        name, cases->size(), kernels.size(), mask_evaluations / 1e6, multiply_adds / 1e9);
  }
  std::fflush(stdout);
}

TEST_CASE("correctness sweep over every axis pair", "[gpu][sweep]") {
  REQUIRE(full_sweep().size() >= 300);
  run_sweep("[sweep]", full_sweep());
}

TEST_CASE("reduced correctness sweep: every axis value once", "[gpu][sweep-reduced]") {
  run_sweep("[sweep-reduced]", reduced_sweep());
}
