// The hash behind every cache key (the kernel cache's, runtime/jit/kernel_cache.cpp, and the
// host code's, compiler/codegen/llvm/): XXH3-128 over a sequence of fields, each prefixed by its
// length (8 bytes, little-endian), so that no two different field sequences hash the same bytes.
// Header-only xxHash: nothing to link, no libxxhash.so needed where the library runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace flexjit {

class KeyHasher {
 public:
  KeyHasher() { XXH3_128bits_reset(&state_); }
  KeyHasher(const KeyHasher& other) { XXH3_copyState(&state_, &other.state_); }
  KeyHasher& operator=(const KeyHasher&) = delete;

  void add_number(uint64_t value) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i)
      bytes[i] = static_cast<unsigned char>(value >> (8 * i));
    XXH3_128bits_update(&state_, bytes, sizeof(bytes));
  }
  void add_field(std::string_view bytes) {
    add_number(bytes.size());
    XXH3_128bits_update(&state_, bytes.data(), bytes.size());
  }

  // The digest as 32 lowercase hex digits (the disk cache's key format).
  std::string hex() const {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&state_));
    constexpr char kDigits[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(2 * sizeof(canonical.digest));
    for (unsigned char byte : canonical.digest) {
      hex.push_back(kDigits[byte >> 4]);
      hex.push_back(kDigits[byte & 15]);
    }
    return hex;
  }

 private:
  XXH3_state_t state_;
};

}  // namespace flexjit
