// The CPU backend's speed (docs/cpu.md): causal prefill of one 4096-token request, 8 query and
// 8 kv heads, head dim 128, bf16, page 16, through the C API (arch "cpu"). Prints the time per
// call, the effective FLOP/s (4 * head_dim per visible (query, key) pair and head) and that rate
// over the peak given with --peak-gflops (see docs/cpu.md for how to estimate it).
//   build/bin/flexjit_bench_cpu_attention [--tokens N] [--iterations N] [--peak-gflops G]
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "check/cpu_check.h"
#include "check/paged_check.h"
#include "flexjit/flexjit.h"

int main(int argc, char** argv) {
  int tokens = 4096;
  int iterations = 3;
  double peak_gflops = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string option = argv[i];
    if (option == "--tokens") {
      tokens = std::atoi(argv[i + 1]);
    } else if (option == "--iterations") {
      iterations = std::atoi(argv[i + 1]);
    } else if (option == "--peak-gflops") {
      peak_gflops = std::atof(argv[i + 1]);
    } else {
      fmt::print(stderr, "unknown option {}\n", option);
      return 2;
    }
  }
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  const std::string path = std::string(FLEXJIT_SOURCE_DIR) + "/dsl/lib/standard.mask";
  if (fj_context_create(&context) != FJ_SUCCESS ||
      fj_program_create_from_file(context, path.c_str(), &program) != FJ_SUCCESS) {
    fmt::print(stderr, "cannot load {}: {}\n", path, fj_context_last_error(context));
    return 1;
  }
  flexjit::PagedCheckConfig config;
  config.mask = "causal";
  config.dtype = FJ_DTYPE_BF16;
  config.head_dim = 128;
  config.page_size = 16;
  config.num_heads = 8;
  config.num_kv_heads = 8;
  config.query_lens = {tokens};
  config.context_lens = {0};
  config.params.assign(1, 0);
  config.timing_iterations = iterations;
  auto inputs = flexjit::make_paged_inputs(config);
  if (!inputs) {
    fmt::print(stderr, "{}\n", inputs.error().message);
    return 1;
  }
  auto outputs = flexjit::run_cpu_launch(context, program, config, *inputs);
  if (!outputs) {
    fmt::print(stderr, "{}\n", outputs.error().message);
    return 1;
  }
  const double pairs = static_cast<double>(config.num_heads) * tokens * (tokens + 1) / 2;
  const double gflops = 4.0 * config.head_dim * pairs / (outputs->ms * 1e-3) / 1e9;
  fmt::print("{}: {} tokens, {} heads, {} hardware threads\n", outputs->kernel_name, tokens,
             config.num_heads, std::thread::hardware_concurrency());
  fmt::print("time {:.1f} ms per call (mean of {}), {:.1f} effective GFLOP/s", outputs->ms,
             iterations, gflops);
  if (peak_gflops > 0)
    fmt::print(", {:.1f}% of {:.0f} GFLOP/s peak", 100 * gflops / peak_gflops, peak_gflops);
  fmt::print("\n");
  fj_program_destroy(program);
  fj_context_destroy(context);
  return 0;
}
