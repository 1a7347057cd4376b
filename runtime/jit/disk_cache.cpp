#include "jit/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <utility>

#include "jit/environment.h"
#include "jit/log.h"

// Header-only xxHash: nothing to link, no libxxhash.so needed where the library runs.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fs = std::filesystem;

namespace flexjit {
namespace {

constexpr std::string_view kMagic = "FJKCACHE";
constexpr size_t kHeaderSize = 64;
constexpr size_t kChecksumSize = 8;
constexpr size_t kKeySize = 32;
constexpr std::string_view kEntrySuffix = ".fjk";
constexpr std::string_view kHitsSuffix = ".hits";
constexpr std::string_view kLockSuffix = ".lock";
constexpr std::string_view kTempSuffix = ".tmp";
// A temp file this old belongs to a writer that died (a compile takes seconds).
constexpr auto kStaleTempAge = std::chrono::hours(1);

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t get_le(std::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= uint64_t{static_cast<unsigned char>(in[offset + i])} << (8 * i);
  return value;
}

bool is_key(std::string_view key) {
  return key.size() == kKeySize && key.find_first_not_of("0123456789abcdef") == key.npos;
}

std::string errno_text(int code) {
  return std::error_code(code, std::generic_category()).message();
}

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  // Closes now, reporting the error (close can report a delayed write error).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

bool read_exact(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string random_hex() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return fmt::format("{:016x}", generator());
}

// The (name, key) of a cache file name "<name>-<key>.fjk", or nullopt.
std::optional<std::pair<std::string, std::string>> parse_entry_name(std::string_view file) {
  if (!file.ends_with(kEntrySuffix)) return std::nullopt;
  file.remove_suffix(kEntrySuffix.size());
  if (file.size() < kKeySize + 2 || file[file.size() - kKeySize - 1] != '-') return std::nullopt;
  const std::string_view key = file.substr(file.size() - kKeySize);
  if (!is_key(key)) return std::nullopt;
  return std::pair{std::string(file.substr(0, file.size() - kKeySize - 1)), std::string(key)};
}

// Whether a directory entry is one of the cache's files: an entry, its hit count, its lock,
// or a temp file of one.
bool is_cache_file(std::string_view file) {
  if (file.ends_with(kHitsSuffix)) file.remove_suffix(kHitsSuffix.size());
  if (file.ends_with(kLockSuffix)) {
    file.remove_suffix(kLockSuffix.size());
    return parse_entry_name(file).has_value();
  }
  if (file.ends_with(kTempSuffix)) {
    // "<entry>.<pid>.<random>.tmp"
    const size_t entry_end = file.find(std::string(kEntrySuffix) + ".");
    return entry_end != file.npos &&
           parse_entry_name(file.substr(0, entry_end + kEntrySuffix.size())).has_value();
  }
  return parse_entry_name(file).has_value();
}

}  // namespace

std::string encode_cache_entry(std::string_view key, const CacheEntry& entry) {
  std::string out;
  out.reserve(kHeaderSize + entry.name.size() + entry.log.size() + entry.cubin.size() +
              kChecksumSize);
  out.append(kMagic);
  put_le(out, kCacheFormatVersion, 4);
  put_le(out, entry.name.size(), 4);
  put_le(out, entry.log.size(), 4);
  put_le(out, 0, 4);
  put_le(out, entry.cubin.size(), 8);
  out.append(key);
  out.append(entry.name);
  out.append(entry.log);
  out.append(entry.cubin);
  put_le(out, XXH3_64bits(out.data(), out.size()), 8);
  return out;
}

namespace {

// What is wrong with an entry of `size` bytes whose first bytes are `header` (at least
// kHeaderSize of them when size allows), judged before the rest is read: nullopt when the
// header is of this format and its sizes add up to `size`.
std::optional<Error> header_error(std::string_view header, uint64_t size) {
  if (size < kHeaderSize + kChecksumSize) {
    return Error{fmt::format("truncated: {} bytes, shorter than any entry", size)};
  }
  if (header.substr(0, kMagic.size()) != kMagic) return Error{"not a flexjit cache entry"};
  if (const uint64_t version = get_le(header, 8, 4); version != kCacheFormatVersion) {
    return Error{fmt::format("format version {}, this library reads version {}", version,
                             kCacheFormatVersion)};
  }
  const uint64_t name_size = get_le(header, 12, 4);
  const uint64_t log_size = get_le(header, 16, 4);
  const uint64_t cubin_size = get_le(header, 24, 8);
  // Sizes are at most 2^32 + 2^32 + 2^64: compared one by one so the sum cannot wrap.
  const uint64_t body = size - kHeaderSize - kChecksumSize;
  if (get_le(header, 20, 4) != 0 || name_size > body || log_size > body - name_size ||
      cubin_size != body - name_size - log_size) {
    return Error{
        fmt::format("truncated or corrupt: {} bytes do not match the sizes in its header", size)};
  }
  return std::nullopt;
}

// Whether this process has not reported the bad file at `path` (as `status` describes it: a
// file written again is another) yet: each is reported once per process, however many contexts
// and host code stores (each a DiskCache of its own) come across it.
bool first_report_of(const fs::path& path, const struct stat& status) {
  static std::mutex mutex;
  static std::set<std::string> reported;
  std::lock_guard lock(mutex);
  return reported
      .insert(fmt::format("{}\n{} {} {}.{}", path.string(), status.st_ino, status.st_size,
                          status.st_mtim.tv_sec, status.st_mtim.tv_nsec))
      .second;
}

}  // namespace

Result<CacheEntry> decode_cache_entry(std::string_view key, std::string_view bytes) {
  if (auto error = header_error(bytes, bytes.size())) return *error;
  const uint64_t name_size = get_le(bytes, 12, 4);
  const uint64_t log_size = get_le(bytes, 16, 4);
  const uint64_t cubin_size = get_le(bytes, 24, 8);
  const size_t checked = bytes.size() - kChecksumSize;
  if (get_le(bytes, checked, 8) != XXH3_64bits(bytes.data(), checked)) {
    return Error{"corrupt: checksum mismatch"};
  }
  if (bytes.substr(32, kKeySize) != key) {
    return Error{fmt::format("holds key {}, not {}", bytes.substr(32, kKeySize), key)};
  }
  CacheEntry entry;
  entry.name = bytes.substr(kHeaderSize, name_size);
  entry.log = bytes.substr(kHeaderSize + name_size, log_size);
  entry.cubin = bytes.substr(kHeaderSize + name_size + log_size, cubin_size);
  return entry;
}

std::string cache_file_name(std::string_view name, std::string_view key) {
  std::string file(name.substr(0, 128));
  for (char& c : file) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!plain) c = '_';
  }
  return fmt::format("{}-{}{}", file, key, kEntrySuffix);
}

DiskCache::DiskCache(DiskCacheConfig config) : config_(std::move(config)) {}

std::shared_ptr<DiskCache> DiskCache::from_environment() {
  const Environment& env = environment();
  if (env.cache_dir.empty()) {
    log(LogLevel::Warn,
        "no cache directory (FLEXJIT_CACHE_DIR, XDG_CACHE_HOME, HOME unset): "
        "caching kernels in memory only");
    return nullptr;
  }
  return std::make_shared<DiskCache>(DiskCacheConfig{
      .directory = env.cache_dir,
      .max_bytes = env.cache_max_bytes,
      .read_entries = !env.always_compile,
  });
}

fs::path DiskCache::entry_path(std::string_view name, std::string_view key) const {
  return config_.directory / cache_file_name(name, key);
}

void DiskCache::disable_writes(std::string_view why) {
  writable_.store(false);
  std::call_once(warned_, [&] {
    log(LogLevel::Warn, "cannot write the kernel cache in {}: {}; caching in memory only",
        config_.directory.string(), why);
  });
}

std::optional<CacheEntry> DiskCache::load(std::string_view name, std::string_view key) {
  const fs::path path = entry_path(name, key);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno != ENOENT)
      log(LogLevel::Info, "cannot read {}: {}", path.string(), errno_text(errno));
    return std::nullopt;
  }
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) return std::nullopt;
  // The header is checked before the rest is read, so a large foreign file costs 64 bytes.
  const size_t size = static_cast<size_t>(status.st_size);
  std::string bytes(std::min(size, kHeaderSize), '\0');
  Result<CacheEntry> entry = Error{"unreadable"};
  if (read_exact(fd.get(), bytes.data(), bytes.size())) {
    if (auto error = header_error(bytes, size)) {
      entry = std::move(*error);
    } else {
      bytes.resize(size);
      if (read_exact(fd.get(), bytes.data() + kHeaderSize, size - kHeaderSize)) {
        entry = decode_cache_entry(key, bytes);
      } else {
        entry = Error{fmt::format("shorter than its {} bytes when read", size)};
      }
    }
  }
  if (!entry) {
    log(first_report_of(path, status) ? LogLevel::Warn : LogLevel::Debug,
        "ignoring cache entry {}: {}; rebuilding it", path.string(), entry.error().message);
    return std::nullopt;
  }
  // A hit appends one byte to the sidecar: its size counts the hits and its mtime is the
  // last use, which eviction orders by. O_APPEND keeps concurrent hits from losing counts,
  // and the entry itself is never rewritten.
  fs::path hits = path;
  hits += kHitsSuffix;
  if (writable()) {
    Fd hits_fd(::open(hits.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
    if (!hits_fd || !write_all(hits_fd.get(), "+")) {
      log(LogLevel::Debug, "cannot record a hit in {}: {}", hits.string(), errno_text(errno));
    }
  }
  return std::move(entry.value());
}

bool DiskCache::store(std::string_view name, std::string_view key, const CacheEntry& entry) {
  if (!writable()) return false;
  std::error_code error;
  fs::create_directories(config_.directory, error);
  if (error) {
    disable_writes(error.message());
    return false;
  }
  const fs::path path = entry_path(name, key);
  fs::path temp = path;
  temp += fmt::format(".{}.{}{}", ::getpid(), random_hex(), kTempSuffix);
  const std::string bytes = encode_cache_entry(key, entry);
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  // fsync before rename: after a crash the name points at the whole file or at nothing. The
  // directory is not synced: losing the rename itself only costs a rebuild.
  const bool written = fd && write_all(fd.get(), bytes) && ::fsync(fd.get()) == 0 &&
                       fd.close() == 0 && ::rename(temp.c_str(), path.c_str()) == 0;
  if (!written) {
    const int code = errno;
    ::unlink(temp.c_str());
    disable_writes(errno_text(code));
    return false;
  }
  log(LogLevel::Debug, "stored {} ({} bytes)", path.string(), bytes.size());
  evict(path);
  return true;
}

Result<DiskCache::Loaded> DiskCache::get_or_build(
    std::string_view name, std::string_view key, const std::function<Result<CacheEntry>()>& build) {
  if (config_.read_entries) {
    if (auto entry = load(name, key)) return Loaded{std::move(*entry), Origin::Disk};
  }
  // The lock serialises builders of one key across processes: the first builds, the others
  // wait and then find its entry. flock is released when its holder dies, so a killed
  // builder never leaves the key locked.
  std::optional<Fd> lock;
  if (writable()) {
    std::error_code error;
    fs::create_directories(config_.directory, error);
    fs::path lock_path = entry_path(name, key);
    lock_path += kLockSuffix;
    Fd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd) {
      disable_writes(errno_text(errno));
    } else {
      int locked;
      do {
        locked = ::flock(fd.get(), LOCK_EX);
      } while (locked != 0 && errno == EINTR);
      if (locked == 0) lock.emplace(fd.release());
    }
    if (lock && config_.read_entries) {
      // A bad file found by the first look was reported there, and is not again.
      if (auto entry = load(name, key)) {
        return Loaded{std::move(*entry), Origin::Disk};
      }
    }
  }
  Result<CacheEntry> built = build();
  if (!built) return built.error();
  store(name, key, *built);
  return Loaded{std::move(built.value()), Origin::Built};
}

void DiskCache::evict(const fs::path& keep) {
  std::vector<CacheFileInfo> entries = list();
  uint64_t total = 0;
  for (const CacheFileInfo& entry : entries)
    total += entry.bytes;
  const auto now = fs::file_time_type::clock::now();
  std::error_code error;
  for (const fs::directory_entry& file : fs::directory_iterator(config_.directory, error)) {
    const std::string file_name = file.path().filename().string();
    if (file_name.ends_with(kTempSuffix) && is_cache_file(file_name) &&
        now - file.last_write_time(error) > kStaleTempAge) {
      fs::remove(file.path(), error);
    }
  }
  // list() is most recent first: drop from the back.
  while (total > config_.max_bytes && !entries.empty()) {
    const CacheFileInfo victim = std::move(entries.back());
    entries.pop_back();
    if (victim.path == keep) continue;
    log(LogLevel::Info, "evicting {} ({} bytes): the cache exceeds {} bytes", victim.path.string(),
        victim.bytes, config_.max_bytes);
    fs::path hits = victim.path;
    hits += kHitsSuffix;
    fs::remove(victim.path, error);
    fs::remove(hits, error);
    total -= victim.bytes;
  }
}

std::vector<CacheFileInfo> DiskCache::list() const {
  std::vector<CacheFileInfo> entries;
  std::error_code error;
  for (const fs::directory_entry& file : fs::directory_iterator(config_.directory, error)) {
    auto parsed = parse_entry_name(file.path().filename().string());
    if (!parsed) continue;
    CacheFileInfo info;
    info.name = std::move(parsed->first);
    info.key = std::move(parsed->second);
    info.path = file.path();
    std::error_code stat_error;
    info.bytes = file.file_size(stat_error);
    info.written = file.last_write_time(stat_error);
    if (stat_error) continue;  // removed meanwhile
    info.last_used = info.written;
    fs::path hits = file.path();
    hits += kHitsSuffix;
    if (const uint64_t count = fs::file_size(hits, stat_error); !stat_error) {
      info.hits = count;
      info.last_used = std::max(info.written, fs::last_write_time(hits, stat_error));
    }
    entries.push_back(std::move(info));
  }
  std::sort(entries.begin(), entries.end(), [](const CacheFileInfo& a, const CacheFileInfo& b) {
    return a.last_used != b.last_used ? a.last_used > b.last_used : a.path < b.path;
  });
  return entries;
}

size_t DiskCache::clear() const {
  size_t removed = 0;
  std::error_code error;
  for (const fs::directory_entry& file : fs::directory_iterator(config_.directory, error)) {
    if (!is_cache_file(file.path().filename().string())) continue;
    std::error_code remove_error;
    if (fs::remove(file.path(), remove_error)) ++removed;
  }
  return removed;
}

}  // namespace flexjit
