#include "jit/nvrtc_compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "jit/nvrtc_library.h"

namespace flexjit {
namespace {

Error nvrtc_error(const NvrtcApi& api, std::string_view what, nvrtcResult code) {
  return Error{fmt::format("{} failed: {}", what, api.nvrtcGetErrorString(code)), {}};
}

struct ProgramDeleter {
  const NvrtcApi* api;
  void operator()(_nvrtcProgram* program) const { api->nvrtcDestroyProgram(&program); }
};
using ProgramHandle = std::unique_ptr<_nvrtcProgram, ProgramDeleter>;

std::string program_log(const NvrtcApi& api, nvrtcProgram program) {
  size_t size = 0;
  if (api.nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  // The size counts the terminating NUL.
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  return log;
}

}  // namespace

namespace {

// NVRTC's program and log after compiling `source`; an Error (with the log and options) when
// the compile fails.
struct CompiledProgram {
  const NvrtcApi* api;
  ProgramHandle program;
  std::string log;
};

Result<CompiledProgram> compile_program(std::string_view program_name, std::string_view source,
                                        std::span<const NvrtcHeader> headers, std::string_view arch,
                                        std::span<const std::string> extra_options) {
  Result<const NvrtcApi*> loaded = nvrtc_api();
  if (!loaded) return loaded.error();
  const NvrtcApi& api = **loaded;
  // NVRTC takes NUL-terminated strings; string_views need not be.
  const std::string name(program_name);
  const std::string source_text(source);
  std::vector<std::string> header_names;
  std::vector<std::string> header_texts;
  header_names.reserve(headers.size());
  header_texts.reserve(headers.size());
  for (const NvrtcHeader& header : headers) {
    header_names.emplace_back(header.name);
    header_texts.emplace_back(header.text);
  }
  std::vector<const char*> header_name_ptrs;
  std::vector<const char*> header_text_ptrs;
  for (size_t i = 0; i < headers.size(); ++i) {
    header_name_ptrs.push_back(header_names[i].c_str());
    header_text_ptrs.push_back(header_texts[i].c_str());
  }

  std::vector<std::string> options = {fmt::format("--gpu-architecture={}", arch), "-std=c++17"};
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> option_ptrs;
  for (const std::string& option : options)
    option_ptrs.push_back(option.c_str());

  nvrtcProgram raw_program = nullptr;
  if (nvrtcResult code = api.nvrtcCreateProgram(&raw_program, source_text.c_str(), name.c_str(),
                                                static_cast<int>(headers.size()),
                                                header_text_ptrs.data(), header_name_ptrs.data());
      code != NVRTC_SUCCESS) {
    return nvrtc_error(api, "nvrtcCreateProgram", code);
  }
  ProgramHandle program(raw_program, ProgramDeleter{&api});

  const nvrtcResult compiled = api.nvrtcCompileProgram(
      program.get(), static_cast<int>(option_ptrs.size()), option_ptrs.data());
  std::string log = program_log(api, program.get());
  if (compiled != NVRTC_SUCCESS) {
    // NVRTC's log names the error; the options make the failure reproducible.
    const std::string options_line = fmt::format("options: {}", fmt::join(options, " "));
    return Error{fmt::format("NVRTC failed to compile {}", name),
                 log.empty() ? options_line : fmt::format("{}\n{}", log, options_line)};
  }
  return CompiledProgram{&api, std::move(program), std::move(log)};
}

}  // namespace

Result<NvrtcOutput> nvrtc_compile(std::string_view program_name, std::string_view source,
                                  std::span<const NvrtcHeader> headers, std::string_view arch,
                                  std::span<const std::string> extra_options) {
  Result<CompiledProgram> compiled =
      compile_program(program_name, source, headers, arch, extra_options);
  if (!compiled) return compiled.error();
  size_t cubin_size = 0;
  if (nvrtcResult code = compiled->api->nvrtcGetCUBINSize(compiled->program.get(), &cubin_size);
      code != NVRTC_SUCCESS) {
    return nvrtc_error(*compiled->api, "nvrtcGetCUBINSize", code);
  }
  std::string cubin(cubin_size, '\0');
  if (nvrtcResult code = compiled->api->nvrtcGetCUBIN(compiled->program.get(), cubin.data());
      code != NVRTC_SUCCESS) {
    return nvrtc_error(*compiled->api, "nvrtcGetCUBIN", code);
  }
  return NvrtcOutput{std::move(cubin), std::move(compiled->log)};
}

Result<NvrtcOutput> nvrtc_compile_ptx(std::string_view program_name, std::string_view source,
                                      std::span<const NvrtcHeader> headers,
                                      std::string_view virtual_arch,
                                      std::span<const std::string> extra_options) {
  Result<CompiledProgram> compiled =
      compile_program(program_name, source, headers, virtual_arch, extra_options);
  if (!compiled) return compiled.error();
  size_t ptx_size = 0;
  if (nvrtcResult code = compiled->api->nvrtcGetPTXSize(compiled->program.get(), &ptx_size);
      code != NVRTC_SUCCESS) {
    return nvrtc_error(*compiled->api, "nvrtcGetPTXSize", code);
  }
  std::string ptx(ptx_size, '\0');
  if (nvrtcResult code = compiled->api->nvrtcGetPTX(compiled->program.get(), ptx.data());
      code != NVRTC_SUCCESS) {
    return nvrtc_error(*compiled->api, "nvrtcGetPTX", code);
  }
  // The size counts the terminating NUL.
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return NvrtcOutput{std::move(ptx), std::move(compiled->log)};
}

Result<PtxasResources> parse_ptxas_resources(std::string_view log, std::string_view function) {
  // ptxas -v writes, per entry function:
  //   ptxas info    : Compiling entry function 'NAME' for 'sm_90a'
  //   ptxas info    : Function properties for NAME
  //       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 90 registers, used 1 barriers, 1024 bytes smem, 904 bytes cmem[0]
  // The report of `function` runs from its "Compiling entry function" line to the next one.
  const std::string start_marker = fmt::format("Compiling entry function '{}'", function);
  const size_t start = log.find(start_marker);
  if (start == std::string_view::npos) {
    return Error{fmt::format("the compile log has no ptxas report for {}", function),
                 std::string(log)};
  }
  std::string_view report = log.substr(start + start_marker.size());
  report = report.substr(0, report.find("Compiling entry function"));

  PtxasResources resources;
  bool found_registers = false;
  // Each figure is "<number> <label>": the number right before the first occurrence of label.
  auto number_before = [&](std::string_view label, auto& out) {
    const size_t at = report.find(label);
    if (at == std::string_view::npos) return false;
    size_t begin = at;
    while (begin > 0 && report[begin - 1] == ' ')
      --begin;
    size_t digits = begin;
    while (digits > 0 && report[digits - 1] >= '0' && report[digits - 1] <= '9')
      --digits;
    if (digits == begin) return false;
    out = 0;
    for (size_t i = digits; i < begin; ++i)
      out = out * 10 + (report[i] - '0');
    return true;
  };
  found_registers = number_before(" registers", resources.registers);
  number_before(" barriers", resources.barriers);
  number_before(" bytes smem", resources.shared_bytes);
  number_before(" bytes cmem[0]", resources.constant_bytes);
  number_before(" bytes stack frame", resources.stack_frame_bytes);
  number_before(" bytes spill stores", resources.spill_store_bytes);
  number_before(" bytes spill loads", resources.spill_load_bytes);
  if (!found_registers) {
    return Error{fmt::format("the ptxas report for {} has no register count", function),
                 std::string(log)};
  }
  // Performance notes name their function anywhere in the log:
  //   ptxas info : (C7514) Potential Performance Loss: wgmma.mma_async instructions are
  //   serialized due to ... in the function 'NAME'
  const std::string quoted = fmt::format("'{}'", function);
  for (size_t line_start = 0; line_start < log.size();) {
    const size_t line_end = std::min(log.find('\n', line_start), log.size());
    const std::string_view line = log.substr(line_start, line_end - line_start);
    if (line.find("wgmma.mma_async instructions are serialized") != std::string_view::npos &&
        line.find(quoted) != std::string_view::npos) {
      resources.wgmma_serialized = true;
    }
    line_start = line_end + 1;
  }
  return resources;
}

}  // namespace flexjit
