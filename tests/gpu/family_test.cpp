// [gpu][family] tests: every mask and variant of the benchmark's element-wise family
// (tools/bench/family.mask: dilated and strided windows, Sparse Transformer patterns, image
// neighbourhoods, modular patterns, global tokens, random blocks and bits, sinks, per-head
// windows, a T5 bias) against the float64 reference and the CPU backend, at head dims 64, 128
// and 256, both dtypes, two page sizes and three GQA groups. They take the kernel paths the
// standard masks take rarely or never: one mask evaluation per diagonal (translation-invariant
// masks), constant divisors, the branch-free element select.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "check/paged_check.h"
#include "fixture.h"
#include "flexjit/flexjit.h"

namespace {

using flexjit::testing::fixture;

// The names the file declares with `mask NAME =` or `variant NAME =`, in order: a mask added to
// the family is tested without a change here.
std::vector<std::string> declared_names(const std::string& path) {
  std::ifstream file(path);
  REQUIRE(file.good());
  const std::regex declaration(R"(^(mask|variant)\s+([A-Za-z_][A-Za-z0-9_]*)\s*=)");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(file, line)) {
    std::smatch match;
    if (std::regex_search(line, match, declaration)) names.push_back(match[2]);
  }
  return names;
}

}  // namespace

TEST_CASE("the element-wise family matches the reference", "[gpu][family]") {
  const std::string path = flexjit::testing::source_path("tools/bench/family.mask");
  fj_program* program = nullptr;
  REQUIRE(fj_program_create_from_file(fixture().context, path.c_str(), &program) == FJ_SUCCESS);
  const std::unique_ptr<fj_program, fj_status (*)(fj_program*)> owned(program, fj_program_destroy);
  int32_t num_params = 0;
  REQUIRE(fj_program_param_count(program, &num_params) == FJ_SUCCESS);
  int32_t window_slot = -1;
  REQUIRE(fj_program_param_slot(program, "window", &window_slot) == FJ_SUCCESS);

  const std::vector<std::string> names = declared_names(path);
  REQUIRE(names.size() >= 10);
  // Constants small enough that windows, strides, image rows and blocks end inside the batch.
  const std::vector<std::pair<std::string, std::string>> defines = {
      {"dilated_window", "100"}, {"stride", "16"},      {"summary", "4"},
      {"image_width", "16"},     {"image_radius", "2"}, {"longformer_radius", "40"},
      {"bigbird_block", "16"},   {"t5_distances", "32"}};
  const std::pair<int, int> heads[] = {{4, 4}, {8, 2}, {6, 1}};  // groups 1, 4 and 6
  int index = 0;
  for (const std::string& name : names) {
    for (const int head_dim : {64, 128, 256}) {
      ++index;
      flexjit::PagedCheckConfig config;
      config.mask = name;
      config.defines = defines;
      config.dtype = index % 2 == 0 ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
      config.head_dim = head_dim;
      config.page_size = index % 3 == 0 ? 64 : 16;
      std::tie(config.num_heads, config.num_kv_heads) = heads[index % 3];
      // A decode, a chunk after cached context, a whole prompt of several query tiles, a chunk
      // that starts a sequence.
      config.query_lens = {1, 7, 300, 129};
      config.context_lens = {700, 50, 0, 200};
      config.params.assign(num_params, 0);
      config.params[window_slot] = 100;
      config.seed = 5000 + index;
      config.compare_cpu = true;
      auto report = flexjit::run_paged_check(fixture().context, program, config);
      INFO(name << " head dim " << head_dim << ": "
                << (report ? std::string() : report.error().message));
      REQUIRE(report.ok());
      INFO(fmt::format("heads {}/{}", config.num_heads, config.num_kv_heads));
      CHECK(report->visible_pairs > 0);
      flexjit::testing::require_correct(config, *report);
    }
  }
}
