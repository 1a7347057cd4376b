// The `flexjit` command line: check, inspect and run mask files (docs/architecture.md#cli).
// The library collects diagnostics and errors as values; this file alone prints them and
// chooses exit codes (0 success, 1 an error in the input or a failed check, 2 bad usage).
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "check/cpu_check.h"
#include "check/paged_check.h"
#include "check/shard_check.h"
#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/diagnostic.h"
#include "flexjit/dsl/frontend.h"
#include "flexjit/flexjit.h"
#include "flexjit/internal/inspect.h"
#include "flexjit/internal/supported.h"
#include "hints.h"
#include "validate.h"

extern char** environ;

namespace {

using flexjit::Result;

// A parsed and checked mask file. Diagnostics (warnings included) go to stderr.
struct LoadedFile {
  flexjit::dsl::Source source;
  flexjit::dsl::Module module;
  bool ok = false;
};

// `json`: diagnostics go to stdout as one JSON document (for editors) instead of stderr.
LoadedFile load_file(const std::string& path, bool json = false) {
  LoadedFile file;
  flexjit::dsl::SourceFile read = flexjit::dsl::read_source_file(path);
  if (!read.source) {
    fmt::print(stderr, "flexjit: error: {}\n", flexjit::dsl::printable(read.error));
    return file;
  }
  file.source = std::move(*read.source);
  std::vector<flexjit::dsl::Diagnostic> diagnostics;
  file.module = flexjit::dsl::parse_and_check(file.source, diagnostics);
  if (json) {
    fmt::print("{}", flexjit::dsl::format_diagnostics_json(file.source, diagnostics));
  } else {
    fmt::print(stderr, "{}", flexjit::dsl::format_diagnostics(file.source, diagnostics));
  }
  file.ok = !flexjit::dsl::has_errors(diagnostics);
  return file;
}

// Names of the file's declarations of `kind`, in order.
std::vector<std::string> decl_names(const flexjit::dsl::Module& module,
                                    flexjit::dsl::DeclKind kind) {
  std::vector<std::string> names;
  for (const auto& decl : module.decls) {
    if (decl.kind == kind) names.push_back(decl.name);
  }
  return names;
}

// Every mask, then every variant: what `compile --all` builds.
std::vector<std::string> kernel_names(const flexjit::dsl::Module& module) {
  std::vector<std::string> names = decl_names(module, flexjit::dsl::DeclKind::Mask);
  for (std::string& name : decl_names(module, flexjit::dsl::DeclKind::Variant)) {
    names.push_back(std::move(name));
  }
  return names;
}

using flexjit::cli::parse_int;

// `NAME=VALUE` split in two, or an error naming the option.
Result<std::pair<std::string, std::string>> split_setting(const std::string& setting,
                                                          const char* option) {
  const size_t eq = setting.find('=');
  if (eq == std::string::npos || eq == 0) {
    return flexjit::Error{fmt::format("{} '{}': expected NAME=VALUE", option, setting)};
  }
  return std::pair{setting.substr(0, eq), setting.substr(eq + 1)};
}

// The slot value of a scalar parameter from its text: an int, true/false (or 1/0) for a
// bool, a float's bits for a float.
Result<int32_t> scalar_value(const flexjit::RuntimeParam& param, const std::string& text) {
  switch (param.type) {
    case flexjit::dsl::Type::Bool:
      if (text == "true" || text == "1") return 1;
      if (text == "false" || text == "0") return 0;
      break;
    case flexjit::dsl::Type::Float: {
      float value = 0.0f;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error == std::errc() && end == text.data() + text.size() && std::isfinite(value)) {
        return std::bit_cast<int32_t>(value);
      }
      break;
    }
    default:
      if (const auto value = parse_int(text)) return *value;
      break;
  }
  return flexjit::Error{fmt::format("--set {}={}: not a {} value", param.name, text,
                                    flexjit::dsl::type_name(param.type))};
}

bool reads_param(const flexjit::Variant& variant, int slot) {
  return flexjit::ir::uses_param(variant.mask, slot) ||
         (variant.has_score() && flexjit::ir::uses_param(variant.score, slot));
}

// Scalar runtime parameter values by slot from `--set name=value` options. Every parameter
// the variant reads must be given; the file's other parameters are passed as 0.
Result<std::vector<int32_t>> parameter_values(const flexjit::Variant& variant,
                                              const std::vector<std::string>& settings) {
  std::map<std::string, std::string, std::less<>> given;
  for (const std::string& setting : settings) {
    auto pair = split_setting(setting, "--set");
    if (!pair) return pair.error();
    const bool known = std::any_of(variant.scalars.begin(), variant.scalars.end(),
                                   [&](const auto& p) { return p.name == pair->first; });
    if (!known) {
      return flexjit::Error{fmt::format("--set: no scalar runtime parameter '{}'", pair->first)};
    }
    given[pair->first] = pair->second;
  }
  std::vector<int32_t> values;
  for (const flexjit::RuntimeParam& param : variant.scalars) {
    auto it = given.find(param.name);
    if (it != given.end()) {
      auto value = scalar_value(param, it->second);
      if (!value) return value.error();
      values.push_back(*value);
    } else if (!reads_param(variant, param.slot)) {
      values.push_back(0);
    } else {
      return flexjit::Error{
          fmt::format("'{}' reads runtime parameter '{}': give it with --set {}=V", variant.name,
                      param.name, param.name)};
    }
  }
  return values;
}

int report_error(const flexjit::Error& error) {
  // Messages may carry text from the command line or a file: control bytes are shown as '?'.
  fmt::print(stderr, "flexjit: error: {}\n", flexjit::dsl::printable(error.message));
  if (!error.log.empty()) fmt::print(stderr, "{}\n", flexjit::dsl::printable(error.log));
  return 1;
}

int command_check(const std::string& path, bool json) {
  const LoadedFile file = load_file(path, json);
  if (!file.ok) return 1;
  if (!json) fmt::print("{}: ok ({} declarations)\n", path, file.module.decls.size());
  return 0;
}

// What selects a kernel's variant: --mask (a mask or a variant), --score, -D NAME=VALUE.
struct KernelOptions {
  std::string mask;
  std::string score;
  std::vector<std::string> defines;
  int head_dim = 128;
  std::string dtype = "bf16";
  int page_size = 16;
  std::string arch = "sm_90a";
  std::string kv_dtype = "auto";  // the cache's element: "auto" (the dtype) or "fp8" (e4m3)

  // Parsed -D options, filled by selection(); fj_kernel_desc points into them.
  std::vector<std::pair<std::string, std::string>> parsed_defines;
  std::vector<fj_define> define_views;

  Result<flexjit::VariantSelection> selection() {
    parsed_defines.clear();
    for (const std::string& define : defines) {
      auto pair = split_setting(define, "-D");
      if (!pair) return pair.error();
      parsed_defines.push_back(std::move(*pair));
    }
    define_views.clear();
    for (const auto& [name, value] : parsed_defines) {
      define_views.push_back({name.c_str(), value.c_str()});
    }
    flexjit::VariantSelection selection;
    selection.name = mask;
    selection.score = score;
    selection.defines = parsed_defines;
    return selection;
  }
};

// Prints one lowered expression; with `passes`, the IR as lowered and after each pass.
void print_ir(std::string_view label, const flexjit::ir::Expr& lowered, bool passes) {
  if (!passes) {
    fmt::print("{} = {}\n", label, flexjit::ir::to_string(lowered));
    return;
  }
  fmt::print("{}\n  lowered   {}\n", label, flexjit::ir::to_string(lowered));
  for (const flexjit::ir::PassResult& pass : flexjit::ir::run_passes_traced(lowered)) {
    fmt::print("  {:<9} {}\n", pass.name, flexjit::ir::to_string(pass.result));
  }
}

// The IR of every mask, score and variant of the file (or of --mask / --score alone), after
// the passes; with --passes, as lowered and after each pass.
int command_ir(const std::string& path, KernelOptions& options, bool passes) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto base = options.selection();
  if (!base) return report_error(base.error());
  base->optimize = !passes;
  const auto lower = [&](const std::string& name, const std::string& score) {
    flexjit::VariantSelection selection = *base;
    selection.name = name;
    selection.score = score;
    return flexjit::lower_variant(file.module, selection);
  };
  using flexjit::dsl::DeclKind;
  if (!options.mask.empty()) {
    auto variant = lower(options.mask, options.score);
    if (!variant) return report_error(variant.error());
    print_ir(fmt::format("mask {}", variant->mask_name), variant->mask, passes);
    if (variant->has_score()) {
      print_ir(fmt::format("score {}", variant->score_name), variant->score, passes);
    }
    return 0;
  }
  const std::vector<std::string> masks = decl_names(file.module, DeclKind::Mask);
  for (const std::string& name : masks) {
    auto variant = lower(name, "");
    if (!variant) return report_error(variant.error());
    print_ir(fmt::format("mask {}", name), variant->mask, passes);
  }
  // A score is lowered paired with a mask; its IR does not depend on which.
  for (const std::string& name : decl_names(file.module, DeclKind::Score)) {
    if (masks.empty()) break;
    auto variant = lower(masks.front(), name);
    if (!variant) return report_error(variant.error());
    print_ir(fmt::format("score {}", name), variant->score, passes);
  }
  for (const std::string& name : decl_names(file.module, DeclKind::Variant)) {
    auto variant = lower(name, "");
    if (!variant) return report_error(variant.error());
    fmt::print("variant {} = {}{}\n", name, variant->mask_name,
               variant->has_score() ? " with " + variant->score_name : "");
  }
  if (masks.empty()) return 0;
  auto any_variant = lower(masks.front(), "");
  if (!any_variant) return report_error(any_variant.error());
  for (const flexjit::ConstantValue& constant : any_variant->constants) {
    fmt::print("const {}: {} = {}{}\n", constant.name, flexjit::dsl::type_name(constant.type),
               constant.value, constant.overridden ? " (-D)" : "");
  }
  return 0;
}

int command_emit(const std::string& path, KernelOptions& options) {
  if (std::string problem = flexjit::cli::arch_problem("emit", options.arch); !problem.empty()) {
    return report_error({std::move(problem)});
  }
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto selection = options.selection();
  if (!selection) return report_error(selection.error());
  auto mask = flexjit::lower_variant(file.module, *selection);
  if (!mask) return report_error(mask.error());
  flexjit::PrefillKernelConfig config;
  config.head_dim = options.head_dim;
  config.bf16 = options.dtype == "bf16";
  config.page_size = options.page_size;
  config.arch = options.arch;
  config.kv_fp8 = options.kv_dtype == "fp8";
  if (config.kv_fp8 && config.page_size == 0) {
    return report_error({"--kv-dtype fp8 needs a paged kernel (--page-size > 0)"});
  }
  if (!flexjit::supported::head_dim(config.head_dim) ||
      !flexjit::supported::page_size(config.page_size)) {
    return report_error(
        {fmt::format("unsupported head dim or page size (head dims {}; page sizes: {})",
                     flexjit::supported::head_dims_text(), flexjit::supported::kPageSizesText)});
  }
  fmt::print("{}", flexjit::prefill_kernel_spec(*mask, config).source);
  return 0;
}

struct CompileOptions {
  KernelOptions kernel;
  bool all = false;
  std::string head_dims = "64,128";
  std::string dtypes = "bf16,fp16";
  std::string page_sizes = "16";
  int jobs = 0;
  bool ptx = false;
  bool sass = false;
  bool resources = false;
  bool json = false;
  bool lists_given = false;  // --head-dims, --dtypes or --page-sizes was on the command line
};

using ContextPtr = std::unique_ptr<fj_context, decltype(&fj_context_destroy)>;
using ProgramPtr = std::unique_ptr<fj_program, decltype(&fj_program_destroy)>;
using KernelPtr = std::unique_ptr<fj_kernel, decltype(&fj_kernel_destroy)>;

// A context and the program of `path`, or the error already printed (nullopt).
struct OpenProgram {
  ContextPtr context{nullptr, fj_context_destroy};
  ProgramPtr program{nullptr, fj_program_destroy};
};

std::optional<OpenProgram> open_program(const std::string& path) {
  OpenProgram open;
  fj_context* context = nullptr;
  if (fj_context_create(&context) != FJ_SUCCESS) {
    report_error({"cannot create context"});
    return std::nullopt;
  }
  open.context.reset(context);
  fj_program* program = nullptr;
  if (fj_program_create_from_file(context, path.c_str(), &program) != FJ_SUCCESS) {
    // Diagnostics come formatted, one per line; a file that cannot be read is one message.
    const std::string_view message = fj_context_last_error(context);
    if (message.ends_with('\n')) {
      fmt::print(stderr, "{}", flexjit::dsl::printable(message));
    } else {
      report_error({std::string(message)});
    }
    return std::nullopt;
  }
  open.program.reset(program);
  return open;
}

// Requires options.selection() to have run (it parses the defines the desc points to).
fj_kernel_desc kernel_desc(const KernelOptions& options) {
  fj_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.mask = options.mask.c_str();
  desc.score = options.score.empty() ? nullptr : options.score.c_str();
  desc.defines = options.define_views.data();
  desc.num_defines = static_cast<uint32_t>(options.define_views.size());
  desc.head_dim = options.head_dim;
  desc.dtype = options.dtype == "bf16" ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  desc.page_size = options.page_size;
  desc.arch = options.arch.empty() ? nullptr : options.arch.c_str();
  if (options.kv_dtype == "fp8") desc.kv_dtype = FJ_DTYPE_FP8_E4M3;
  return desc;
}

// The first of `tools` found in $CUDA_HOME/bin, /usr/local/cuda/bin or on PATH.
std::optional<std::filesystem::path> find_toolkit_program(std::string_view tool) {
  std::vector<std::filesystem::path> dirs;
  if (const std::filesystem::path cuda_home = flexjit::inspect::cuda_home(); !cuda_home.empty()) {
    dirs.push_back(cuda_home / "bin");
  }
  dirs.push_back("/usr/local/cuda/bin");
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      if (colon != 0) dirs.emplace_back(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  for (const auto& dir : dirs) {
    const std::filesystem::path candidate = dir / tool;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Runs `argv` with stdout and stderr inherited; its exit status, or an Error.
Result<int> run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  if (int code = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ); code != 0) {
    return flexjit::Error{fmt::format("cannot run {}: {}", argv[0], std::strerror(code))};
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return flexjit::Error{fmt::format("waiting for {} failed", argv[0])};
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The cubin's SASS, printed by the toolkit's disassembler.
int print_sass(std::string_view name, std::string_view cubin_bytes) {
  std::vector<std::string> argv;
  if (auto cuobjdump = find_toolkit_program("cuobjdump")) {
    argv = {cuobjdump->string(), "-sass"};
  } else if (auto nvdisasm = find_toolkit_program("nvdisasm")) {
    argv = {nvdisasm->string(), "--print-line-info"};
  } else {
    return report_error(
        {"--sass needs cuobjdump or nvdisasm from the CUDA toolkit; neither is in $CUDA_HOME/bin, "
         "/usr/local/cuda/bin or on PATH (install the toolkit's cuda-cuobjdump or cuda-nvdisasm "
         "package, or use --ptx)"});
  }
  const std::filesystem::path cubin =
      std::filesystem::temp_directory_path() / fmt::format("flexjit-{}-{}.cubin", ::getpid(), name);
  {
    std::ofstream out(cubin, std::ios::binary);
    out.write(cubin_bytes.data(), static_cast<std::streamsize>(cubin_bytes.size()));
    if (!out) return report_error({fmt::format("cannot write {}", cubin.string())});
  }
  argv.push_back(cubin.string());
  auto status = run_program(argv);
  std::filesystem::remove(cubin);
  if (!status) return report_error(status.error());
  if (*status != 0) return report_error({fmt::format("{} exited with {}", argv[0], *status)});
  return 0;
}

// ptxas's own report for the kernel: the same source and options compiled once more with
// --ptxas-options=-v (which changes the log, not the code), outside the cache.
int print_resources(const flexjit::KernelSpec& spec, const flexjit::PrefillKernelConfig& config,
                    bool json) {
  auto resources = flexjit::inspect::ptxas_resources(spec);
  if (!resources) return report_error(resources.error());
  const size_t dynamic_smem = flexjit::prefill_launch_shape(config).smem_bytes;
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"kernel", spec.name},
                                      {"arch", spec.arch},
                                      {"registers", resources->registers},
                                      {"barriers", resources->barriers},
                                      {"static_shared_bytes", resources->shared_bytes},
                                      {"dynamic_shared_bytes", dynamic_smem},
                                      {"constant_bytes", resources->constant_bytes},
                                      {"stack_frame_bytes", resources->stack_frame_bytes},
                                      {"spill_store_bytes", resources->spill_store_bytes},
                                      {"spill_load_bytes", resources->spill_load_bytes},
                                      {"wgmma_serialized", resources->wgmma_serialized},
                                      {"fallback_build", resources->fallback_build()},
                                      {"fallback_options", resources->fallback_options}}
                           .dump(2));
    return 0;
  }
  fmt::print("{} ({}, from ptxas -v)\n", spec.name, spec.arch);
  fmt::print("  registers      {} per thread\n", resources->registers);
  fmt::print("  shared memory  {} bytes static, {} bytes dynamic (set at launch)\n",
             resources->shared_bytes, dynamic_smem);
  fmt::print(
      "  spills         {} bytes stored, {} bytes loaded{}\n", resources->spill_store_bytes,
      resources->spill_load_bytes,
      resources->spill_store_bytes + resources->spill_load_bytes > 0 ? "  <-- spilling" : "");
  fmt::print("  stack frame    {} bytes\n", resources->stack_frame_bytes);
  fmt::print("  barriers       {}\n", resources->barriers);
  fmt::print("  constant bank  {} bytes (cmem[0])\n", resources->constant_bytes);
  if (resources->wgmma_serialized) {
    fmt::print("  wgmma          serialized by ptxas  <-- each MMA waits for the previous one\n");
  }
  if (resources->fallback_build()) {
    fmt::print("  build          a fallback ({}): the first was serialized or spilled\n",
               fmt::join(resources->fallback_options, " "));
  }
  return 0;
}

// Compiles one kernel with NVRTC through the C API (as an engine would) and reports it; with
// --ptx, --sass or --resources, shows what was built.
int command_compile_one(const std::string& path, const CompileOptions& options) {
  auto open = open_program(path);
  if (!open) return 1;
  fj_context* context = open->context.get();
  const fj_kernel_desc desc = kernel_desc(options.kernel);
  const auto start = std::chrono::steady_clock::now();
  fj_kernel* raw_kernel = nullptr;
  if (fj_kernel_create(context, open->program.get(), &desc, &raw_kernel) != FJ_SUCCESS) {
    return report_error({fj_context_last_error(context)});
  }
  KernelPtr kernel(raw_kernel, fj_kernel_destroy);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* name = nullptr;
  fj_kernel_name(kernel.get(), &name);
  const bool from_disk = flexjit::inspect::cache_counts(*context).disk_hits > 0;
  const bool inspect = options.ptx || options.sass || options.resources;
  // Inspection output goes to stdout alone, so it can be piped; the summary then goes to stderr.
  std::FILE* summary = inspect ? stderr : stdout;
  if (from_disk) {
    fmt::print(summary, "{}: loaded from the disk cache in {:.1f} ms\n", name, seconds * 1e3);
  } else {
    fmt::print(summary, "{}: compiled in {:.2f} s\n", name, seconds);
  }
  if (!inspect) return 0;

  // The spec the C API compiled, rebuilt here for the inspections that recompile it.
  flexjit::VariantSelection selection;
  selection.name = options.kernel.mask;
  selection.score = options.kernel.score;
  selection.defines = options.kernel.parsed_defines;
  auto mask = flexjit::inspect::program_variant(*open->program, selection);
  if (!mask) return report_error(mask.error());
  const flexjit::PrefillKernelConfig& config = flexjit::inspect::kernel_config(*kernel);
  const flexjit::KernelSpec spec = flexjit::prefill_kernel_spec(*mask, config);
  if (flexjit::inspect::cache_key(spec) != flexjit::inspect::kernel_key(*kernel)) {
    return report_error(
        {fmt::format("internal error: the source rebuilt for {} differs from the "
                     "one compiled",
                     name)});
  }
  int status = 0;
  if (options.resources) status |= print_resources(spec, config, options.json);
  if (options.ptx) {
    auto ptx = flexjit::inspect::compile_ptx(spec);
    if (!ptx) return report_error(ptx.error());
    fmt::print("{}", *ptx);
  }
  if (options.sass) status |= print_sass(name, flexjit::inspect::kernel_cubin(*kernel));
  return status;
}

template <class T, class Parse>
Result<std::vector<T>> parse_list(const std::string& text, const char* what, Parse parse) {
  std::vector<T> values;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    auto value = parse(rest.substr(0, comma));
    if (!value) return flexjit::Error{fmt::format("{}: '{}' is not valid", what, text)};
    values.push_back(*value);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (values.empty()) return flexjit::Error{fmt::format("{} is empty", what)};
  return values;
}

// Redraws "[#####.....] done/total" on stderr, only on a terminal.
struct ProgressBar {
  bool enabled = ::isatty(STDERR_FILENO) == 1;
  size_t failures = 0;

  static void update(void* self, size_t done, size_t total, size_t, fj_status status) {
    auto* bar = static_cast<ProgressBar*>(self);
    if (status != FJ_SUCCESS) ++bar->failures;
    if (!bar->enabled) return;
    constexpr size_t kWidth = 40;
    const size_t filled = total == 0 ? kWidth : done * kWidth / total;
    fmt::print(stderr, "\r[{}{}] {}/{} kernels{}", std::string(filled, '#'),
               std::string(kWidth - filled, '.'), done, total,
               bar->failures > 0 ? fmt::format(", {} failed", bar->failures) : "");
    if (done == total) fmt::print(stderr, "\n");
  }
};

// Builds every mask of the file for every listed head dim, dtype and page size, in parallel
// (fj_precompile), then lists the kernels.
int command_compile_all(const std::string& path, const CompileOptions& options) {
  auto int_item = [](std::string_view item) { return parse_int(item); };
  auto head_dims = parse_list<int>(options.head_dims, "--head-dims", int_item);
  if (!head_dims) return report_error(head_dims.error());
  auto page_sizes = parse_list<int>(options.page_sizes, "--page-sizes", int_item);
  if (!page_sizes) return report_error(page_sizes.error());
  const std::string dtypes_what =
      fmt::format("--dtypes ({})", flexjit::supported::dtype_names_text());
  auto dtypes =
      parse_list<fj_dtype>(options.dtypes, dtypes_what.c_str(), flexjit::supported::dtype_named);
  if (!dtypes) return report_error(dtypes.error());

  auto open = open_program(path);
  if (!open) return 1;
  fj_context* context = open->context.get();
  const LoadedFile file = load_file(path);
  const std::vector<std::string> masks = kernel_names(file.module);
  std::vector<fj_kernel_desc> descs;
  for (const std::string& mask : masks) {
    for (int head_dim : *head_dims) {
      for (fj_dtype dtype : *dtypes) {
        for (int page_size : *page_sizes) {
          fj_kernel_desc desc = kernel_desc(options.kernel);
          desc.mask = mask.c_str();
          // A variant names its own score; --score pairs with the masks only.
          if (file.module.decls[file.module.find(mask)].kind == flexjit::dsl::DeclKind::Variant) {
            desc.score = nullptr;
          }
          desc.head_dim = head_dim;
          desc.dtype = dtype;
          desc.page_size = page_size;
          descs.push_back(desc);
        }
      }
    }
  }
  ProgressBar bar;
  fj_precompile_options precompile{};
  precompile.struct_size = sizeof(precompile);
  precompile.num_threads = options.jobs;
  precompile.progress = &ProgressBar::update;
  precompile.progress_user_data = &bar;
  std::vector<fj_status> statuses(descs.size(), FJ_SUCCESS);
  const auto start = std::chrono::steady_clock::now();
  const fj_status status = fj_precompile(context, open->program.get(), descs.data(), descs.size(),
                                         &precompile, statuses.data());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (size_t i = 0; i < descs.size(); ++i) {
    if (statuses[i] != FJ_SUCCESS) continue;
    // Built above: this is a memory hit.
    fj_kernel* kernel = nullptr;
    if (fj_kernel_create(context, open->program.get(), &descs[i], &kernel) != FJ_SUCCESS) {
      return report_error({fj_context_last_error(context)});
    }
    const char* name = nullptr;
    fj_kernel_name(kernel, &name);
    fmt::print("{}\n", name);
    fj_kernel_destroy(kernel);
  }
  const size_t failed = static_cast<size_t>(
      std::count_if(statuses.begin(), statuses.end(), [](fj_status s) { return s != FJ_SUCCESS; }));
  fmt::print("{} kernels in {:.2f} s: {} compiled, {} from the disk cache, {} failed\n",
             descs.size(), seconds, flexjit::inspect::cache_counts(*context).compiles,
             flexjit::inspect::cache_counts(*context).disk_hits, failed);
  if (status != FJ_SUCCESS) return report_error({fj_context_last_error(context)});
  return 0;
}

int command_compile(const std::string& path, CompileOptions& options) {
  if (auto selection = options.kernel.selection(); !selection) {
    return report_error(selection.error());
  }
  const std::string problem = flexjit::cli::check_compile_shape({
      .all = options.all,
      .mask_given = !options.kernel.mask.empty(),
      .lists_given = options.lists_given,
      .inspect = options.ptx || options.sass || options.resources,
      .resources = options.resources,
      .json = options.json,
      .arch = options.kernel.arch,
      .jobs = options.jobs,
  });
  if (!problem.empty()) return report_error({problem});
  if (options.kernel.arch.empty() && !flexjit::inspect::cuda_device_usable()) {
    return report_error(
        {"compile: no usable CUDA GPU here to take the architecture from: name one with --arch "
         "(e.g. --arch sm_90a, or --arch cpu for the CPU backend's host code)"});
  }
  return options.all ? command_compile_all(path, options) : command_compile_one(path, options);
}

std::string human_bytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", bytes / 1073741824.0);
  if (bytes >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string human_age(std::filesystem::file_time_type when) {
  const auto age = std::chrono::duration_cast<std::chrono::seconds>(
                       std::filesystem::file_time_type::clock::now() - when)
                       .count();
  if (age < 120) return fmt::format("{}s", std::max<int64_t>(age, 0));
  if (age < 2 * 3600) return fmt::format("{}m", age / 60);
  if (age < 2 * 86400) return fmt::format("{}h", age / 3600);
  return fmt::format("{}d", age / 86400);
}

int64_t age_seconds(std::filesystem::file_time_type when) {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::filesystem::file_time_type::clock::now() - when)
      .count();
}

// `flexjit cache ls|stats|clear`: the disk cache the environment names.
int command_cache(const std::string& action, bool json) {
  if (action == "clear") {
    const auto cleared = flexjit::inspect::clear_disk_cache();
    if (!cleared) return report_error({"no cache directory: set FLEXJIT_CACHE_DIR"});
    fmt::print("{}: removed {} files\n", cleared->directory.string(), cleared->removed);
    return 0;
  }
  const auto disk = flexjit::inspect::list_disk_cache();
  if (!disk) return report_error({"no cache directory: set FLEXJIT_CACHE_DIR"});
  const std::filesystem::path& dir = disk->directory;
  const std::vector<flexjit::CacheFileInfo>& entries = disk->entries;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  size_t host_code = 0;  // LLVM host code's object files; the other entries are kernels
  for (const auto& entry : entries) {
    bytes += entry.bytes;
    hits += entry.hits;
    host_code += entry.name.starts_with(flexjit::kHostCodeEntryPrefix) ? 1 : 0;
  }
  if (action == "stats") {
    if (json) {
      fmt::print("{}\n",
                 nlohmann::json{{"directory", dir.string()},
                                {"entries", entries.size()},
                                {"host_code_entries", host_code},
                                {"bytes", bytes},
                                {"max_bytes", disk->max_bytes},
                                {"hits", hits},
                                {"format_version", flexjit::inspect::cache_format_version()}}
                     .dump(2));
      return 0;
    }
    fmt::print("directory       {}\n", dir.string());
    fmt::print("entries         {} ({} kernels, {} host code)\n", entries.size(),
               entries.size() - host_code, host_code);
    fmt::print("size            {} of {} ({:.1f}%)\n", human_bytes(bytes),
               human_bytes(disk->max_bytes), 100.0 * bytes / disk->max_bytes);
    fmt::print("disk hits       {}\n", hits);
    fmt::print("format version  {}\n", flexjit::inspect::cache_format_version());
    return 0;
  }
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& entry : entries) {
      list.push_back(
          {{"name", entry.name},
           {"kind", entry.name.starts_with(flexjit::kHostCodeEntryPrefix) ? "host_code" : "kernel"},
           {"key", entry.key},
           {"path", entry.path.string()},
           {"bytes", entry.bytes},
           {"age_seconds", age_seconds(entry.written)},
           {"last_used_seconds", age_seconds(entry.last_used)},
           {"hits", entry.hits}});
    }
    fmt::print("{}\n", list.dump(2));
    return 0;
  }
  fmt::print("{:<48} {:<10} {:>10} {:>6} {:>9} {:>6}\n", "NAME", "KEY", "SIZE", "AGE", "LAST USE",
             "HITS");
  for (const auto& entry : entries) {
    fmt::print("{:<48} {:<10} {:>10} {:>6} {:>9} {:>6}\n", entry.name, entry.key.substr(0, 8),
               human_bytes(entry.bytes), human_age(entry.written), human_age(entry.last_used),
               entry.hits);
  }
  fmt::print("{} entries, {} in {}\n", entries.size(), human_bytes(bytes), dir.string());
  return 0;
}

struct HintOptions {
  KernelOptions kernel;
  flexjit::cli::HintOptions hints;
};

// The tile map of one request and head (tools/cli/hints.cpp, docs/hints.md).
int command_hints(const std::string& path, HintOptions& options) {
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto selection = options.kernel.selection();
  if (!selection) return report_error(selection.error());
  auto mask = flexjit::lower_variant(file.module, *selection);
  if (!mask) return report_error(mask.error());
  std::vector<std::string> scalar_settings;
  auto arrays = flexjit::cli::hint_arrays(*mask, options.hints.settings, options.hints.b,
                                          options.hints.h, scalar_settings);
  if (!arrays) return report_error(arrays.error());
  auto scalars = parameter_values(*mask, scalar_settings);
  if (!scalars) return report_error(scalars.error());
  const flexjit::HostParams params(*mask, std::move(*scalars), std::move(*arrays));
  return flexjit::cli::print_hints(*mask, options.kernel.mask, params, options.hints);
}

struct RunOptions {
  KernelOptions kernel;
  std::vector<std::string> settings;
  int num_heads = 32;
  int num_kv_heads = 8;
  std::string query_lens = "1,7,300";
  std::string context_lens = "511,64,0";
  std::string layout = "nhd";
  std::string kv_scale = "head";  // an fp8 cache's scales: one per "tensor" or per kv "head"
  bool encoder = false;           // contiguous K/V (fj_varlen_attention); context lengths are 0
  bool check_bounds = false;      // report the first out-of-range array read
  std::string sinks;              // attention sink logits (validate.h's parse_sinks)
  uint64_t seed = 1;
  int iterations = 20;
  float scale = 0.0f;               // softmax scale; 0: 1 / sqrt(head dim)
  std::string device;               // "cuda" or "cpu"; empty: cuda when a GPU is usable, else cpu
  bool page_size_given = false;     // --page-size was on the command line
  bool context_lens_given = false;  // --context-lens was on the command line
  bool kv_scale_given = false;      // --kv-scale was on the command line
  int kv_shards = 1;                // context parallelism: shards of each request's keys
  int kv_interleave = 1;            // keys per run dealt to one shard
  std::string kv_shard_layout = "interleaved";
  bool kv_interleave_given = false;  // --kv-interleave was on the command line
};

int command_run(const std::string& path, RunOptions& options) {
  const bool cpu =
      options.device.empty() ? !flexjit::inspect::cuda_device_usable() : options.device == "cpu";
  auto batch = flexjit::cli::check_run_shape({
      .head_dim = options.kernel.head_dim,
      .page_size = options.kernel.page_size,
      .page_size_given = options.page_size_given,
      .num_heads = options.num_heads,
      .num_kv_heads = options.num_kv_heads,
      .query_lens = options.query_lens,
      .context_lens = options.context_lens,
      .context_lens_given = options.context_lens_given,
      .encoder = options.encoder,
      .cpu = cpu,
      .iterations = options.iterations,
      .scale = options.scale,
      .sinks = options.sinks,
      .kv_fp8 = options.kernel.kv_dtype == "fp8",
      .kv_scale_given = options.kv_scale_given,
      .kv_shards = options.kv_shards,
      .kv_interleave = options.kv_interleave,
      .kv_interleave_given = options.kv_interleave_given,
      .kv_shards_contiguous = options.kv_shard_layout == "contiguous",
  });
  if (!batch) return report_error(batch.error());
  const LoadedFile file = load_file(path);
  if (!file.ok) return 1;
  auto selection = options.kernel.selection();
  if (!selection) return report_error(selection.error());
  auto mask = flexjit::lower_variant(file.module, *selection);
  if (!mask) return report_error(mask.error());
  const std::vector<int>& query_lens = batch->query_lens;
  const std::vector<int>& context_lens = batch->context_lens;
  const int num_reqs = static_cast<int>(query_lens.size());
  std::vector<std::string> scalar_settings;
  auto set = flexjit::cli::set_arrays(*mask, options.settings, std::max(num_reqs - 1, 0),
                                      std::max(options.num_heads - 1, 0), scalar_settings);
  if (!set) return report_error(set.error());
  auto params = parameter_values(*mask, scalar_settings);
  if (!params) return report_error(params.error());

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
  config.score = options.kernel.score;
  config.defines = selection->defines;
  config.dtype = options.kernel.dtype == "bf16" ? FJ_DTYPE_BF16 : FJ_DTYPE_FP16;
  config.head_dim = options.kernel.head_dim;
  config.page_size = options.kernel.page_size;
  config.num_heads = options.num_heads;
  config.num_kv_heads = options.num_kv_heads;
  config.layout = options.layout == "hnd" ? flexjit::KvLayout::HND : flexjit::KvLayout::NHD;
  config.kv_fp8 = options.kernel.kv_dtype == "fp8";
  config.kv_scale =
      options.kv_scale == "tensor" ? flexjit::KvScale::Tensor : flexjit::KvScale::Head;
  config.contiguous = options.encoder;
  config.query_lens = query_lens;
  config.context_lens = context_lens;
  config.params = *params;
  // Arrays given with --set replace the random ones (shaped by their dimensions).
  if (std::find(set->given.begin(), set->given.end(), true) != set->given.end()) {
    int max_seq_len = 0;
    for (int r = 0; r < num_reqs; ++r)
      max_seq_len = std::max(max_seq_len, query_lens[r] + context_lens[r]);
    config.arrays = flexjit::random_arrays(mask->arrays, num_reqs, options.num_heads, max_seq_len,
                                           options.seed);
    for (size_t slot = 0; slot < set->given.size(); ++slot)
      if (set->given[slot]) config.arrays[slot] = std::move(set->arrays[slot]);
  }
  config.seed = options.seed;
  config.scale = options.scale;
  config.timing_iterations = options.iterations;
  config.check_bounds = options.check_bounds;
  config.sinks = batch->sinks;
  // Sharded: the merged shards are checked against the reference (and the unsharded call);
  // their launches are not timed.
  std::optional<flexjit::ShardCheckReport> sharded;
  if (options.kv_shards > 1) {
    flexjit::ShardCheckConfig shards;
    shards.count = options.kv_shards;
    shards.layout = options.kv_shard_layout == "contiguous" ? flexjit::ShardLayout::Contiguous
                                                            : flexjit::ShardLayout::Interleaved;
    shards.interleave = options.kv_interleave;
    shards.seed = options.seed;
    config.timing_iterations = 0;
    // CUDA: through a plan per shard, so that decode rows take the split-KV decode kernel.
    if (cpu) {
      config.arch = "cpu";
    } else {
      config.launch = flexjit::PagedLaunch::Planned;
    }
    auto shard_report = flexjit::run_shard_check(context, program, config, shards);
    if (!shard_report) return report_error(shard_report.error());
    sharded = std::move(*shard_report);
  }
  auto report = sharded ? flexjit::Result<flexjit::PagedCheckReport>(sharded->merged)
                : cpu   ? flexjit::run_cpu_paged_check(context, program, config)
                        : flexjit::run_paged_check(context, program, config);
  if (!report) return report_error(report.error());

  const double tolerance = flexjit::relative_error_tolerance(config);
  const bool pass = report->relative_error <= tolerance && report->bad_outputs == 0 &&
                    report->empty_rows_wrong == 0 &&
                    (!sharded || (sharded->unsharded.relative <= tolerance &&
                                  sharded->unsharded.mismatched_non_finite == 0));
  const double flops = 4.0 * options.kernel.head_dim * report->visible_pairs;
  fmt::print("kernel          {}\n", report->kernel_name);
  fmt::print("device          {}\n",
             cpu ? fmt::format("cpu ({} threads)", std::thread::hardware_concurrency()) : "cuda");
  fmt::print(
      "batch           {} requests, {} query tokens, {} heads / {} kv heads, {} layout{}\n",
      query_lens.size(), report->num_tokens, options.num_heads, options.num_kv_heads,
      options.encoder ? "contiguous (encoder)" : options.layout,
      config.kv_fp8 ? fmt::format(", fp8 e4m3 cache (scales per {})", options.kv_scale) : "");
  if (sharded) {
    fmt::print("shards          {} {}, merged (fj_merge_states_n); keys per shard {}\n",
               options.kv_shards,
               options.kv_shard_layout == "contiguous"
                   ? std::string("contiguous ranges")
                   : fmt::format("interleaved in runs of {}", options.kv_interleave),
               fmt::join(sharded->keys_per_shard, ", "));
    fmt::print(
        "unsharded call  relative difference {:.3e}, lse max abs {:.3e}, {} rows finite on "
        "one side only; {} rows a shard saw no key of\n",
        sharded->unsharded.relative, sharded->unsharded.lse_max_abs,
        sharded->unsharded.mismatched_non_finite, sharded->rows_empty_in_some_shard);
  }
  fmt::print("relative error  {:.3e} (tolerance {:.0e}), max abs {:.3e}, lse max abs {:.3e}\n",
             report->relative_error, tolerance, report->max_abs_error, report->lse_max_abs_error);
  fmt::print("bad outputs     {} NaN/Inf or unwritten, {} empty rows not 0/-inf (or sink)\n",
             report->bad_outputs, report->empty_rows_wrong);
  if (options.check_bounds) {
    // The debug word's codes (flexjit.h, bad_index): the first report of any kind.
    const int32_t* word = report->bad_index;
    if (word[0] == 1) {
      const int slot = word[1];
      const std::string name =
          slot >= 0 && slot < static_cast<int>(mask->arrays.size()) ? mask->arrays[slot].name : "?";
      fmt::print("array bounds    first out-of-range read: {}[{}, {}] (reads 0)\n", name, word[2],
                 word[3]);
    } else if (word[0] == 2) {
      fmt::print(
          "block table     request {}'s logical block {} is {}, outside the cache (its keys "
          "absent)\n",
          word[1], word[2], word[3]);
    } else if (word[0] == 3) {
      fmt::print(
          "query lengths   request {} has {} query rows, more than max_query_len {} (its "
          "rows zeroed)\n",
          word[1], word[2], word[3]);
    } else if (word[0] != 0) {
      fmt::print("debug word      unknown report {}: {}, {}, {}\n", word[0], word[1], word[2],
                 word[3]);
    } else {
      fmt::print("array bounds    every array read was in range\n");
    }
  }
  if (report->kernel_ms > 0 && cpu) {
    fmt::print("call time       {:.3f} ms ({:.1f} effective GFLOP/s over {} visible pairs)\n",
               report->kernel_ms, flops / (report->kernel_ms * 1e-3) / 1e9, report->visible_pairs);
  } else if (report->kernel_ms > 0) {
    fmt::print("kernel time     {:.4f} ms ({:.1f} effective TFLOP/s over {} visible pairs)\n",
               report->kernel_ms, flops / (report->kernel_ms * 1e-3) / 1e12, report->visible_pairs);
  }
  fmt::print("{}\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

// --mask, --score, -D and, for kernels, --head-dim, --dtype, --page-size. The head dims
// accepted are the template's.
void add_selection_options(CLI::App* command, KernelOptions& options, bool mask_required) {
  CLI::Option* mask = command->add_option("--mask", options.mask, "mask or variant");
  if (mask_required) mask->required();
  command->add_option("--score", options.score, "score to pair with the mask");
  command->add_option("-D,--define", options.defines, "override a const: NAME=VALUE");
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const flexjit::supported::Dtype& d : flexjit::supported::kDtypes)
    names.emplace_back(d.name);
  return names;
}

void add_kernel_options(CLI::App* command, KernelOptions& options, bool mask_required) {
  add_selection_options(command, options, mask_required);
  const CLI::Validator supported_head_dim(
      [](std::string& text) {
        const auto value = parse_int(text);
        return value && flexjit::supported::head_dim(*value)
                   ? std::string()
                   : "head dim " + text + " is not supported (" +
                         flexjit::supported::head_dims_text() + ")";
      },
      flexjit::supported::head_dims_text("|"));
  command->add_option("--head-dim", options.head_dim, "head dimension")->check(supported_head_dim);
  command->add_option("--dtype", options.dtype, "q/k/v/out element type")
      ->check(CLI::IsMember(dtype_names()));
  command->add_option("--page-size", options.page_size, "tokens per KV-cache block");
  command
      ->add_option("--kv-dtype", options.kv_dtype,
                   "K/V cache element type: auto (--dtype's) or fp8 (e4m3, read with scales; "
                   "paged kernels only)")
      ->check(CLI::IsMember({"auto", "fp8"}));
}

}  // namespace

int main(int argc, char** argv) {
  // `hints`, `run --device cpu` and the checks load a mask's host code from the disk cache.
  flexjit::set_default_host_code_store(flexjit::inspect::host_code_store());
  CLI::App app{"flexjit: attention masks compiled to paged attention kernels"};
  // CLI11 echoes the offending argument: its control bytes are shown as '?'.
  app.failure_message([](const CLI::App* failed, const CLI::Error& error) {
    return flexjit::dsl::printable(CLI::FailureMessage::simple(failed, error));
  });
  app.require_subcommand(1);
  // Every option's --help shows its default (inherited by the subcommands added below).
  app.option_defaults()->always_capture_default();
  // The runtime's version (fj_runtime_version, FJ_VERSION of flexjit.h), "flexjit 0.4.0".
  const uint32_t version = fj_runtime_version();
  app.set_version_flag("--version", fmt::format("flexjit {}.{}.{}", version / 10000,
                                                version / 100 % 100, version % 100));
  std::string path;

  bool check_json = false;
  CLI::App* check = app.add_subcommand("check", "parse and check a mask file; exit 1 on errors");
  check->add_option("file", path, "mask file")->required();
  check->add_flag("--json", check_json, "print the diagnostics as JSON on stdout (for editors)");

  KernelOptions ir_options;
  bool ir_passes = false;
  CLI::App* ir = app.add_subcommand("ir", "print the IR of each mask, score and variant");
  ir->add_option("file", path, "mask file")->required();
  add_selection_options(ir, ir_options, false);
  ir->add_flag("--passes", ir_passes, "show the IR as lowered and after each pass");

  KernelOptions emit_options;
  CLI::App* emit = app.add_subcommand("emit", "print the generated CUDA source of a kernel");
  emit->add_option("file", path, "mask file")->required();
  add_kernel_options(emit, emit_options, true);
  emit->add_option("--arch", emit_options.arch, "target architecture (sm_80, sm_90a, ...)");

  CompileOptions compile_options;
  compile_options.kernel.arch.clear();
  CLI::App* compile = app.add_subcommand(
      "compile", "compile kernels with NVRTC (through the disk cache) and inspect them");
  compile->add_option("file", path, "mask file")->required();
  // --mask is optional here: --all compiles every mask.
  add_kernel_options(compile, compile_options.kernel, false);
  compile->add_option("--arch", compile_options.kernel.arch,
                      "target architecture (sm_80, sm_90a, ...); default: the current GPU's");
  compile->add_flag("--all", compile_options.all,
                    "every mask of the file x --head-dims x --dtypes x --page-sizes, in parallel");
  compile->add_option("--head-dims", compile_options.head_dims,
                      "with --all: head dims, e.g. 64,128");
  compile->add_option("--dtypes", compile_options.dtypes, "with --all: dtypes, e.g. bf16,fp16");
  compile->add_option("--page-sizes", compile_options.page_sizes,
                      "with --all: page sizes, e.g. 16,32");
  compile->add_option("--jobs,-j", compile_options.jobs,
                      "with --all: compile threads (0: one per hardware thread)");
  compile->add_flag("--ptx", compile_options.ptx, "print the PTX (for the virtual architecture)");
  compile->add_flag("--sass", compile_options.sass,
                    "print the SASS (needs cuobjdump or nvdisasm from the CUDA toolkit)");
  compile->add_flag("--resources", compile_options.resources,
                    "registers, shared memory, spills and stack, from ptxas's report");
  compile->add_flag("--json", compile_options.json, "with --resources: print JSON");

  std::string cache_action;
  bool cache_json = false;
  CLI::App* cache = app.add_subcommand(
      "cache",
      "the disk kernel cache ($FLEXJIT_CACHE_DIR, else $XDG_CACHE_HOME/flexjit, else "
      "~/.cache/flexjit): ls, stats, clear");
  cache->add_option("action", cache_action, "ls | stats | clear")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "clear"}));
  cache->add_flag("--json", cache_json, "ls, stats: print JSON");

  HintOptions hint_options;
  flexjit::cli::HintOptions& hint = hint_options.hints;
  CLI::App* hints = app.add_subcommand(
      "hints", "the tile map of a mask: classes, exactness, SVG, JSON, FlexAttention BlockMask");
  hints->add_option("file", path, "mask file")->required();
  add_selection_options(hints, hint_options.kernel, true);
  hints->add_option("--q-len", hint.q_len, "query tokens (the last of the keys)");
  hints->add_option("--kv-len", hint.kv_len, "keys");
  hints->add_option("--tile", hint.tile, "tile shape QxK");
  hints->add_option("--set", hint.settings,
                    "runtime parameter NAME=VALUE; arrays: V,V*N,... (';' between rows)");
  hints->add_option("--b", hint.b, "request index the mask sees");
  hints->add_option("--h", hint.h, "query head the mask sees");
  hints->add_flag("--exact", hint.exact,
                  "check exactness by brute force even above 2048 x 2048 pairs");
  hints->add_flag("--json", hint.json, "print the map, counts and exactness as JSON");
  hints->add_option("--svg", hint.svg, "write an SVG picture of the map to PATH");
  hints->add_option("--blockmask", hint.block_mask,
                    "write FlexAttention BlockMask tensors (JSON) to PATH");

  RunOptions run_options;
  CLI::App* run = app.add_subcommand(
      "run",
      "run a kernel (GPU or CPU) on random paged inputs and check it against a float64 reference");
  run->add_option("file", path, "mask file")->required();
  add_kernel_options(run, run_options.kernel, true);
  run->add_option("--set", run_options.settings,
                  "runtime parameter NAME=VALUE; arrays as in hints (V*N runs, ';' between rows), "
                  "random where not given");
  run->add_option("--heads", run_options.num_heads, "query heads");
  run->add_option("--kv-heads", run_options.num_kv_heads, "kv heads (divides --heads)");
  run->add_option("--query-lens", run_options.query_lens, "new tokens per request, e.g. 1,7,300");
  run->add_option("--context-lens", run_options.context_lens,
                  "cached keys before the new tokens, per request");
  run->add_option("--layout", run_options.layout, "KV cache layout")
      ->check(CLI::IsMember({"nhd", "hnd"}));
  run->add_option("--kv-scale", run_options.kv_scale,
                  "with --kv-dtype fp8: one random scale per tensor, or one per kv head")
      ->check(CLI::IsMember({"tensor", "head"}));
  run->add_flag("--encoder", run_options.encoder,
                "contiguous K/V packed like q (fj_varlen_attention); no cached context");
  run->add_option("--seed", run_options.seed, "random seed");
  run->add_option("--scale", run_options.scale,
                  "softmax scale (score = scale * q.k); 0, the default: 1 / sqrt(head dim)");
  run->add_option("--sinks", run_options.sinks,
                  "attention sink logits (gpt-oss): one for every head, or one per head, "
                  "comma-separated; -inf is no sink");
  run->add_option("--kv-shards", run_options.kv_shards,
                  "context parallelism: deal each request's keys into N shards, run each as a "
                  "sharded call (on CUDA through a plan) and merge them "
                  "(docs/context_parallel.md); 1: unsharded");
  run->add_option("--kv-interleave", run_options.kv_interleave,
                  "with --kv-shards: keys dealt to one shard in a row (vLLM's "
                  "cp_kv_cache_interleave_size)");
  run->add_option("--kv-shard-layout", run_options.kv_shard_layout,
                  "with --kv-shards: interleaved (vLLM's DCP) or contiguous ranges cut at random "
                  "points")
      ->check(CLI::IsMember({"interleaved", "contiguous"}));
  run->add_flag("--check-bounds", run_options.check_bounds,
                "report the first array read outside its array (debug launch)");
  run->add_option("--iterations", run_options.iterations, "timed launches (0: no timing)");
  run->add_option("--device", run_options.device,
                  "where to run: cuda (a GPU) or cpu (the CPU backend, docs/cpu.md); default: "
                  "cuda when a GPU is usable, else cpu")
      ->check(CLI::IsMember({"cuda", "cpu"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  compile_options.lists_given =
      compile->count("--head-dims") + compile->count("--dtypes") + compile->count("--page-sizes") >
      0;
  run_options.page_size_given = run->count("--page-size") > 0;
  run_options.context_lens_given = run->count("--context-lens") > 0;
  run_options.kv_scale_given = run->count("--kv-scale") > 0;
  run_options.kv_interleave_given = run->count("--kv-interleave") > 0;
  if (*check) return command_check(path, check_json);
  if (*ir) return command_ir(path, ir_options, ir_passes);
  if (*emit) return command_emit(path, emit_options);
  if (*compile) return command_compile(path, compile_options);
  if (*cache) return command_cache(cache_action, cache_json);
  if (*hints) return command_hints(path, hint_options);
  if (*run) return command_run(path, run_options);
  return 2;
}
