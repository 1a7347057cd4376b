// Every environment variable flexjit reads, read in this one place (environment.cpp).
//
//   FLEXJIT_CACHE_DIR        disk cache directory; else $XDG_CACHE_HOME/flexjit, else
//                            $HOME/.cache/flexjit; no directory at all: memory-only caching
//   FLEXJIT_CACHE_MAX_BYTES  size cap of the disk cache, bytes with an optional K, M or G
//                            suffix (binary units); default 1G. Least recently used entries go.
//   FLEXJIT_ALWAYS_COMPILE   non-empty and not "0": never read the disk cache, kernels nor host
//                            code (still write it)
//   FLEXJIT_DUMP_DIR         write each generated source (.cu) and its compile log (.log) here
//   FLEXJIT_LOG              error | warn | info | debug (default warn); lines go to stderr
//   FLEXJIT_NVRTC            path of the NVRTC library to load (libnvrtc.so.13); else NVIDIA's
//                            nvidia-cuda-nvrtc wheel, $CUDA_HOME/lib64, /usr/local/cuda/lib64,
//                            the loader's path (jit/nvrtc_library.h)
//   CUDA_HOME                the toolkit whose cuobjdump/nvdisasm `flexjit compile --sass` runs,
//                            and where NVRTC is looked for
//   XDG_CACHE_HOME, HOME     see FLEXJIT_CACHE_DIR
//
// None of these changes generated code or NVRTC options, so none enters the kernel cache key
// (KernelCache::key); the version of the NVRTC that FLEXJIT_NVRTC or CUDA_HOME selects is hashed
// there. A variable that does change them must be hashed there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace flexjit {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

struct Environment {
  std::filesystem::path cache_dir;  // empty: no disk cache
  uint64_t cache_max_bytes = uint64_t{1} << 30;
  bool always_compile = false;
  std::filesystem::path dump_dir;  // empty: sources are dumped only when a compile fails
  LogLevel log_level = LogLevel::Warn;
  std::filesystem::path cuda_home;      // empty: not set
  std::filesystem::path nvrtc_library;  // FLEXJIT_NVRTC; empty: search (jit/nvrtc_library.h)
  // Problems with the values above (an unknown FLEXJIT_LOG level, a malformed size), to be
  // logged once by whoever first reads the environment.
  std::vector<std::string> problems;
};

// The environment as it is now. Pure apart from getenv; the tests call it after setenv.
Environment read_environment();

// The process's environment, read on first use and kept: flexjit's behaviour does not change
// under a running engine. Problems found are logged at that first read. Thread-safe.
const Environment& environment();

}  // namespace flexjit
