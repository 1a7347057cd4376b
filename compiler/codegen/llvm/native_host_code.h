// Internal to flexjit_codegen_llvm, built only with LLVM: the LLVM host code generator behind
// make_host_code (host_code.h).
#pragma once

#include <memory>

#include "flexjit/compiler/host_code.h"

namespace flexjit {

// The variant's mask and score compiled to native row functions, and its mask's interval
// program to the classify and kv_range functions, by LLVM (ORC LLJIT, the O2 pipeline, the host
// CPU's features). With a `store`, the object file comes from it when it holds one for the key
// (host_code_key) and goes to it when built. Fails with LLVM's message when the host has no
// usable target or compilation fails.
Result<std::shared_ptr<const HostCode>> compile_native_host_code(const Variant& variant,
                                                                 HostCodeStore* store);

}  // namespace flexjit
