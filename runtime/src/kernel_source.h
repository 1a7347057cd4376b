// Kernel source assembly: the generated variant struct of a mask plugged into a kernel
// template, with a readable entry-point name that the cache, the CLI and profilers show.
#pragma once

#include <string>
#include <string_view>

#include "flexjit/compiler/mask.h"
#include "kernel_cache.h"

namespace flexjit {

struct PrefillKernelConfig {
  int head_dim = 128;
  bool bf16 = true;
  int page_size = 16;  // 0: contiguous K/V (the encoder kernel)
  std::string arch = "sm_90a";
};

// Head dims and page sizes the prefill template is instantiated for (page size 0 selects the
// contiguous encoder layout).
bool prefill_head_dim_supported(int head_dim);
bool prefill_page_size_supported(int page_size);

// Launch shape of a config's prefill kernel: the wgmma kernel on sm_90a for head dims 64, 128
// and 256 (fj::prefill_uses_wgmma, docs/hopper.md), the mma.sync kernel otherwise.
struct PrefillLaunchShape {
  bool wgmma = false;
  int block_m = 0;  // packed query rows per CTA (and per planned work item)
  int threads = 0;
  int smem_bytes = 0;  // dynamic shared memory
};
PrefillLaunchShape prefill_launch_shape(const PrefillKernelConfig& config);

// "prefill_sliding_softcap_hd128_bf16_page16_sm90a"; "encoder_sliding_sym_hd64_fp16_sm80"
std::string prefill_kernel_name(std::string_view mask_name, const PrefillKernelConfig& config);

// Name, full CUDA source (variant struct + template instantiation), arch and NVRTC options.
KernelSpec prefill_kernel_spec(const Variant& variant, const PrefillKernelConfig& config);

// The split-KV decode kernel of a paged variant (paged_decode.cuh), which planned launches
// (fj_plan) use for queries of at most fj::kDecodeMaxRows packed rows:
// "decode_causal_hd128_bf16_page16_sm90a". config.page_size must be positive.
std::string decode_kernel_name(std::string_view mask_name, const PrefillKernelConfig& config);
KernelSpec decode_kernel_spec(const Variant& variant, const PrefillKernelConfig& config);

// The mask-independent kernels: KV-cache write (one for every 16-bit dtype) and merge_states.
KernelSpec kv_cache_write_spec(const std::string& arch);
KernelSpec merge_states_spec(bool bf16, const std::string& arch);

}  // namespace flexjit
