// The `flexjit` command line: check, inspect and run mask files (DESIGN.md §8).
// The library collects diagnostics and errors as values; this file alone prints them and
// chooses exit codes (0 success, 1 an error in the input or a failed check, 2 bad usage).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"
#include "flexjit/flexjit.h"
#include "kernel_source.h"
#include "paged_check.h"

namespace {

using flexjit::Result;

// A parsed and checked mask file. Diagnostics (warnings included) go to stderr.
struct LoadedFile {
  flexjit::dsl::Source source;
  flexjit::dsl::Module module;
  bool ok = false;
};

LoadedFile load_file(const std::string& path) {
  LoadedFile file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fmt::print(stderr, "flexjit: cannot open '{}'\n", path);
    return file;
  }
  std::ostringstream text;
  text << in.rdbuf();
  file.source = flexjit::dsl::Source{path, text.str()};
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  file.module = flexjit::dsl::parse_and_check(file.source, diagnostics);
  fmt::print(stderr, "{}", flexjit::dsl::format_diagnostics(file.source, diagnostics));
  file.ok = !flexjit::dsl::has_errors(diagnostics);
  return file;
}

std::vector<std::string> mask_names(const flexjit::dsl::Module& module) {
  std::vector<std::string> names;
  for (const auto& decl : module.decls) {
    if (decl.kind == flexjit::dsl::DeclKind::Mask) names.push_back(decl.name);
  }
  return names;
}

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Runtime parameter values by slot from `--set name=value` options. Every parameter the mask
// reads must be given; the file's other parameters are passed as 0.
Result<std::vector<int32_t>> parameter_values(const flexjit::MaskFunction& mask,
                                              const std::vector<std::string>& settings) {
  std::map<std::string, int32_t, std::less<>> given;
  for (const std::string& setting : settings) {
    const size_t eq = setting.find('=');
    if (eq == std::string::npos) {
      return flexjit::Error{fmt::format("--set '{}': expected NAME=VALUE", setting)};
    }
    const std::string name = setting.substr(0, eq);
    const auto value = parse_int(std::string_view(setting).substr(eq + 1));
    if (!value) {
      return flexjit::Error{fmt::format("--set '{}': value is not a 32-bit integer", setting)};
    }
    const bool known = std::any_of(mask.params.begin(), mask.params.end(),
                                   [&](const auto& p) { return p.name == name; });
    if (!known) return flexjit::Error{fmt::format("--set: no runtime parameter '{}'", name)};
    given[name] = *value;
  }
  std::vector<int32_t> values;
  for (const flexjit::RuntimeParam& param : mask.params) {
    auto it = given.find(param.name);
    if (it != given.end()) {
      values.push_back(it->second);
    } else if (!flexjit::ir::uses_param(mask.body, param.slot)) {
      values.push_back(0);
    } else {
      return flexjit::Error{
          fmt::format("mask '{}' reads runtime parameter '{}': give it with --set {}=N", mask.name,
                      param.name, param.name)};
    }
  }
  return values;
}

Result<std::vector<int>> parse_int_list(const std::string& text, const char* what) {
  std::vector<int> values;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const auto value = parse_int(rest.substr(0, comma));
    if (!value || *value < 0) {
      return flexjit::Error{
          fmt::format("{}: '{}' is not a list of non-negative integers", what, text)};
    }
    values.push_back(*value);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (values.empty()) return flexjit::Error{fmt::format("{} is empty", what)};
  return values;
}

int report_error(const flexjit::Error& error) {
  fmt::print(stderr, "flexjit: error: {}\n", error.message);
  if (!error.log.empty()) fmt::print(stderr, "{}\n", error.log);
  return 1;
}

int command_check(const std::string& path) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  fmt::print("{}: ok ({} declarations)\n", path, file.module.decls.size());
  return 0;
}

int command_ir(const std::string& path, const std::string& only_mask) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  for (const std::string& name : mask_names(file.module)) {
    if (!only_mask.empty() && name != only_mask) continue;
    auto mask = flexjit::lower_mask(file.module, name);
    if (!mask) return report_error(mask.error());
    fmt::print("mask {} = {}\n", name, flexjit::ir::to_string(mask->body));
  }
  return 0;
}

struct KernelOptions {
  std::string mask;
  int head_dim = 128;
  std::string dtype = "bf16";
  int page_size = 16;
  std::string arch = "sm_90a";
};

int command_emit(const std::string& path, const KernelOptions& options) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto mask = flexjit::lower_mask(file.module, options.mask);
  if (!mask) return report_error(mask.error());
  flexjit::PrefillKernelConfig config;
  config.head_dim = options.head_dim;
  config.bf16 = options.dtype == "bf16";
  config.page_size = options.page_size;
  config.arch = options.arch;
  if (!flexjit::prefill_head_dim_supported(config.head_dim) ||
      !flexjit::prefill_page_size_supported(config.page_size)) {
    return report_error(
        {"unsupported head dim or page size (head dims 64, 128; page sizes: "
         "multiples of 16 up to 1024)"});
  }
  fmt::print("{}", flexjit::prefill_kernel_spec(*mask, config).source);
  return 0;
}

// Compiles one kernel with NVRTC through the C API (as an engine would) and reports it.
int command_compile(const std::string& path, const KernelOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return report_error({fmt::format("cannot open '{}'", path)});
  fj_context* context = nullptr;
  if (fj_context_create(&context) != FJ_SUCCESS) return report_error({"cannot create context"});
  std::unique_ptr<fj_context, decltype(&fj_context_destroy)> context_owner(context,
                                                                           fj_context_destroy);
  fj_program* program = nullptr;
  if (fj_program_create_from_file(context, path.c_str(), &program) != FJ_SUCCESS) {
    fmt::print(stderr, "{}", fj_context_last_error(context));
    return 1;
  }
  std::unique_ptr<fj_program, decltype(&fj_program_destroy)> program_owner(program,
                                                                           fj_program_destroy);
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = options.mask.c_str();
  desc.head_dim = options.head_dim;
  desc.dtype = options.dtype == "bf16" ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  desc.page_size = options.page_size;
  desc.arch = options.arch.empty() ? nullptr : options.arch.c_str();
  const auto start = std::chrono::steady_clock::now();
  fj_kernel* kernel = nullptr;
  if (fj_kernel_create(context, program, &desc, &kernel) != FJ_SUCCESS) {
    return report_error({fj_context_last_error(context)});
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* name = nullptr;
  fj_kernel_name(kernel, &name);
  fmt::print("{}: compiled in {:.2f} s\n", name, seconds);
  fj_kernel_destroy(kernel);
  return 0;
}

struct HintOptions {
  std::string mask;
  int q_len = 1024;
  int kv_len = 1024;
  std::string tile = "64x64";
  std::vector<std::string> settings;
};

// The tile map of one request and head: query positions [kv_len - q_len, kv_len) as in a
// paged call (DESIGN.md §3), keys [0, kv_len).
int command_hints(const std::string& path, const HintOptions& options) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto mask = flexjit::lower_mask(file.module, options.mask);
  if (!mask) return report_error(mask.error());
  auto params = parameter_values(*mask, options.settings);
  if (!params) return report_error(params.error());
  const size_t x = options.tile.find('x');
  const auto tile_q = parse_int(std::string_view(options.tile).substr(0, x));
  const auto tile_k = x == std::string::npos
                          ? std::nullopt
                          : parse_int(std::string_view(options.tile).substr(x + 1));
  if (!tile_q || !tile_k || *tile_q <= 0 || *tile_k <= 0) {
    return report_error({fmt::format("--tile '{}': expected QxK, e.g. 64x64", options.tile)});
  }
  if (options.q_len <= 0 || options.kv_len <= 0 || options.q_len > options.kv_len) {
    return report_error({"need 0 < --q-len <= --kv-len"});
  }
  const int rows = (options.q_len + *tile_q - 1) / *tile_q;
  const int cols = (options.kv_len + *tile_k - 1) / *tile_k;
  if (int64_t{rows} * cols > 4'000'000) {
    return report_error({"more than 4M tiles: use larger tiles"});
  }
  const int q_offset = options.kv_len - options.q_len;
  int64_t counts[3] = {0, 0, 0};
  const bool draw = cols <= 200 && rows <= 200;
  for (int i = 0; i < rows; ++i) {
    std::string line;
    for (int j = 0; j < cols; ++j) {
      flexjit::Tile tile;
      tile.q0 = q_offset + i * *tile_q;
      tile.q1 = q_offset + std::min(options.q_len, (i + 1) * *tile_q);
      tile.k0 = j * *tile_k;
      tile.k1 = std::min(options.kv_len, (j + 1) * *tile_k);
      const auto tile_class = flexjit::classify_tile(*mask, tile, *params);
      ++counts[static_cast<int>(tile_class)];
      line += ".#+"[static_cast<int>(tile_class)];
    }
    if (draw) fmt::print("{}\n", line);
  }
  const int64_t total = counts[0] + counts[1] + counts[2];
  fmt::print(
      "{}: {} x {} tiles of {}: {} empty (.), {} full (#), {} partial (+); {:.1f}% "
      "of tiles computed\n",
      options.mask, rows, cols, options.tile, counts[0], counts[1], counts[2],
      100.0 * (counts[1] + counts[2]) / total);
  return 0;
}

struct RunOptions {
  KernelOptions kernel;
  std::vector<std::string> settings;
  int num_heads = 32;
  int num_kv_heads = 8;
  std::string query_lens = "1,7,300";
  std::string context_lens = "511,64,0";
  std::string layout = "nhd";
  uint64_t seed = 1;
  int iterations = 20;
};

int command_run(const std::string& path, const RunOptions& options) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto mask = flexjit::lower_mask(file.module, options.kernel.mask);
  if (!mask) return report_error(mask.error());
  auto params = parameter_values(*mask, options.settings);
  if (!params) return report_error(params.error());
  auto query_lens = parse_int_list(options.query_lens, "--query-lens");
  if (!query_lens) return report_error(query_lens.error());
  auto context_lens = parse_int_list(options.context_lens, "--context-lens");
  if (!context_lens) return report_error(context_lens.error());
  if (context_lens->size() != query_lens->size()) {
    return report_error({"--query-lens and --context-lens need one entry per request"});
  }

  fj_context* context = nullptr;
  fj_program* program = nullptr;
  if (fj_context_create(&context) != FJ_SUCCESS) return report_error({"cannot create context"});
  std::unique_ptr<fj_context, decltype(&fj_context_destroy)> context_owner(context,
                                                                           fj_context_destroy);
  if (fj_program_create(context, path.c_str(), file.source.text.data(), file.source.text.size(),
                        &program) != FJ_SUCCESS) {
    return report_error({fj_context_last_error(context)});
  }
  std::unique_ptr<fj_program, decltype(&fj_program_destroy)> program_owner(program,
                                                                           fj_program_destroy);
  flexjit::PagedCheckConfig config;
  config.mask = options.kernel.mask;
  config.dtype = options.kernel.dtype == "bf16" ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  config.head_dim = options.kernel.head_dim;
  config.page_size = options.kernel.page_size;
  config.num_heads = options.num_heads;
  config.num_kv_heads = options.num_kv_heads;
  config.layout = options.layout == "hnd" ? flexjit::KvLayout::HND : flexjit::KvLayout::NHD;
  config.query_lens = *query_lens;
  config.context_lens = *context_lens;
  config.params = *params;
  config.seed = options.seed;
  config.timing_iterations = options.iterations;
  auto report = flexjit::run_paged_check(context, program, config);
  if (!report) return report_error(report.error());

  const double tolerance = flexjit::relative_error_tolerance(config.dtype);
  const bool pass = report->relative_error <= tolerance && report->bad_outputs == 0 &&
                    report->empty_rows_wrong == 0;
  const double flops = 4.0 * options.kernel.head_dim * report->visible_pairs;
  fmt::print("kernel          {}\n", report->kernel_name);
  fmt::print("batch           {} requests, {} query tokens, {} heads / {} kv heads, {} layout\n",
             query_lens->size(), report->num_tokens, options.num_heads, options.num_kv_heads,
             options.layout);
  fmt::print("relative error  {:.3e} (tolerance {:.0e}), max abs {:.3e}, lse max abs {:.3e}\n",
             report->relative_error, tolerance, report->max_abs_error, report->lse_max_abs_error);
  fmt::print("bad outputs     {} NaN/Inf or unwritten, {} empty rows not 0/-inf\n",
             report->bad_outputs, report->empty_rows_wrong);
  if (report->kernel_ms > 0) {
    fmt::print("kernel time     {:.4f} ms ({:.1f} effective TFLOP/s over {} visible pairs)\n",
               report->kernel_ms, flops / (report->kernel_ms * 1e-3) / 1e12, report->visible_pairs);
  }
  fmt::print("{}\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

void add_kernel_options(CLI::App* command, KernelOptions& options) {
  command->add_option("--mask", options.mask, "mask to compile")->required();
  command->add_option("--head-dim", options.head_dim, "head dimension")
      ->check(CLI::IsMember({64, 128}));
  command->add_option("--dtype", options.dtype, "q/k/v/out element type")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  command->add_option("--page-size", options.page_size, "tokens per KV-cache block");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flexjit: attention masks compiled to paged attention kernels"};
  app.require_subcommand(1);
  std::string path;

  CLI::App* check = app.add_subcommand("check", "parse and check a mask file; exit 1 on errors");
  check->add_option("file", path, "mask file")->required();

  std::string ir_mask;
  CLI::App* ir = app.add_subcommand("ir", "print the IR of each mask after lowering");
  ir->add_option("file", path, "mask file")->required();
  ir->add_option("--mask", ir_mask, "print only this mask");

  KernelOptions emit_options;
  CLI::App* emit = app.add_subcommand("emit", "print the generated CUDA source of a kernel");
  emit->add_option("file", path, "mask file")->required();
  add_kernel_options(emit, emit_options);
  emit->add_option("--arch", emit_options.arch, "target architecture (sm_80, sm_90a, ...)");

  KernelOptions compile_options;
  compile_options.arch.clear();
  CLI::App* compile = app.add_subcommand("compile", "compile a kernel with NVRTC");
  compile->add_option("file", path, "mask file")->required();
  add_kernel_options(compile, compile_options);
  compile->add_option("--arch", compile_options.arch,
                      "target architecture (sm_80, sm_90a, ...); default: the current GPU's");

  HintOptions hint_options;
  CLI::App* hints = app.add_subcommand("hints", "draw the tile classes of a mask");
  hints->add_option("file", path, "mask file")->required();
  hints->add_option("--mask", hint_options.mask, "mask to analyse")->required();
  hints->add_option("--q-len", hint_options.q_len, "query tokens (the last of the keys)");
  hints->add_option("--kv-len", hint_options.kv_len, "keys");
  hints->add_option("--tile", hint_options.tile, "tile shape QxK");
  hints->add_option("--set", hint_options.settings, "runtime parameter NAME=VALUE");

  RunOptions run_options;
  CLI::App* run = app.add_subcommand(
      "run", "run a kernel on random paged inputs and check it against a float64 reference");
  run->add_option("file", path, "mask file")->required();
  add_kernel_options(run, run_options.kernel);
  run->add_option("--set", run_options.settings, "runtime parameter NAME=VALUE");
  run->add_option("--heads", run_options.num_heads, "query heads");
  run->add_option("--kv-heads", run_options.num_kv_heads, "kv heads (divides --heads)");
  run->add_option("--query-lens", run_options.query_lens, "new tokens per request, e.g. 1,7,300");
  run->add_option("--context-lens", run_options.context_lens,
                  "cached keys before the new tokens, per request");
  run->add_option("--layout", run_options.layout, "KV cache layout")
      ->check(CLI::IsMember({"nhd", "hnd"}));
  run->add_option("--seed", run_options.seed, "random seed");
  run->add_option("--iterations", run_options.iterations, "timed launches (0: no timing)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (*check) return command_check(path);
  if (*ir) return command_ir(path, ir_mask);
  if (*emit) return command_emit(path, emit_options);
  if (*compile) return command_compile(path, compile_options);
  if (*hints) return command_hints(path, hint_options);
  if (*run) return command_run(path, run_options);
  return 2;
}
