// Compile-path benchmark (docs/architecture.md#targets: cold compile <= 3 s per variant,
// disk-cache hit <= 10 ms, memory hit <= 1 us). Prints one table; with --json also writes the
// figures, which `tools/bench/results_page.py compile` turns into bench/results/compile.json.
//
//   flexjit_bench_compile [--cli PATH] [--mask-file PATH] [--mask M] [--head-dim D]
//                         [--dtype bf16|fp16] [--arch sm_90a] [--repeats N] [--json PATH]
//
// Cold compiles and disk hits use fresh cache directories under the temp dir; the disk hit
// from a new process runs the CLI (`flexjit compile`, by default the one next to this binary)
// against a populated directory and reads the time it reports for fj_kernel_create.
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flexjit/dsl/frontend.h"
#include "flexjit/internal/inspect.h"

extern char** environ;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using flexjit::bench::median;

fs::path fresh_dir(const fs::path& root, int index) {
  const fs::path dir = root / fmt::format("cache{}", index);
  fs::remove_all(dir);
  return dir;
}

// Runs argv with `env_var` added; stdout captured. Returns (exit status, stdout, wall seconds).
struct ProcessRun {
  int status = -1;
  std::string output;
  double seconds = 0;
};

ProcessRun run_process(const std::vector<std::string>& args, const std::string& env_var,
                       const fs::path& output_file) {
  std::vector<std::string> env_strings = {env_var};
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("FLEXJIT_CACHE_DIR=")) env_strings.emplace_back(*e);
  }
  std::vector<char*> argv, envp;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_file.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ProcessRun run;
  const auto start = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) == 0) {
    waitpid(pid, &run.status, 0);
  }
  run.seconds = seconds_since(start);
  posix_spawn_file_actions_destroy(&actions);
  std::ifstream in(output_file);
  std::ostringstream text;
  text << in.rdbuf();
  run.output = text.str();
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flexjit compile-path benchmark: cold compile, disk hit, memory hit"};
  std::string cli = (fs::read_symlink("/proc/self/exe").parent_path() / "flexjit").string();
  std::string mask_file = "dsl/lib/standard.mask";
  std::string mask_name = "sliding";
  int head_dim = 128;
  std::string dtype = "bf16";
  std::string arch = "sm_90a";
  int repeats = 5;
  std::string json_path;
  app.add_option("--cli", cli, "the flexjit CLI, for the new-process disk hit")
      ->capture_default_str();
  app.add_option("--mask-file", mask_file, "mask file")->capture_default_str();
  app.add_option("--mask", mask_name, "mask")->capture_default_str();
  app.add_option("--head-dim", head_dim, "head dim")->capture_default_str();
  app.add_option("--dtype", dtype, "bf16 or fp16")->capture_default_str();
  app.add_option("--arch", arch, "architecture compiled for")->capture_default_str();
  app.add_option("--repeats", repeats, "runs of the slow measurements")->capture_default_str();
  app.add_option("--json", json_path, "also write the figures as JSON to this path");
  CLI11_PARSE(app, argc, argv);

  const fs::path root = fs::temp_directory_path() / fmt::format("flexjit-bench-{}", ::getpid());
  fs::create_directories(root);
  // The C API context below reads the environment once: point it at a private directory.
  ::setenv("FLEXJIT_CACHE_DIR", (root / "capi").c_str(), 1);

  std::ifstream in(mask_file);
  if (!in) {
    fmt::print(stderr, "cannot open {}\n", mask_file);
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const flexjit::dsl::Source source{mask_file, text.str()};
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  const auto module = flexjit::dsl::parse_and_check(source, diagnostics);
  auto mask = flexjit::lower_mask(module, mask_name);
  if (!mask) {
    fmt::print(stderr, "{}\n", mask.error().message);
    return 1;
  }
  flexjit::PrefillKernelConfig config;
  config.head_dim = head_dim;
  config.bf16 = dtype == "bf16";
  config.arch = arch;
  const flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(*mask, config);

  // Cold: source generation + key + NVRTC + disk write, in a fresh cache each time.
  std::vector<double> cold;
  for (int i = 0; i < repeats; ++i) {
    flexjit::inspect::IsolatedCache cache(fresh_dir(root, i));
    const auto start = Clock::now();
    auto kernel = cache.get(flexjit::prefill_kernel_spec(*mask, config));
    cold.push_back(seconds_since(start));
    if (!kernel) {
      fmt::print(stderr, "{}\n{}\n", kernel.error().message, kernel.error().log);
      return 1;
    }
  }

  // Disk hit in this process: an empty memory cache over a populated directory.
  std::vector<double> disk_in_process;
  for (int i = 0; i < std::max(repeats, 20); ++i) {
    flexjit::inspect::IsolatedCache cache(root / "cache0");
    const auto start = Clock::now();
    auto kernel = cache.get(flexjit::prefill_kernel_spec(*mask, config));
    disk_in_process.push_back(seconds_since(start));
    if (!kernel || cache.disk_hits() != 1) {
      fmt::print(stderr, "expected a disk hit\n");
      return 1;
    }
  }

  // Disk hit from a new process: the CLI's own figure for fj_kernel_create, and its wall time.
  std::vector<double> disk_new_process;
  std::vector<double> process_wall;
  const std::regex reported("loaded from the disk cache in ([0-9.]+) ms");
  for (int i = 0; i < repeats; ++i) {
    ProcessRun run =
        run_process({cli, "compile", mask_file, "--mask", mask_name, "--head-dim",
                     std::to_string(head_dim), "--dtype", dtype, "--arch", arch},
                    "FLEXJIT_CACHE_DIR=" + (root / "cache0").string(), root / "cli.out");
    std::smatch match;
    if (run.status != 0 || !std::regex_search(run.output, match, reported)) {
      fmt::print(stderr, "{} did not report a disk hit (status {}):\n{}\n", cli, run.status,
                 run.output);
      return 1;
    }
    disk_new_process.push_back(std::stod(match[1]) * 1e-3);
    process_wall.push_back(run.seconds);
  }

  // Memory hit through the C API, as an engine calls it: fj_kernel_create + fj_kernel_destroy.
  fj_context* context = nullptr;
  fj_program* program = nullptr;
  fj_context_create(&context);
  if (fj_program_create(context, mask_file.c_str(), source.text.data(), source.text.size(),
                        &program) != FJ_SUCCESS) {
    fmt::print(stderr, "{}\n", fj_context_last_error(context));
    return 1;
  }
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = mask_name.c_str();
  desc.head_dim = head_dim;
  desc.dtype = dtype == "bf16" ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  desc.page_size = 16;
  desc.arch = arch.c_str();
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    fmt::print(stderr, "{}\n", fj_context_last_error(context));
    return 1;
  }
  fj_kernel_destroy(kernel);
  constexpr int kMemoryIterations = 20000;
  auto start = Clock::now();
  for (int i = 0; i < kMemoryIterations; ++i) {
    fj_kernel_create(context, program, &desc, &kernel);
    fj_kernel_destroy(kernel);
  }
  const double capi_hit = seconds_since(start) / kMemoryIterations;

  // The same request through the per-program memo (find_program_kernel, filled by the
  // fj_kernel_create calls above): the lookup a repeated fj_kernel_create starts with.
  start = Clock::now();
  size_t found = 0;
  for (int i = 0; i < kMemoryIterations * 10; ++i)
    found += flexjit::inspect::program_has_kernel(*program, desc, arch);
  const double memo_hit = seconds_since(start) / (kMemoryIterations * 10);

  // KernelCache::get on a spec already generated: the key hash plus the map lookup.
  start = Clock::now();
  for (int i = 0; i < kMemoryIterations; ++i)
    found += flexjit::inspect::cache_get(*context, spec).ok();
  const double cache_get_hit = seconds_since(start) / kMemoryIterations;
  fj_program_destroy(program);
  fj_context_destroy(context);
  fs::remove_all(root);

  fmt::print("kernel {} ({} bytes of source), {} repeats\n", spec.name, spec.source.size(),
             repeats);
  fmt::print("| measure | median | min | target |\n| --- | --- | --- | --- |\n");
  fmt::print("| cold compile (generate + NVRTC + disk write) | {:.3f} s | {:.3f} s | <= 3 s |\n",
             median(cold), *std::min_element(cold.begin(), cold.end()));
  fmt::print(
      "| disk hit, new process (fj_kernel_create, as the CLI reports) | {:.2f} ms | {:.2f} ms | <= "
      "10 ms |\n",
      median(disk_new_process) * 1e3,
      *std::min_element(disk_new_process.begin(), disk_new_process.end()) * 1e3);
  fmt::print(
      "| disk hit, new process (whole `flexjit compile` process, wall) | {:.1f} ms | {:.1f} ms | - "
      "|\n",
      median(process_wall) * 1e3,
      *std::min_element(process_wall.begin(), process_wall.end()) * 1e3);
  fmt::print(
      "| disk hit, in process (KernelCache::get, empty memory cache) | {:.3f} ms | {:.3f} ms | <= "
      "10 ms |\n",
      median(disk_in_process) * 1e3,
      *std::min_element(disk_in_process.begin(), disk_in_process.end()) * 1e3);
  fmt::print(
      "| memory hit: fj_kernel_create + fj_kernel_destroy (mean) | {:.2f} us | - | <= 1 us |\n",
      capi_hit * 1e6);
  fmt::print("| memory hit: KernelCache::get of a generated spec (mean) | {:.2f} us | - | - |\n",
             cache_get_hit * 1e6);
  fmt::print(
      "| memory hit: per-program request memo, find_program_kernel (mean) | {:.3f} us | - | <= 1 "
      "us |\n",
      memo_hit * 1e6);
  if (!json_path.empty()) {
    // {"meta": {...}, "rows": [{workload, impl, measure, value, min, unit}]}: the shape of
    // tools/bench/bench.py's JSON, one row per measure; `value` is the median (the mean for
    // the memory hits, whose `min` is null). Date, device and commit are added by the caller.
    const auto quoted = [](std::string_view text) {
      std::string out = "\"";
      for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
      }
      return out + "\"";
    };
    const auto number = [](double value) { return fmt::format("{:.6g}", value); };
    const auto min_of = [](const std::vector<double>& values) {
      return *std::min_element(values.begin(), values.end());
    };
    struct Measure {
      const char* workload;
      const char* measure;
      double value;
      std::string min;
      const char* unit;
    };
    const std::vector<Measure> measures = {
        {"cold_compile", "cold compile (generate + NVRTC + disk write)", median(cold),
         number(min_of(cold)), "s"},
        {"disk_hit_new_process", "disk hit, new process (fj_kernel_create, as the CLI reports)",
         median(disk_new_process) * 1e3, number(min_of(disk_new_process) * 1e3), "ms"},
        {"disk_hit_process_wall", "disk hit, new process (whole `flexjit compile` process, wall)",
         median(process_wall) * 1e3, number(min_of(process_wall) * 1e3), "ms"},
        {"disk_hit_in_process", "disk hit, in process (KernelCache::get, empty memory cache)",
         median(disk_in_process) * 1e3, number(min_of(disk_in_process) * 1e3), "ms"},
        {"memory_hit_capi", "memory hit: fj_kernel_create + fj_kernel_destroy (mean)",
         capi_hit * 1e6, "null", "us"},
        {"memory_hit_cache_get", "memory hit: KernelCache::get of a generated spec (mean)",
         cache_get_hit * 1e6, "null", "us"},
        {"memory_hit_memo", "memory hit: per-program request memo, find_program_kernel (mean)",
         memo_hit * 1e6, "null", "us"},
    };
    std::string json = fmt::format(
        "{{\n \"meta\": {{\"kernel\": {}, \"source_bytes\": {}, \"repeats\": {}, "
        "\"mask_file\": {}, \"mask\": {}, \"head_dim\": {}, \"dtype\": {}, \"arch\": {}}},\n"
        " \"rows\": [",
        quoted(spec.name), spec.source.size(), repeats, quoted(mask_file), quoted(mask_name),
        head_dim, quoted(dtype), quoted(arch));
    for (size_t i = 0; i < measures.size(); ++i) {
      const Measure& m = measures[i];
      json += fmt::format(
          "{}\n  {{\"workload\": {}, \"impl\": \"flexjit\", \"measure\": {}, \"value\": {}, "
          "\"min\": {}, \"unit\": {}}}",
          i == 0 ? "" : ",", quoted(m.workload), quoted(m.measure), number(m.value), m.min,
          quoted(m.unit));
    }
    json += "\n ],\n \"metadata\": []\n}\n";
    std::ofstream out(json_path);
    out << json;
    if (!out) {
      fmt::print(stderr, "cannot write {}\n", json_path);
      return 1;
    }
  }
  return found > 0 ? 0 : 1;
}
