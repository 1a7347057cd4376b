// The disk level of the kernel cache (docs/architecture.md#cache): one file per kernel under the
// cache directory, shared by every process of the user. Reads take no lock; a miss takes a per-key
// file lock, looks again, builds, and publishes the entry with write-to-temp, fsync, rename, so
// a reader sees a whole entry or none. Every entry carries the format version and a checksum:
// a truncated, corrupt or foreign file is logged and rebuilt. When the directory cannot be
// written (read-only, full, no permission) the cache warns once and keeps working from memory.
// The format is described in docs/cache.md and pinned by tests/runtime/golden/.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flexjit/compiler/result.h"
#include "flexjit/internal/inspect.h"  // CacheFileInfo
#include "jit/environment.h"           // LogLevel

namespace flexjit {

// Bump when the layout of an entry file changes (encode_cache_entry), and regenerate the
// golden file in tests/runtime/golden/. Files of another version are rebuilt, not misread.
inline constexpr uint32_t kCacheFormatVersion = 1;

// What an entry holds: everything needed to make a CompiledKernel without NVRTC.
struct CacheEntry {
  std::string name;   // the kernel's entry symbol
  std::string cubin;  // ELF image
  std::string log;    // NVRTC's warnings, possibly empty
};

// An entry file's bytes. Integers little-endian:
//   [0, 8)    magic "FJKCACHE"
//   [8, 12)   u32 format version (kCacheFormatVersion)
//   [12, 16)  u32 name size N
//   [16, 20)  u32 log size L
//   [20, 24)  u32 zero (reserved)
//   [24, 32)  u64 cubin size C
//   [32, 64)  the key, 32 lowercase hex digits
//   [64, 64 + N + L + C)  name, log, cubin
//   then      u64 XXH3-64 of every byte before it
std::string encode_cache_entry(std::string_view key, const CacheEntry& entry);

// The entry in `bytes`, checked against the expected key; an Error says what is wrong
// (truncated, not an entry, another format version, checksum mismatch, another key).
Result<CacheEntry> decode_cache_entry(std::string_view key, std::string_view bytes);

// "<name>-<key>.fjk": the kernel name (characters outside [A-Za-z0-9_] replaced by '_', cut at
// 128) in front, so `ls` of the directory is readable.
std::string cache_file_name(std::string_view name, std::string_view key);

struct DiskCacheConfig {
  std::filesystem::path directory;
  uint64_t max_bytes = uint64_t{1} << 30;  // entries beyond it are evicted, least recent first
  bool read_entries = true;                // false: always build (FLEXJIT_ALWAYS_COMPILE)
};

class DiskCache {
 public:
  explicit DiskCache(DiskCacheConfig config);

  // The cache the environment asks for (environment.h); null when no directory is known.
  static std::shared_ptr<DiskCache> from_environment();

  const DiskCacheConfig& config() const { return config_; }

  enum class Origin { Disk, Built };
  struct Loaded {
    CacheEntry entry;
    Origin origin;
  };

  // The entry for `key`: from disk if a valid one is there; otherwise under the key's file
  // lock, from disk if another process wrote it meanwhile, else from `build`, which is then
  // stored (and older entries evicted beyond the size cap). Only `build`'s errors are
  // returned: disk trouble is logged and costs a build, never a failure. Thread-safe.
  Result<Loaded> get_or_build(std::string_view name, std::string_view key,
                              const std::function<Result<CacheEntry>()>& build);

  // A valid entry for `key`, recording the hit; nullopt on a miss or a bad file (a warning
  // with its real size and what is wrong, once per process for each bad file, whichever
  // DiskCache of the process finds it; later looks log it at Debug).
  std::optional<CacheEntry> load(std::string_view name, std::string_view key);

  // Publishes `entry` atomically; false (after the one warning) when the directory cannot be
  // written.
  bool store(std::string_view name, std::string_view key, const CacheEntry& entry);

  // False once a write has failed: the cache then only reads.
  bool writable() const { return writable_.load(); }

  // Every entry file, most recently used first.
  std::vector<CacheFileInfo> list() const;

  // Removes every file the cache made (entries, hit counts, locks, temp files), leaving other
  // files alone; returns how many were removed.
  size_t clear() const;

 private:
  std::filesystem::path entry_path(std::string_view name, std::string_view key) const;
  void disable_writes(std::string_view why);
  void evict(const std::filesystem::path& keep);

  DiskCacheConfig config_;
  std::atomic<bool> writable_ = true;
  std::once_flag warned_;
};

}  // namespace flexjit
