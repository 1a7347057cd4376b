// Host time of the planner (runtime/launch/plan.h, through flexjit/internal/inspect.h): building
// the work lists of a batch from host copies of its lengths, what fj_plan_update does before its
// two asynchronous copies. No GPU.
//   build/bin/flexjit_bench_plan
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "flexjit/internal/inspect.h"

namespace {

struct Case {
  std::string name;
  std::vector<int32_t> qsl{0};
  std::vector<int32_t> seq_lens;
  int max_query_len = 1;
};

Case decode_batch(int reqs, int low, int high, uint32_t seed) {
  Case c;
  c.name = "decode " + std::to_string(reqs) + " x " + std::to_string(low) + ".." +
           std::to_string(high) + " keys";
  std::mt19937 rng(seed);
  for (int r = 0; r < reqs; ++r) {
    c.qsl.push_back(c.qsl.back() + 1);
    c.seq_lens.push_back(low + static_cast<int>(rng() % (high - low + 1)));
  }
  return c;
}

}  // namespace

int main() {
  std::vector<Case> cases = {decode_batch(256, 100, 32000, 1), decode_batch(256, 4096, 4096, 2),
                             decode_batch(64, 4096, 4096, 3), decode_batch(4, 131072, 131072, 4)};
  Case mixed;
  mixed.name = "mixed: 4 x 2048-token chunks + 252 decodes";
  for (int r = 0; r < 4; ++r) {
    mixed.qsl.push_back(mixed.qsl.back() + 2048);
    mixed.seq_lens.push_back(4096);
  }
  for (int r = 0; r < 252; ++r) {
    mixed.qsl.push_back(mixed.qsl.back() + 1);
    mixed.seq_lens.push_back(4096);
  }
  mixed.max_query_len = 2048;
  cases.push_back(mixed);

  std::printf("| batch | decode items | prefill items | build_plan (host µs, median) |\n");
  std::printf("|---|---|---|---|\n");
  for (const Case& c : cases) {
    flexjit::inspect::PlannerShape shape;
    shape.max_num_reqs = static_cast<int>(c.seq_lens.size());
    shape.max_num_tokens = c.qsl.back();
    shape.max_query_len = c.max_query_len;
    shape.num_heads = 32;
    shape.num_kv_heads = 8;
    shape.page_size = 16;
    shape.decode_wave = 264;  // an H100: 132 SMs, two decode CTAs each
    flexjit::inspect::Planner planner(shape);
    std::vector<double> times;
    for (int i = 0; i < 2000; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto built = planner.build(c.qsl, c.seq_lens, 1 << 20);
      const auto end = std::chrono::steady_clock::now();
      if (!built) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(), built.error().message.c_str());
        return 1;
      }
      times.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    std::printf("| %s | %d | %d | %.2f |\n", c.name.c_str(), planner.decode_items(),
                planner.prefill_items(), times[times.size() / 2]);
  }
  return 0;
}
