#include "jit/nvrtc_library.h"

#include <cuda.h>  // CUDA_VERSION: the toolkit whose nvrtc.h this is built against
#include <dlfcn.h>
#include <fmt/format.h>

#include <sys/stat.h>

#include <mutex>

namespace flexjit {
namespace {

constexpr int kCudaMajor = CUDA_VERSION / 1000;

// The folder holding libflexjit_runtime.so (or the executable this code is linked into).
std::filesystem::path own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&own_directory), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::error_code error;
  const std::filesystem::path path = std::filesystem::canonical(info.dli_fname, error);
  return error ? std::filesystem::path() : path.parent_path();
}

#define FJ_STRINGIFY(x) #x
#define FJ_SYMBOL_NAME(name) FJ_STRINGIFY(name)

// Fills `api` from `library`; the names of the entry points it lacks.
std::vector<std::string> resolve(void* library, NvrtcApi& api) {
  std::vector<std::string> missing;
#define FJ_RESOLVE_ENTRY(name)                                                           \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, FJ_SYMBOL_NAME(name))); \
  if (api.name == nullptr) missing.emplace_back(FJ_SYMBOL_NAME(name));
  FJ_FOR_EACH_NVRTC_ENTRY(FJ_RESOLVE_ENTRY)
#undef FJ_RESOLVE_ENTRY
  return missing;
}

#undef FJ_SYMBOL_NAME
#undef FJ_STRINGIFY

Result<const NvrtcApi*> load_nvrtc(NvrtcApi& api) {
  std::vector<std::string> failures;
  for (const std::string& candidate : nvrtc_candidates(environment(), own_directory())) {
    // A path is tried only when the file is there, so the error lists real failures; a bare
    // name goes to the loader.
    std::error_code error;
    if (candidate.find('/') != std::string::npos && !std::filesystem::exists(candidate, error)) {
      failures.push_back(fmt::format("{} (no such file)", candidate));
      continue;
    }
    void* library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = dlerror();
      failures.push_back(
          fmt::format("{} ({})", candidate, reason != nullptr ? reason : "unknown reason"));
      continue;
    }
    if (std::vector<std::string> missing = resolve(library, api); !missing.empty()) {
      api = NvrtcApi{};
      dlclose(library);
      failures.push_back(fmt::format("{} (lacks {})", candidate, fmt::join(missing, ", ")));
      continue;
    }
    // Never closed: compiles may run until the process exits.
    return &api;
  }
  return Error{fmt::format("cannot load NVRTC (libnvrtc.so.{}), which compiling a GPU kernel "
                           "needs; install the CUDA {} toolkit or `pip install "
                           "nvidia-cuda-nvrtc`, or set FLEXJIT_NVRTC to the library's path"
                           "; searched:\n  {}",
                           kCudaMajor, kCudaMajor, fmt::join(failures, "\n  ")),
               {}};
}

}  // namespace

std::vector<std::string> nvrtc_candidates(const Environment& env,
                                          const std::filesystem::path& library_dir) {
  if (!env.nvrtc_library.empty()) return {env.nvrtc_library.string()};
  const std::string file = fmt::format("libnvrtc.so.{}", kCudaMajor);
  std::vector<std::string> candidates;
  // site-packages/flexjit/lib/libflexjit_runtime.so -> site-packages/nvidia/cu13/lib.
  std::filesystem::path dir = library_dir;
  for (int up = 0; up < 3 && !dir.empty() && dir.has_relative_path(); ++up) {
    dir = dir.parent_path();
    candidates.push_back(
        (dir / "nvidia" / fmt::format("cu{}", kCudaMajor) / "lib" / file).string());
    candidates.push_back((dir / "nvidia" / "cuda_nvrtc" / "lib" / file).string());
  }
  if (!env.cuda_home.empty()) candidates.push_back((env.cuda_home / "lib64" / file).string());
  candidates.push_back("/usr/local/cuda/lib64/" + file);
  candidates.push_back(file);
  return candidates;
}

std::optional<std::string> nvrtc_file_identity(const std::vector<std::string>& candidates) {
  for (const std::string& candidate : candidates) {
    if (candidate.find('/') == std::string::npos) break;  // the loader's: only loading tells
    std::error_code error;
    const std::filesystem::path path = std::filesystem::canonical(candidate, error);
    struct stat info {};
    if (error || ::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    return fmt::format("{} {} {}.{:09}", path.string(), info.st_size, info.st_mtim.tv_sec,
                       info.st_mtim.tv_nsec);
  }
  return std::nullopt;
}

std::string nvrtc_identity() {
  if (std::optional<std::string> file =
          nvrtc_file_identity(nvrtc_candidates(environment(), own_directory()))) {
    return *file;
  }
  return nvrtc_version_string();
}

std::string nvrtc_version_string() {
  int major = 0;
  int minor = 0;
  Result<const NvrtcApi*> loaded = nvrtc_api();
  if (!loaded || (*loaded)->nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

Result<const NvrtcApi*> nvrtc_api() {
  static NvrtcApi api;
  static Result<const NvrtcApi*> loaded = Error{};
  static std::once_flag once;
  std::call_once(once, [] { loaded = load_nvrtc(api); });
  return loaded;
}

}  // namespace flexjit
