// [gpu][family] tests: every mask and variant of the benchmark's element-wise family
// (tools/bench/family.mask: dilated and strided windows, Sparse Transformer patterns, image
// neighbourhoods, modular patterns, global tokens, random blocks and bits, sinks, per-head
// windows, a T5 bias) against the float64 reference and the CPU backend, at head dims 64, 128
// and 256, both dtypes, two page sizes and three GQA groups. They take the kernel paths the
// standard masks take rarely or never: one mask evaluation per diagonal (translation-invariant
// masks), constant divisors, the branch-free element select.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "check/paged_check.h"
#include "check/paged_inputs.h"
#include "check/shard_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"
#include "shard_check_asserts.h"

namespace {

using flexjit::testing::fixture;

// The names of the file's lines that `declaration` matches (its group 1), in order.
std::vector<std::string> declared(const std::string& path, const std::regex& declaration) {
  std::ifstream file(path);
  REQUIRE(file.good());
  std::vector<std::string> names;
  std::string line;
  while (std::getline(file, line)) {
    std::smatch match;
    if (std::regex_search(line, match, declaration)) names.push_back(match[1]);
  }
  return names;
}

// The names the file declares with `mask NAME =` or `variant NAME =`, in order: a mask added to
// the family is tested without a change here.
std::vector<std::string> declared_names(const std::string& path) {
  return declared(path, std::regex(R"(^(?:mask|variant)\s+([A-Za-z_][A-Za-z0-9_]*)\s*=)"));
}

// The arrays the file declares (`param NAME: TYPE[...]`), by slot, as the harness's
// random_arrays makes them; then `bits`, the random_bits mask's bit-packed words (bit kv % 32 of
// bits[q, kv / 32]), replaced by one row per position and one word per 32 keys, each a random
// int32 of the whole range: the harness's own values (at most the longest sequence, 16 x 16)
// would leave the high bits, the sign bit among them, never set and most keys unread.
std::vector<flexjit::HostArray> family_arrays(const std::string& path, const fj_program* program,
                                              const flexjit::PagedCheckConfig& config) {
  std::vector<flexjit::RuntimeParam> arrays;
  for (const std::string& name :
       declared(path, std::regex(R"(^param\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*\w+\s*\[)"))) {
    fj_param_info info{};
    info.struct_size = sizeof(info);
    REQUIRE(fj_program_param_info(program, name.c_str(), &info) == FJ_SUCCESS);
    flexjit::RuntimeParam param;
    param.name = name;
    param.type =
        info.type == FJ_PARAM_FLOAT_ARRAY ? flexjit::dsl::Type::Float : flexjit::dsl::Type::Int;
    param.slot = info.slot;
    for (int d = 0; d < info.rank; ++d)
      param.dims.emplace_back(info.dims[d]);
    arrays.push_back(std::move(param));
  }
  std::sort(arrays.begin(), arrays.end(),
            [](const auto& a, const auto& b) { return a.slot < b.slot; });
  int max_seq_len = 0;
  for (size_t r = 0; r < config.query_lens.size(); ++r)
    max_seq_len = std::max(max_seq_len, config.query_lens[r] + config.context_lens[r]);
  std::vector<flexjit::HostArray> result =
      flexjit::random_arrays(arrays, static_cast<int>(config.query_lens.size()), config.num_heads,
                             max_seq_len, config.seed);
  const auto bits = std::find_if(arrays.begin(), arrays.end(),
                                 [](const auto& param) { return param.name == "bits"; });
  REQUIRE(bits != arrays.end());
  flexjit::HostArray& words = result[bits->slot];
  words.rows = max_seq_len;
  words.cols = (max_seq_len + 31) / 32;
  std::mt19937 rng(static_cast<uint32_t>(config.seed));
  words.bits.resize(static_cast<size_t>(words.rows) * words.cols);
  for (int32_t& word : words.bits)
    word = static_cast<int32_t>(rng());
  return result;
}

// The family's program with the test's constants: small enough that windows, strides, image
// rows and blocks end inside the batch.
struct Family {
  std::string path = flexjit::testing::source_path("tools/bench/family.mask");
  std::unique_ptr<fj_program, fj_status (*)(fj_program*)> program{nullptr, fj_program_destroy};
  std::vector<std::string> names;
  int32_t num_params = 0;
  int32_t window_slot = -1;

  Family() {
    fj_program* created = nullptr;
    REQUIRE(fj_program_create_from_file(fixture().context, path.c_str(), &created) == FJ_SUCCESS);
    program.reset(created);
    REQUIRE(fj_program_param_count(created, &num_params) == FJ_SUCCESS);
    REQUIRE(fj_program_param_slot(created, "window", &window_slot) == FJ_SUCCESS);
    names = declared_names(path);
    REQUIRE(names.size() >= 10);
  }

  // A decode, a chunk after cached context, a whole prompt of several query tiles, a chunk that
  // starts a sequence.
  flexjit::PagedCheckConfig config(const std::string& name, int head_dim, int index) const {
    const std::pair<int, int> heads[] = {{4, 4}, {8, 2}, {6, 1}};  // groups 1, 4 and 6
    flexjit::PagedCheckConfig config;
    config.mask = name;
    config.defines = {{"dilated_window", "100"}, {"stride", "16"},      {"summary", "4"},
                      {"image_width", "16"},     {"image_radius", "2"}, {"longformer_radius", "40"},
                      {"bigbird_block", "16"},   {"t5_distances", "32"}};
    config.dtype = index % 2 == 0 ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
    config.head_dim = head_dim;
    config.page_size = index % 3 == 0 ? 64 : 16;
    std::tie(config.num_heads, config.num_kv_heads) = heads[index % 3];
    config.query_lens = {1, 7, 300, 129};
    config.context_lens = {700, 50, 0, 200};
    config.params.assign(num_params, 0);
    config.params[window_slot] = 100;
    config.seed = 5000 + index;
    config.compare_cpu = true;
    if (name == "random_bits") config.arrays = family_arrays(path, program.get(), config);
    return config;
  }
};

}  // namespace

TEST_CASE("the element-wise family matches the reference", "[gpu][family]") {
  const Family family;
  int index = 0;
  for (const std::string& name : family.names) {
    for (const int head_dim : {64, 128, 256}) {
      const flexjit::PagedCheckConfig config = family.config(name, head_dim, ++index);
      auto report = flexjit::run_paged_check(fixture().context, family.program.get(), config);
      INFO(name << " head dim " << head_dim << ": "
                << (report ? std::string() : report.error().message));
      REQUIRE(report.ok());
      INFO(fmt::format("heads {}/{}", config.num_heads, config.num_kv_heads));
      CHECK(report->visible_pairs > 0);
      flexjit::testing::require_correct(config, *report);
    }
  }
}

// Context parallelism (docs/context_parallel.md) over the family: each mask's keys dealt into
// 2-4 shards, interleaved or contiguous, the states merged, against the reference and the
// unsharded call. The sharded kernels hand the hooks positions, not shard keys: the diagonal
// evaluation is off, and a key-uniform score (causal + t5) tests the hull of a tile's positions.
TEST_CASE("the element-wise family in sharded calls merges into the unsharded result",
          "[gpu][family]") {
  const Family family;
  const int interleaves[] = {1, 16, 64};
  int index = 0;
  for (const std::string& name : family.names) {
    ++index;
    const int head_dim = index % 2 == 0 ? 64 : 128;
    const flexjit::PagedCheckConfig config = family.config(name, head_dim, index);
    flexjit::ShardCheckConfig shards;
    shards.count = 2 + index % 3;
    shards.layout =
        index % 4 == 3 ? flexjit::ShardLayout::Contiguous : flexjit::ShardLayout::Interleaved;
    shards.interleave = interleaves[index % 3];
    shards.seed = config.seed;
    INFO(
        fmt::format("{} hd{}: {} shards, {} {}", name, head_dim, shards.count,
                    shards.layout == flexjit::ShardLayout::Contiguous ? "contiguous" : "interleave",
                    shards.interleave));
    auto report = flexjit::run_shard_check(fixture().context, family.program.get(), config, shards);
    INFO((report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    flexjit::testing::require_correct(config, report->merged);
    flexjit::testing::check_against_unsharded(config, *report);
  }
  // causal + t5 at both head dims whatever the rotation above gave it.
  for (const int head_dim : {64, 128}) {
    const flexjit::PagedCheckConfig config = family.config("causal_t5", head_dim, ++index);
    flexjit::ShardCheckConfig shards;
    shards.count = 3;
    shards.interleave = 16;
    shards.seed = config.seed;
    auto report = flexjit::run_shard_check(fixture().context, family.program.get(), config, shards);
    INFO("causal_t5 hd" << head_dim << ": " << (report ? std::string() : report.error().message));
    REQUIRE(report.ok());
    flexjit::testing::require_correct(config, report->merged);
    flexjit::testing::check_against_unsharded(config, *report);
  }
}
