// What flexjit builds kernels for: head dims, page sizes, dtypes and architectures. The one
// table that the C API's checks, the CLI's validators and help text, the CPU backend's dispatch
// and the tests read; adding a head dim starts here. Internal to flexjit's C++ (not part of the
// C ABI, not installed).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "flexjit/flexjit.h"

namespace flexjit::supported {

// Head dims the kernel templates (and the CPU backend) are instantiated for.
inline constexpr std::array<int, 5> kHeadDims = {64, 80, 96, 128, 256};
inline constexpr int kMaxHeadDim = *std::max_element(kHeadDims.begin(), kHeadDims.end());

// Paged K/V: a page holds a multiple of kPageSizeStep tokens, at most kMaxPageSize. Page size
// 0 selects contiguous K/V (the encoder kernel).
inline constexpr int kPageSizeStep = 16;
inline constexpr int kMaxPageSize = 1024;
inline constexpr std::string_view kPageSizesText =
    "a multiple of 16 up to 1024, or 0 for contiguous K/V";

// The element types of q, k, v and out, with the names the CLI and kernel names use.
struct Dtype {
  fj_dtype dtype;
  std::string_view name;
};
inline constexpr std::array<Dtype, 2> kDtypes = {
    {{FJ_DTYPE_BF16, "bf16"}, {FJ_DTYPE_FP16, "fp16"}}};

// Architectures: NVRTC's "sm_<digits>" with an optional "a" suffix ("sm_80", "sm_90a"), or
// "cpu" for the CPU backend (docs/cpu.md). kCheckedArchs are those the kernels are tuned for and
// whose generated code tools/dev/ptx_hashes pins.
inline constexpr std::string_view kCpuArch = "cpu";
inline constexpr std::array<std::string_view, 2> kCheckedArchs = {"sm_80", "sm_90a"};

constexpr bool head_dim(int value) {
  return std::find(kHeadDims.begin(), kHeadDims.end(), value) != kHeadDims.end();
}

constexpr bool page_size(int value) {
  return value >= 0 && value <= kMaxPageSize && value % kPageSizeStep == 0;
}

// `value`: an fj_dtype as the int a C caller stored (any int; see enum_bits in the C API).
constexpr bool dtype(int32_t value) {
  return std::any_of(kDtypes.begin(), kDtypes.end(),
                     [&](const Dtype& d) { return static_cast<int32_t>(d.dtype) == value; });
}

// The dtype a name ("bf16", "fp16") stands for.
constexpr std::optional<fj_dtype> dtype_named(std::string_view name) {
  for (const Dtype& d : kDtypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

// The oldest architecture the kernels are written for (mma.sync on bf16, cp.async, ldmatrix).
inline constexpr int kMinCudaArch = 80;

// The number of a CUDA architecture name as NVRTC spells it ("sm_" digits, optionally ending in
// "a": "sm_90a" is 90), nullopt for any other text ("cpu" included).
constexpr std::optional<int> cuda_arch_number(std::string_view arch) {
  if (arch.size() < 5 || arch.size() > 8 || arch.substr(0, 3) != "sm_") return std::nullopt;
  int number = 0;
  for (size_t i = 3; i < arch.size(); ++i) {
    const char c = arch[i];
    const bool last = i + 1 == arch.size();
    if (last && i > 3 && c == 'a') break;
    if (c < '0' || c > '9') return std::nullopt;
    number = number * 10 + (c - '0');
  }
  return number;
}

// A CUDA architecture flexjit builds kernels for: well formed and at least kMinCudaArch.
constexpr bool cuda_arch(std::string_view arch) {
  const std::optional<int> number = cuda_arch_number(arch);
  return number && *number >= kMinCudaArch;
}

// Why `arch` is no architecture flexjit builds CUDA kernels for, "" when it is one: the one
// message the C API (FJ_ERROR_UNSUPPORTED) and the CLI give.
inline std::string cuda_arch_problem(std::string_view arch) {
  // Quoted as far as 32 bytes, control bytes shown as '?': the text may come from anywhere.
  std::string quoted = "'";
  for (const char c : arch.substr(0, 32))
    quoted += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  quoted += arch.size() > 32 ? "...'" : "'";
  if (!cuda_arch_number(arch)) {
    return "arch " + quoted + " is not of the form sm_NN or sm_NNa (e.g. sm_80, sm_90a)";
  }
  if (!cuda_arch(arch)) {
    return "arch " + quoted + " is not supported: the kernels need sm_" +
           std::to_string(kMinCudaArch) + " or later";
  }
  return "";
}

// "64, 80, 96, 128, 256" (with separator ", "), "64|80|96|128|256" (with "|"): for messages and
// help text.
inline std::string head_dims_text(std::string_view separator = ", ") {
  std::string text;
  for (int d : kHeadDims) {
    if (!text.empty()) text += separator;
    text += std::to_string(d);
  }
  return text;
}

// "bf16, fp16": for messages and help text.
inline std::string dtype_names_text(std::string_view separator = ", ") {
  std::string text;
  for (const Dtype& d : kDtypes) {
    if (!text.empty()) text += separator;
    text += d.name;
  }
  return text;
}

}  // namespace flexjit::supported
