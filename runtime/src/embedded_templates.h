// The CUDA kernel templates (templates/*.cuh), embedded into the library at build time: NVRTC
// receives them as headers, and every kernel cache key hashes them.
#pragma once

#include <span>
#include <string_view>

namespace flexjit {

struct EmbeddedFile {
  std::string_view name;  // file name without directory, e.g. "fj_ops.cuh"
  std::string_view text;  // the file's bytes
};

// Every template, sorted by name. The views point into static storage.
std::span<const EmbeddedFile> embedded_templates();

}  // namespace flexjit
