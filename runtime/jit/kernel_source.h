// Kernel source assembly: the generated variant struct of a mask plugged into a kernel
// template, with a readable entry-point name that the cache, the CLI and profilers show.
#pragma once

#include <string>
#include <string_view>

#include "flexjit/compiler/mask.h"
#include "flexjit/internal/inspect.h"
#include "jit/kernel_cache.h"

namespace flexjit {

// PrefillKernelConfig, prefill_launch_shape and the kernel specs (prefill_kernel_spec,
// decode_kernel_spec, kv_cache_write_spec, merge_states_spec) are declared in
// flexjit/internal/inspect.h, which the tools read too.

// "prefill_sliding_softcap_hd128_bf16_page16_sm90a"; "encoder_sliding_sym_hd64_fp16_sm80"
std::string prefill_kernel_name(std::string_view mask_name, const PrefillKernelConfig& config);

// The split-KV decode kernel of a paged variant (paged_decode.cuh), which planned launches
// (fj_plan) use for queries of at most fj::kDecodeMaxRows packed rows:
// "decode_causal_hd128_bf16_page16_sm90a". config.page_size must be positive.
std::string decode_kernel_name(std::string_view mask_name, const PrefillKernelConfig& config);

}  // namespace flexjit
