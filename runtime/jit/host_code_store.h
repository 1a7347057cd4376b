// The compiler's HostCodeStore (flexjit/compiler/host_code.h) over the disk cache: LLVM host
// code's object files kept next to the kernels, in the same entry format and with the same
// fault handling (docs/cache.md, "Host code"). The compiler defines the interface and the
// runtime supplies it, so the compiler never links the runtime.
#pragma once

#include <memory>

#include "flexjit/compiler/host_code.h"
#include "jit/disk_cache.h"

namespace flexjit {

// Entries are named kHostCodeEntryPrefix + the variant's name, "host_sliding" (so `flexjit cache`
// tells them from kernels); an entry's payload (CacheEntry::cubin) is the object file, its log
// empty.
class DiskHostCodeStore final : public HostCodeStore {
 public:
  explicit DiskHostCodeStore(std::shared_ptr<DiskCache> disk) : disk_(std::move(disk)) {}

  Result<std::string> object(std::string_view name, std::string_view key,
                             const std::function<Result<std::string>()>& build) override;

  // How many objects this store has loaded from disk.
  size_t disk_hit_count() const { return disk_hits_.load(); }

 private:
  std::shared_ptr<DiskCache> disk_;
  std::atomic<size_t> disk_hits_ = 0;
};

// The process's store over the disk cache the environment names (FLEXJIT_CACHE_DIR & co.,
// environment.h), made on first use; null when there is no cache directory. What the CPU
// backend compiles with and what the CLI installs as make_host_code's default.
std::shared_ptr<HostCodeStore> host_code_store_from_environment();

}  // namespace flexjit
