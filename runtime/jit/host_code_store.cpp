#include "jit/host_code_store.h"

#include "jit/environment.h"

namespace flexjit {

Result<std::string> DiskHostCodeStore::object(std::string_view name, std::string_view key,
                                              const std::function<Result<std::string>()>& build) {
  const std::string entry_name = std::string(kHostCodeEntryPrefix) + std::string(name);
  auto loaded = disk_->get_or_build(entry_name, key, [&]() -> Result<CacheEntry> {
    auto object = build();
    if (!object) return object.error();
    return CacheEntry{.name = entry_name, .cubin = std::move(*object), .log = {}};
  });
  if (!loaded) return loaded.error();
  if (loaded->origin == DiskCache::Origin::Disk) ++disk_hits_;
  return std::move(loaded->entry.cubin);
}

std::shared_ptr<HostCodeStore> host_code_store_from_environment() {
  static const std::shared_ptr<HostCodeStore> store = []() -> std::shared_ptr<HostCodeStore> {
    // No directory: no store, and no warning here (the CLI makes the store for every command;
    // the kernel cache warns when kernels are compiled).
    if (environment().cache_dir.empty()) return nullptr;
    auto disk = DiskCache::from_environment();
    return std::make_shared<DiskHostCodeStore>(std::move(disk));
  }();
  return store;
}

}  // namespace flexjit
