// The disk cache: entry format (pinned by a golden file), fault handling (corrupt, truncated,
// foreign and garbage files; unwritable directories; a writer killed mid-write; eight
// processes racing for one entry), eviction, and the environment that configures it; and the
// LLVM host code kept in it (host_code_store.h): hits across processes, the same faults, the
// IR serialization its key hashes (pinned by a golden file).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flexjit/compiler/host_code.h"
#include "jit/disk_cache.h"
#include "jit/environment.h"
#include "jit/host_code_store.h"
#include "jit/kernel_cache.h"
#include "standard_masks.h"

using namespace flexjit;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kKey = "00112233445566778899aabbccddeeff";
constexpr std::string_view kOtherKey = "ffeeddccbbaa99887766554433221100";

CacheEntry sample_entry() {
  return CacheEntry{.name = "golden_kernel",
                    .cubin = std::string("\x7f"
                                         "ELF\x02\x01\x01\x00 fixed cubin bytes",
                                         24),
                    .log = "warning: fixed log"};
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "flexjit-test-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code error;
    fs::remove_all(path, error);
  }
};

std::vector<fs::path> files_ending(const fs::path& dir, std::string_view suffix) {
  std::vector<fs::path> found;
  std::error_code error;
  for (const auto& file : fs::directory_iterator(dir, error)) {
    if (file.path().filename().string().ends_with(suffix)) found.push_back(file.path());
  }
  return found;
}

// Everything fd 2 receives while alive (log lines are written straight to fd 2).
class StderrCapture {
 public:
  StderrCapture() : saved_(::dup(STDERR_FILENO)) { ::dup2(::fileno(file_), STDERR_FILENO); }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0)
      out.append(buffer, n);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_ = std::tmpfile();
  int saved_;
};

size_t count_of(std::string_view text, std::string_view needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != text.npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

// The flexjit CLI next to this test binary (both are built into build/bin).
fs::path cli_path() {
  return fs::read_symlink("/proc/self/exe").parent_path() / "flexjit";
}

// Starts the CLI with `args` (after the program) and the cache in `cache_dir`, stderr to `log`;
// with `file_size_limit`, the child is killed by SIGXFSZ when a file it writes grows beyond it.
pid_t start_cli(std::vector<std::string> args, const fs::path& cache_dir, const fs::path& log,
                std::optional<rlim_t> file_size_limit = std::nullopt) {
  args.insert(args.begin(), cli_path().string());
  std::vector<std::string> env = {"FLEXJIT_CACHE_DIR=" + cache_dir.string(), "FLEXJIT_LOG=debug",
                                  "PATH=/usr/bin:/bin"};
  std::vector<char*> argv, envp;
  for (auto& arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  for (auto& var : env)
    envp.push_back(var.data());
  envp.push_back(nullptr);
  // Only async-signal-safe calls between fork and exec.
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_WRONLY);
    if (fd < 0 || null < 0) ::_exit(126);
    ::dup2(fd, STDERR_FILENO);
    ::dup2(null, STDOUT_FILENO);
    if (file_size_limit) {
      const rlimit limit{*file_size_limit, *file_size_limit};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Starts the CLI compiling the causal kernel into `cache_dir` (as start_cli).
pid_t start_compile(const fs::path& cache_dir, const fs::path& log,
                    std::optional<rlim_t> file_size_limit = std::nullopt) {
  return start_cli({"compile", FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask", "--mask", "causal",
                    "--head-dim", "64", "--arch", "sm_80"},
                   cache_dir, log, file_size_limit);
}

int wait_status(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("an entry's bytes match the golden file", "[disk_cache][golden]") {
  const fs::path golden = FLEXJIT_SOURCE_DIR "/tests/runtime/golden/cache_entry_v1.fjk";
  const std::string bytes = encode_cache_entry(kKey, sample_entry());
  const std::string expected = read_file(golden);
  if (bytes != expected) {
    const fs::path actual = fs::temp_directory_path() / "cache_entry.fjk.actual";
    write_file(actual, bytes);
    FAIL("the entry format changed: bump kCacheFormatVersion, update docs/cache.md and copy "
         << actual << " to " << golden << " (renamed for the new version)");
  }
  // The layout documented in disk_cache.h, read independently of the decoder.
  REQUIRE(bytes.size() == 64 + 13 + 18 + 24 + 8);
  CHECK(bytes.substr(0, 8) == "FJKCACHE");
  CHECK(bytes.substr(8, 4) == std::string("\x01\x00\x00\x00", 4));                   // version 1
  CHECK(bytes.substr(12, 4) == std::string("\x0d\x00\x00\x00", 4));                  // name size 13
  CHECK(bytes.substr(16, 4) == std::string("\x12\x00\x00\x00", 4));                  // log size 18
  CHECK(bytes.substr(24, 8) == std::string("\x18\x00\x00\x00\x00\x00\x00\x00", 8));  // cubin 24
  CHECK(bytes.substr(32, 32) == kKey);
  CHECK(bytes.substr(64, 13) == "golden_kernel");
  CHECK(bytes.substr(77, 18) == "warning: fixed log");
  CHECK(kCacheFormatVersion == 1);  // a version bump comes with a new golden file

  auto decoded = decode_cache_entry(kKey, expected);
  REQUIRE(decoded.ok());
  CHECK(decoded->name == "golden_kernel");
  CHECK(decoded->log == "warning: fixed log");
  CHECK(decoded->cubin == sample_entry().cubin);
}

TEST_CASE("a damaged or foreign entry is detected", "[disk_cache]") {
  const std::string good = encode_cache_entry(kKey, sample_entry());
  REQUIRE(decode_cache_entry(kKey, good).ok());

  for (size_t size = 0; size < good.size(); ++size) {
    INFO("truncated to " << size);
    CHECK_FALSE(decode_cache_entry(kKey, good.substr(0, size)).ok());
  }
  for (size_t at = 0; at < good.size(); ++at) {
    INFO("byte " << at << " flipped");
    std::string damaged = good;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x20);
    CHECK_FALSE(decode_cache_entry(kKey, damaged).ok());
  }
  CHECK_THAT(decode_cache_entry(kKey, good + "x").error().message,
             Catch::Contains("truncated or corrupt"));
  CHECK_THAT(decode_cache_entry(kOtherKey, good).error().message, Catch::Contains("holds key"));
  std::string other_version = good;
  other_version[8] = 2;
  CHECK_THAT(decode_cache_entry(kKey, other_version).error().message,
             Catch::Contains("format version 2"));
  CHECK_THAT(decode_cache_entry(kKey, std::string(200, 'x')).error().message,
             Catch::Contains("not a flexjit cache entry"));
}

TEST_CASE("file names start with the kernel name, then the key", "[disk_cache]") {
  CHECK(cache_file_name("prefill_causal_hd128_bf16_page16_sm90a", kKey) ==
        "prefill_causal_hd128_bf16_page16_sm90a-00112233445566778899aabbccddeeff.fjk");
  CHECK(cache_file_name("../evil/name", kKey) == "___evil_name-" + std::string(kKey) + ".fjk");
  CHECK(cache_file_name(std::string(300, 'a'), kKey).size() == 128 + 1 + 32 + 4);
}

TEST_CASE("a miss builds and stores, and the next lookup reads the disk", "[disk_cache]") {
  TempDir dir;
  DiskCache cache({.directory = dir.path / "cache"});
  int builds = 0;
  auto build = [&]() -> Result<CacheEntry> {
    ++builds;
    return sample_entry();
  };
  auto first = cache.get_or_build("golden_kernel", kKey, build);
  REQUIRE(first.ok());
  CHECK(first->origin == DiskCache::Origin::Built);
  CHECK(builds == 1);

  DiskCache other_process({.directory = dir.path / "cache"});
  for (int i = 0; i < 2; ++i) {
    auto again = other_process.get_or_build("golden_kernel", kKey, build);
    REQUIRE(again.ok());
    CHECK(again->origin == DiskCache::Origin::Disk);
    CHECK(again->entry.cubin == sample_entry().cubin);
  }
  CHECK(builds == 1);
  const auto entries = cache.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].name == "golden_kernel");
  CHECK(entries[0].key == kKey);
  CHECK(entries[0].hits == 2);
  CHECK(entries[0].bytes == encode_cache_entry(kKey, sample_entry()).size());

  auto failing =
      cache.get_or_build("other", kOtherKey, []() -> Result<CacheEntry> { return Error{"no"}; });
  REQUIRE_FALSE(failing.ok());
  CHECK(failing.error().message == "no");
  CHECK(cache.list().size() == 1);

  write_file(dir.path / "cache" / "not_ours.txt", "kept");
  CHECK(cache.clear() == 4);  // the entry, its hit count, its lock and the failed build's lock
  CHECK(fs::exists(dir.path / "cache" / "not_ours.txt"));
  CHECK(cache.list().empty());
}

TEST_CASE("a garbage, truncated or foreign file under a valid name is rebuilt", "[disk_cache]") {
  TempDir dir;
  DiskCache cache({.directory = dir.path});
  const fs::path path = dir.path / cache_file_name("golden_kernel", kKey);
  const std::string good = encode_cache_entry(kKey, sample_entry());
  const std::vector<std::string> bad = {
      "garbage",
      std::string(100000, '\0'),
      good.substr(0, good.size() - 1),
      encode_cache_entry(kOtherKey, sample_entry()),
  };
  for (const std::string& bytes : bad) {
    write_file(path, bytes);
    StderrCapture capture;
    int builds = 0;
    auto loaded = cache.get_or_build("golden_kernel", kKey, [&]() -> Result<CacheEntry> {
      ++builds;
      return sample_entry();
    });
    const std::string log = capture.text();
    REQUIRE(loaded.ok());
    CHECK(loaded->origin == DiskCache::Origin::Built);
    CHECK(builds == 1);
    CHECK_THAT(log, Catch::Contains("ignoring cache entry") && Catch::Contains("rebuilding"));
    CHECK(read_file(path) == good);
  }
}

TEST_CASE("a bad entry is reported with its real size, once per process", "[disk_cache]") {
  TempDir dir;
  const fs::path path = dir.path / cache_file_name("golden_kernel", kKey);
  const std::string good = encode_cache_entry(kKey, sample_entry());
  write_file(path, good.substr(0, good.size() - 3));
  const std::string size = std::to_string(good.size() - 3);
  StderrCapture capture;
  // Two caches of one process (two contexts, or a context and a host code store) come across
  // the same bad file; neither can replace it.
  DiskCache first({.directory = dir.path});
  DiskCache second({.directory = dir.path});
  CHECK_FALSE(first.load("golden_kernel", kKey).has_value());
  CHECK_FALSE(second.load("golden_kernel", kKey).has_value());
  CHECK_FALSE(first.load("golden_kernel", kKey).has_value());
  const std::string log = capture.text();
  CHECK(count_of(log, "ignoring cache entry") == 1);
  CHECK_THAT(log, Catch::Contains(size + " bytes do not match the sizes in its header"));
  // A file written again is another bad file, reported again.
  write_file(path, std::string(5000, 'x'));
  StderrCapture again;
  CHECK_FALSE(second.load("golden_kernel", kKey).has_value());
  CHECK_THAT(again.text(), Catch::Contains("not a flexjit cache entry"));
}

TEST_CASE("an unwritable cache directory degrades to memory only with one warning",
          "[disk_cache]") {
  TempDir dir;
  // A path under a regular file cannot be created, even by root (who ignores permissions).
  write_file(dir.path / "file", "x");
  DiskCache cache({.directory = dir.path / "file" / "cache"});
  StderrCapture capture;
  for (const std::string_view key : {kKey, kOtherKey, kKey}) {
    auto loaded =
        cache.get_or_build("k", key, []() -> Result<CacheEntry> { return sample_entry(); });
    REQUIRE(loaded.ok());
    CHECK(loaded->origin == DiskCache::Origin::Built);
  }
  CHECK_FALSE(cache.writable());
  const std::string log = capture.text();
  CHECK(count_of(log, "caching in memory only") == 1);
}

TEST_CASE("FLEXJIT_ALWAYS_COMPILE builds despite an entry, and still writes", "[disk_cache]") {
  TempDir dir;
  DiskCache reader({.directory = dir.path});
  REQUIRE(reader.store("k", kKey, sample_entry()));
  DiskCache always({.directory = dir.path, .read_entries = false});
  CacheEntry changed = sample_entry();
  changed.log = "rebuilt";
  auto loaded = always.get_or_build("k", kKey, [&]() -> Result<CacheEntry> { return changed; });
  REQUIRE(loaded.ok());
  CHECK(loaded->origin == DiskCache::Origin::Built);
  CHECK(reader.load("k", kKey)->log == "rebuilt");
}

TEST_CASE("beyond the size cap the least recently used entries are evicted", "[disk_cache]") {
  TempDir dir;
  const uint64_t entry_bytes = encode_cache_entry(kKey, sample_entry()).size();
  DiskCache cache({.directory = dir.path, .max_bytes = 3 * entry_bytes});
  const auto now = fs::file_time_type::clock::now();
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(fmt::format("{:032x}", i + 1));
    REQUIRE(cache.store(fmt::format("k{}", i), keys[i], sample_entry()));
    // Written an hour apart, k0 first.
    fs::last_write_time(dir.path / cache_file_name(fmt::format("k{}", i), keys[i]),
                        now - std::chrono::hours(3 - i));
  }
  // k0, the oldest written, was used last: k1 is now the least recently used.
  REQUIRE(cache.load("k0", keys[0]).has_value());
  REQUIRE(cache.store("k3", fmt::format("{:032x}", 4), sample_entry()));
  std::vector<std::string> left;
  for (const auto& entry : cache.list())
    left.push_back(entry.name);
  CHECK(left == std::vector<std::string>{"k3", "k0", "k2"});  // most recent first
}

TEST_CASE("the environment is read in one place", "[disk_cache][environment]") {
  struct Saved {
    std::vector<std::pair<std::string, std::optional<std::string>>> vars;
    explicit Saved(std::initializer_list<const char*> names) {
      for (const char* name : names) {
        const char* value = std::getenv(name);
        vars.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      }
    }
    ~Saved() {
      for (const auto& [name, value] : vars) {
        if (value) {
          ::setenv(name.c_str(), value->c_str(), 1);
        } else {
          ::unsetenv(name.c_str());
        }
      }
    }
  } saved{"FLEXJIT_CACHE_DIR",       "XDG_CACHE_HOME",         "HOME",
          "FLEXJIT_CACHE_MAX_BYTES", "FLEXJIT_ALWAYS_COMPILE", "FLEXJIT_LOG",
          "FLEXJIT_DUMP_DIR"};

  ::unsetenv("FLEXJIT_CACHE_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/u", 1);
  ::unsetenv("FLEXJIT_CACHE_MAX_BYTES");
  ::unsetenv("FLEXJIT_ALWAYS_COMPILE");
  ::unsetenv("FLEXJIT_LOG");
  ::unsetenv("FLEXJIT_DUMP_DIR");
  Environment env = read_environment();
  CHECK(env.cache_dir == "/home/u/.cache/flexjit");
  CHECK(env.cache_max_bytes == uint64_t{1} << 30);
  CHECK_FALSE(env.always_compile);
  CHECK(env.log_level == LogLevel::Warn);
  CHECK(env.dump_dir.empty());
  CHECK(env.problems.empty());

  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  CHECK(read_environment().cache_dir == "/xdg/flexjit");
  ::setenv("FLEXJIT_CACHE_DIR", "/mine", 1);
  CHECK(read_environment().cache_dir == "/mine");

  ::setenv("FLEXJIT_CACHE_MAX_BYTES", "512M", 1);
  ::setenv("FLEXJIT_ALWAYS_COMPILE", "1", 1);
  ::setenv("FLEXJIT_LOG", "debug", 1);
  ::setenv("FLEXJIT_DUMP_DIR", "/dump", 1);
  env = read_environment();
  CHECK(env.cache_max_bytes == uint64_t{512} << 20);
  CHECK(env.always_compile);
  CHECK(env.log_level == LogLevel::Debug);
  CHECK(env.dump_dir == "/dump");

  ::setenv("FLEXJIT_CACHE_MAX_BYTES", "lots", 1);
  ::setenv("FLEXJIT_ALWAYS_COMPILE", "0", 1);
  ::setenv("FLEXJIT_LOG", "loud", 1);
  env = read_environment();
  CHECK(env.cache_max_bytes == uint64_t{1} << 30);
  CHECK_FALSE(env.always_compile);
  CHECK(env.log_level == LogLevel::Warn);
  CHECK(env.problems.size() == 2);
}

TEST_CASE("an NVRTC failure names the kernel, carries the log and dumps the source",
          "[disk_cache][dump]") {
  TempDir dir;
  KernelCache cache(KernelCacheOptions{
      .disk = std::make_shared<DiskCache>(DiskCacheConfig{.directory = dir.path / "cache"}),
      .dump_dir = dir.path / "dump"});
  const KernelSpec broken{.name = "prefill_broken_hd64_bf16_page16_sm80",
                          .source = "extern \"C\" __global__ void f() { not_declared(); }\n",
                          .arch = "sm_80",
                          .options = {}};
  auto result = cache.get(broken);
  REQUIRE_FALSE(result.ok());
  CHECK_THAT(result.error().message, Catch::Contains("prefill_broken_hd64_bf16_page16_sm80"));
  CHECK_THAT(result.error().log, Catch::Contains("not_declared"));
  const fs::path source =
      dir.path / "dump" /
      ("prefill_broken_hd64_bf16_page16_sm80-" + KernelCache::key(broken) + ".cu");
  CHECK_THAT(result.error().log, Catch::Contains("generated source: " + source.string()));
  CHECK(read_file(source) == broken.source);
  CHECK_THAT(read_file(fs::path(source).replace_extension(".log")),
             Catch::Contains("not_declared"));
  CHECK(files_ending(dir.path / "cache", ".fjk").empty());

  // Without a dump directory the source still goes somewhere, and the error says where.
  KernelCache plain;
  auto again = plain.get(broken);
  REQUIRE_FALSE(again.ok());
  const fs::path fallback =
      fs::temp_directory_path() / kFailedSourceDir /
      ("prefill_broken_hd64_bf16_page16_sm80-" + KernelCache::key(broken) + ".cu");
  CHECK_THAT(again.error().log, Catch::Contains("generated source: " + fallback.string()));
  CHECK(read_file(fallback) == broken.source);
}

TEST_CASE("the dump directory receives every compiled source and log", "[disk_cache][dump]") {
  TempDir dir;
  KernelCache cache(KernelCacheOptions{.disk = nullptr, .dump_dir = dir.path});
  const KernelSpec spec{.name = "noop",
                        .source = "extern \"C\" __global__ void noop() {}\n",
                        .arch = "sm_80",
                        .options = {}};
  REQUIRE(cache.get(spec).ok());
  CHECK(read_file(dir.path / ("noop-" + KernelCache::key(spec) + ".cu")) == spec.source);
  CHECK(fs::exists(dir.path / ("noop-" + KernelCache::key(spec) + ".log")));
}

TEST_CASE("a writer killed in the middle of a cache write leaves no corrupt entry",
          "[disk_cache][process]") {
  TempDir dir;
  REQUIRE(fs::exists(cli_path()));
  // The cubin is tens of KiB: the write of the temp file crosses 4 KiB and the kernel kills
  // the process there with SIGXFSZ, between its open and its rename.
  const int status = wait_status(start_compile(dir.path, dir.path / "killed.log", 4096));
  INFO(read_file(dir.path / "killed.log"));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGXFSZ);
  CHECK(files_ending(dir.path, ".fjk").empty());
  CHECK(files_ending(dir.path, ".tmp").size() == 1);  // it died writing this

  CHECK(wait_status(start_compile(dir.path, dir.path / "next.log")) == 0);
  CHECK_THAT(read_file(dir.path / "next.log"), Catch::Contains("with NVRTC"));
  const auto entries = files_ending(dir.path, ".fjk");
  REQUIRE(entries.size() == 1);
  DiskCache cache({.directory = dir.path});
  const auto listed = cache.list();
  REQUIRE(listed.size() == 1);
  CHECK(decode_cache_entry(listed[0].key, read_file(entries[0])).ok());

  CHECK(wait_status(start_compile(dir.path, dir.path / "third.log")) == 0);
  CHECK_THAT(read_file(dir.path / "third.log"), Catch::Contains("from the disk cache"));
}

TEST_CASE("eight processes compiling one kernel at once write it once", "[disk_cache][process]") {
  TempDir dir;
  REQUIRE(fs::exists(cli_path()));
  constexpr int kProcesses = 8;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcesses; ++i)
    pids.push_back(start_compile(dir.path / "cache", dir.path / fmt::format("{}.log", i)));
  size_t compiles = 0;
  size_t stores = 0;
  for (int i = 0; i < kProcesses; ++i) {
    const int status = wait_status(pids[i]);
    const std::string log = read_file(dir.path / fmt::format("{}.log", i));
    INFO(log);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    compiles += count_of(log, "with NVRTC");
    stores += count_of(log, ": stored ");
  }
  CHECK(compiles == 1);
  CHECK(stores == 1);
  const auto entries = files_ending(dir.path / "cache", ".fjk");
  REQUIRE(entries.size() == 1);
  CHECK(files_ending(dir.path / "cache", ".tmp").empty());
  DiskCache cache({.directory = dir.path / "cache"});
  const auto listed = cache.list();
  REQUIRE(listed.size() == 1);
  CHECK(decode_cache_entry(listed[0].key, read_file(entries[0])).ok());
  CHECK(listed[0].hits == kProcesses - 1);
}

// ---------------------------------------------------------------------------------------------
// Host code

namespace {

Variant standard_variant(const VariantSelection& selection) {
  auto variant = lower_variant(testing::standard_masks(), selection);
  REQUIRE(variant.ok());
  return std::move(*variant);
}

std::shared_ptr<DiskHostCodeStore> host_store(const fs::path& directory) {
  return std::make_shared<DiskHostCodeStore>(
      std::make_shared<DiskCache>(DiskCacheConfig{.directory = directory}));
}

// `code` computes what the evaluator computes for `variant` on a few rows and tiles.
void check_against_evaluator(const Variant& variant, const HostCode& code) {
  auto reference = make_host_code(variant, false);
  REQUIRE(reference.ok());
  fj::MaskParams params{};
  params.scalar[0] = 100;  // window
  constexpr int32_t kKeys = 300;
  for (const int32_t q : {0, 1, 150, 299}) {
    std::vector<uint8_t> visible(kKeys), expected(kKeys);
    code.mask_row(&params, 0, 1, q, 0, kKeys, visible.data());
    (*reference)->mask_row(&params, 0, 1, q, 0, kKeys, expected.data());
    CHECK(visible == expected);
    std::vector<float> scores(kKeys, 3.5f), expected_scores(kKeys, 3.5f);
    code.score_row(&params, 0, 1, q, 0, kKeys, scores.data());
    (*reference)->score_row(&params, 0, 1, q, 0, kKeys, expected_scores.data());
    CHECK(scores == expected_scores);
  }
  for (const Tile tile :
       {Tile{0, 0, 0, 64, 0, 64}, Tile{0, 0, 128, 192, 0, 64}, Tile{0, 0, 0, 64, 128, 192}}) {
    CHECK(code.classify(tile, &params) == (*reference)->classify(tile, &params));
  }
}

}  // namespace

TEST_CASE("host code: a miss compiles and stores the object, the next process loads it",
          "[disk_cache][host_code_cache]") {
  if (!FLEXJIT_WITH_LLVM) {
    WARN("built without LLVM: host code is the evaluator, nothing is cached");
    return;
  }
  TempDir dir;
  for (const VariantSelection& selection :
       {VariantSelection{.name = "sliding"}, VariantSelection{.name = "gemma2_local"}}) {
    INFO(selection.name);
    const Variant variant = standard_variant(selection);
    auto first_store = host_store(dir.path);
    auto built = make_host_code(variant, true, first_store);
    REQUIRE(built.ok());
    CHECK((*built)->native());
    CHECK(first_store->disk_hit_count() == 0);

    auto second_store = host_store(dir.path);  // as in another process
    auto loaded = make_host_code(variant, true, second_store);
    REQUIRE(loaded.ok());
    CHECK((*loaded)->native());
    CHECK(second_store->disk_hit_count() == 1);
    check_against_evaluator(variant, **loaded);
  }
  // One entry per variant, named after it, each read once.
  const auto entries = DiskCache({.directory = dir.path}).list();
  REQUIRE(entries.size() == 2);
  for (const auto& entry : entries) {
    CHECK((entry.name == "host_sliding" || entry.name == "host_gemma2_local"));
    CHECK(entry.hits == 1);
  }
  CHECK(entries[0].key != entries[1].key);
}

TEST_CASE("host code: a corrupt, truncated or foreign entry is rebuilt with one warning",
          "[disk_cache][host_code_cache]") {
  if (!FLEXJIT_WITH_LLVM) {
    WARN("built without LLVM: host code is the evaluator, nothing is cached");
    return;
  }
  TempDir dir;
  const Variant variant = standard_variant({.name = "causal_softcap"});
  REQUIRE(make_host_code(variant, true, host_store(dir.path)).ok());
  const auto entries = DiskCache({.directory = dir.path}).list();
  REQUIRE(entries.size() == 1);
  const fs::path path = entries[0].path;
  const std::string good = read_file(path);
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 1);
  for (const std::string& bytes :
       {std::string("garbage"), good.substr(0, good.size() - 100), flipped,
        encode_cache_entry(kOtherKey, CacheEntry{.name = "host_causal_softcap", .cubin = "x"})}) {
    write_file(path, bytes);
    auto store = host_store(dir.path);
    StderrCapture capture;
    auto code = make_host_code(variant, true, store);
    const std::string log = capture.text();
    REQUIRE(code.ok());
    CHECK(store->disk_hit_count() == 0);
    CHECK(count_of(log, "ignoring cache entry") == 1);
    check_against_evaluator(variant, **code);
    CHECK(read_file(path) == good);  // rebuilt, byte for byte
  }
  auto store = host_store(dir.path);
  REQUIRE(make_host_code(variant, true, store).ok());
  CHECK(store->disk_hit_count() == 1);
}

TEST_CASE("host code: an unwritable cache directory degrades to no cache with one warning",
          "[disk_cache][host_code_cache]") {
  if (!FLEXJIT_WITH_LLVM) {
    WARN("built without LLVM: host code is the evaluator, nothing is cached");
    return;
  }
  TempDir dir;
  write_file(dir.path / "file", "x");  // a directory under a file cannot be made, even by root
  auto store = host_store(dir.path / "file" / "cache");
  const Variant variant = standard_variant({.name = "prefix_lm"});
  StderrCapture capture;
  for (int i = 0; i < 2; ++i) {
    auto code = make_host_code(variant, true, store);
    REQUIRE(code.ok());
    CHECK((*code)->native());
    check_against_evaluator(variant, **code);
  }
  CHECK(store->disk_hit_count() == 0);
  CHECK(count_of(capture.text(), "caching in memory only") == 1);
}

TEST_CASE("host code: the IR its key hashes is canonical and matches the golden file",
          "[disk_cache][host_code_cache][golden]") {
  const fs::path golden = FLEXJIT_SOURCE_DIR "/tests/runtime/golden/host_code_ir_v1.bin";
  // A module of its own, so that the standard library may change without touching the file.
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check({"golden.mask", R"(
param window: int
param slopes: float[h]
const cap: float = 50.0
mask sliding = q >= kv && q - kv < window && (q - kv) % 2 != 1
score softcap = cap * tanh(score / cap) - slopes[h] * float(q - kv)
variant v = sliding with softcap
)"},
                                                  diagnostics);
  REQUIRE(diagnostics.empty());
  auto golden_variant = lower_variant(module, {.name = "v"});
  REQUIRE(golden_variant.ok());
  const std::string bytes = host_code_ir_bytes(*golden_variant);
  if (bytes != read_file(golden)) {
    const fs::path actual = fs::temp_directory_path() / "host_code_ir.bin.actual";
    write_file(actual, bytes);
    FAIL(
        "the host code's IR serialization changed: bump kHostCodeKeyVersion "
        "(compiler/codegen/llvm/native_host_code.cpp), update docs/cache.md and copy "
        << actual << " to " << golden << " (renamed for the new version)");
  }
  // The encoding documented in host_code.h, read independently of the writer: nodes operands
  // first, each kind, type, then its leaf's payload (here Var q, Int), immediates by their bits.
  CHECK(bytes.substr(0, 4) == std::string("\x03\x01\x02\x00", 4));  // Var, Int, q, no operands
  CHECK(bytes.find(std::string("\x01\x02\x00\x00\x48\x42", 6)) != bytes.npos);  // 50.0f
  // Lowered again: the same bytes; anything the code depends on changed: other bytes.
  const std::string gemma2_local = host_code_ir_bytes(standard_variant({.name = "gemma2_local"}));
  CHECK(host_code_ir_bytes(standard_variant({.name = "gemma2_local"})) == gemma2_local);
  const std::vector<std::string> others = {
      gemma2_local,
      host_code_ir_bytes(standard_variant({.name = "sliding"})),
      host_code_ir_bytes(standard_variant({.name = "gemma2_global"})),
      host_code_ir_bytes(standard_variant({.name = "gemma2_local", .defines = {{"cap", "30.0"}}})),
      host_code_ir_bytes(standard_variant({.name = "sliding", .score = "alibi"})),
  };
  for (size_t i = 0; i < others.size(); ++i) {
    INFO("variant " << i);
    for (size_t j = 0; j < i; ++j)
      CHECK(others[i] != others[j]);
  }
}

TEST_CASE("a second `flexjit hints` loads the mask's host code from the disk cache",
          "[disk_cache][host_code_cache][process]") {
  if (!FLEXJIT_WITH_LLVM) {
    WARN("built without LLVM: host code is the evaluator, nothing is cached");
    return;
  }
  TempDir dir;
  REQUIRE(fs::exists(cli_path()));
  const std::vector<std::string> hints = {"hints",  FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask",
                                          "--mask", "sliding",
                                          "--set",  "window=100"};
  for (int run = 0; run < 2; ++run) {
    const fs::path log = dir.path / fmt::format("{}.log", run);
    const int status = wait_status(start_cli(hints, dir.path / "cache", log));
    INFO(read_file(log));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const auto entries = DiskCache({.directory = dir.path / "cache"}).list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].name == "host_sliding");
  CHECK(entries[0].hits == 1);
}
