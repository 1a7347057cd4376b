// What the C API's opaque handles hold. Internal: only the C API and in-process tools
// (the CLI, tests) see these definitions.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/ast.h"
#include "flexjit/flexjit.h"
#include "kernel_cache.h"
#include "kernel_source.h"

struct fj_context {
  flexjit::KernelCache cache;

  // Last error per calling thread, so concurrent callers do not read each other's messages.
  mutable std::mutex error_mutex;
  mutable std::unordered_map<std::thread::id, std::string> last_errors;
};

struct fj_program {
  fj_context* context = nullptr;
  flexjit::dsl::Module module;
  std::vector<flexjit::RuntimeParam> params;  // in slot order

  // Masks lowered so far, by name (lowering is cheap but kernels are requested repeatedly).
  mutable std::mutex masks_mutex;
  mutable std::map<std::string, flexjit::MaskFunction, std::less<>> masks;
};

struct fj_kernel {
  fj_context* context = nullptr;
  std::shared_ptr<const flexjit::CompiledKernel> compiled;
  flexjit::PrefillKernelConfig config;
  int num_params = 0;
};

namespace flexjit {

// The lowered mask `name` of a program (cached on the program).
Result<MaskFunction> program_mask(const fj_program& program, std::string_view name);

}  // namespace flexjit
