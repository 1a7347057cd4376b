// Run-time compilation of CUDA source to a cubin with NVRTC.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "flexjit/compiler/result.h"

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

// What ptxas reports for one entry function when NVRTC runs it with --ptxas-options=-v.
struct PtxasResources {
  int registers = 0;
  int barriers = 0;
  int64_t shared_bytes = 0;    // static shared memory; dynamic shared memory is set at launch
  int64_t constant_bytes = 0;  // cmem[0]: kernel parameters and constants
  int64_t stack_frame_bytes = 0;
  int64_t spill_store_bytes = 0;
  int64_t spill_load_bytes = 0;
  // ptxas reported "wgmma.mma_async instructions are serialized" for the function (C7514,
  // C7520: each MMA waits for the previous one; docs/hopper.md says what causes it).
  bool wgmma_serialized = false;
};

// The option that makes NVRTC's log carry ptxas's resource report.
inline constexpr std::string_view kPtxasVerboseOption = "--ptxas-options=-v";

// Parses ptxas's report on `function` out of an NVRTC log; an Error when the log has none.
Result<PtxasResources> parse_ptxas_resources(std::string_view log, std::string_view function);

// The version of the NVRTC library loaded at run time, "major.minor" (e.g. "13.0").
std::string nvrtc_version_string();

}  // namespace flexjit
