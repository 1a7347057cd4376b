// Run-time compilation of CUDA source to a cubin with NVRTC.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "flexjit/compiler/result.h"
#include "flexjit/internal/inspect.h"  // PtxasResources

namespace flexjit {

// A header the compiled source may #include by `name` ("fj_ops.cuh"), supplied as text.
struct NvrtcHeader {
  std::string_view name;
  std::string_view text;
};

struct NvrtcOutput {
  std::string cubin;  // an ELF image for cuModuleLoadData
  std::string log;    // NVRTC's messages (warnings), possibly empty
};

// Compiles `source` to a cubin for `arch` ("sm_80", "sm_90a"). Options always passed:
// --gpu-architecture=<arch> -std=c++17, then `extra_options` in order. The log is fetched even
// when compilation fails; then the Error's message is "NVRTC failed to compile <name>" and its
// log holds NVRTC's log followed by the options used. Thread-safe.
Result<NvrtcOutput> nvrtc_compile(std::string_view program_name, std::string_view source,
                                  std::span<const NvrtcHeader> headers, std::string_view arch,
                                  std::span<const std::string> extra_options);

// Compiles `source` to PTX for a virtual architecture ("compute_90a"), with the same options
// and errors as nvrtc_compile. For inspection (`flexjit compile --ptx`); kernels load cubins.
Result<NvrtcOutput> nvrtc_compile_ptx(std::string_view program_name, std::string_view source,
                                      std::span<const NvrtcHeader> headers,
                                      std::string_view virtual_arch,
                                      std::span<const std::string> extra_options);

// The option that makes NVRTC's log carry ptxas's resource report.
inline constexpr std::string_view kPtxasVerboseOption = "--ptxas-options=-v";

// Whether `option` is passed on to ptxas (--ptxas-options=...): it changes the cubin, not the
// PTX.
inline bool is_ptxas_option(std::string_view option) {
  return option.starts_with("--ptxas-options=");
}

// Parses ptxas's report on `function` out of an NVRTC log; an Error when the log has none.
Result<PtxasResources> parse_ptxas_resources(std::string_view log, std::string_view function);

}  // namespace flexjit
