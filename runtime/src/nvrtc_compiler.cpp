#include "nvrtc_compiler.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <memory>
#include <string>
#include <vector>

namespace flexjit {
namespace {

Error nvrtc_error(std::string_view what, nvrtcResult code) {
  return Error{fmt::format("{} failed: {}", what, nvrtcGetErrorString(code)), {}};
}

struct ProgramDeleter {
  void operator()(_nvrtcProgram* program) const { nvrtcDestroyProgram(&program); }
};
using ProgramHandle = std::unique_ptr<_nvrtcProgram, ProgramDeleter>;

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
  // The size counts the terminating NUL.
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  return log;
}

}  // namespace

Result<NvrtcOutput> nvrtc_compile(std::string_view program_name, std::string_view source,
                                  std::span<const NvrtcHeader> headers, std::string_view arch,
                                  std::span<const std::string> extra_options) {
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
  if (nvrtcResult code = nvrtcCreateProgram(&raw_program, source_text.c_str(), name.c_str(),
                                            static_cast<int>(headers.size()),
                                            header_text_ptrs.data(), header_name_ptrs.data());
      code != NVRTC_SUCCESS) {
    return nvrtc_error("nvrtcCreateProgram", code);
  }
  ProgramHandle program(raw_program);

  const nvrtcResult compiled =
      nvrtcCompileProgram(program.get(), static_cast<int>(option_ptrs.size()), option_ptrs.data());
  std::string log = program_log(program.get());
  if (compiled != NVRTC_SUCCESS) {
    // NVRTC's log names the error; the options make the failure reproducible.
    const std::string options_line = fmt::format("options: {}", fmt::join(options, " "));
    return Error{fmt::format("NVRTC failed to compile {}", name),
                 log.empty() ? options_line : fmt::format("{}\n{}", log, options_line)};
  }

  size_t cubin_size = 0;
  if (nvrtcResult code = nvrtcGetCUBINSize(program.get(), &cubin_size); code != NVRTC_SUCCESS) {
    return nvrtc_error("nvrtcGetCUBINSize", code);
  }
  std::string cubin(cubin_size, '\0');
  if (nvrtcResult code = nvrtcGetCUBIN(program.get(), cubin.data()); code != NVRTC_SUCCESS) {
    return nvrtc_error("nvrtcGetCUBIN", code);
  }
  return NvrtcOutput{std::move(cubin), std::move(log)};
}

std::string nvrtc_version_string() {
  int major = 0;
  int minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

}  // namespace flexjit
