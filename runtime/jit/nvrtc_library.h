// NVRTC, loaded at run time like the CUDA driver (launch/cuda_driver.h). Nothing links
// libnvrtc, so the library loads, and the CPU backend runs, on machines without the CUDA
// toolkit; only compiling a GPU kernel needs NVRTC. nvrtc.h is used for the types and
// prototypes only.
#pragma once

#include <nvrtc.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "flexjit/compiler/result.h"
#include "jit/environment.h"

// Every NVRTC entry point the runtime calls.
#define FJ_FOR_EACH_NVRTC_ENTRY(X) \
  X(nvrtcGetErrorString)           \
  X(nvrtcVersion)                  \
  X(nvrtcCreateProgram)            \
  X(nvrtcDestroyProgram)           \
  X(nvrtcCompileProgram)           \
  X(nvrtcGetProgramLogSize)        \
  X(nvrtcGetProgramLog)            \
  X(nvrtcGetCUBINSize)             \
  X(nvrtcGetCUBIN)                 \
  X(nvrtcGetPTXSize)               \
  X(nvrtcGetPTX)

namespace flexjit {

#define FJ_NVRTC_ENTRY_MEMBER(name) decltype(&::name) name = nullptr;
// One function pointer per NVRTC entry point, named after it; all non-null once loaded.
struct NvrtcApi {
  FJ_FOR_EACH_NVRTC_ENTRY(FJ_NVRTC_ENTRY_MEMBER)
};
#undef FJ_NVRTC_ENTRY_MEMBER

// Where NVRTC is looked for, in order (the first that loads wins):
//   1. $FLEXJIT_NVRTC, a path to the library, and nothing else when it is set;
//   2. NVIDIA's nvidia-cuda-nvrtc wheel beside the Python package: for each of the three
//      folders above `library_dir` (the folder of libflexjit_runtime.so, site-packages/flexjit/lib
//      in the wheel), nvidia/cu<N>/lib and nvidia/cuda_nvrtc/lib (the CUDA 13 and CUDA 12
//      layouts of that wheel);
//   3. $CUDA_HOME/lib64, then /usr/local/cuda/lib64;
//   4. the dynamic loader's search path (a bare file name).
// The file name is libnvrtc.so.<N>, N the CUDA major version of the headers flexjit was built
// with (NVRTC's ABI is stable within a major version).
std::vector<std::string> nvrtc_candidates(const Environment& env,
                                          const std::filesystem::path& library_dir);

// The version of the NVRTC library loaded at run time, "major.minor" (e.g. "13.0"); "unknown"
// when none loads.
std::string nvrtc_version_string();

// What identifies the NVRTC that nvrtc_api() loads, for cache keys, without loading it (a
// dlopen of the ~100 MB library and its relocations took 5-9 ms, most of a new process's disk
// hit): nvrtc_file_identity of the candidates; where no candidate path exists (a bare name, left
// to the loader), the loaded library's version. A candidate that exists but fails to load only
// costs keys that never match.
std::string nvrtc_identity();

// The first of `candidates` (in nvrtc_candidates' order) that is a path to an existing file:
// its resolved path, size and modification time; nullopt at the first bare name or when none is.
std::optional<std::string> nvrtc_file_identity(const std::vector<std::string>& candidates);

// The NVRTC table, loaded on first call (thread-safe) and kept for the life of the process.
// An Error naming every place searched (and why each failed) when none loads, or the symbol
// missing from the library that loaded.
Result<const NvrtcApi*> nvrtc_api();

}  // namespace flexjit
