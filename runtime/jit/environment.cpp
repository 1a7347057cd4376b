#include "jit/environment.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "jit/log.h"

namespace flexjit {
namespace {

std::string_view variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string_view(value) : std::string_view();
}

// "1048576", "512M", "1G" (binary units); nullopt when malformed or zero.
std::optional<uint64_t> parse_size(std::string_view text) {
  uint64_t number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error != std::errc() || number == 0) return std::nullopt;
  const std::string_view suffix(end, text.data() + text.size() - end);
  int shift = 0;
  if (suffix == "K" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g") {
    shift = 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  if (number > (UINT64_MAX >> shift)) return std::nullopt;
  return number << shift;
}

}  // namespace

Environment read_environment() {
  Environment env;
  if (std::string_view dir = variable("FLEXJIT_CACHE_DIR"); !dir.empty()) {
    env.cache_dir = dir;
  } else if (std::string_view xdg = variable("XDG_CACHE_HOME"); !xdg.empty()) {
    env.cache_dir = std::filesystem::path(xdg) / "flexjit";
  } else if (std::string_view home = variable("HOME"); !home.empty()) {
    env.cache_dir = std::filesystem::path(home) / ".cache" / "flexjit";
  }

  if (std::string_view size = variable("FLEXJIT_CACHE_MAX_BYTES"); !size.empty()) {
    if (auto bytes = parse_size(size)) {
      env.cache_max_bytes = *bytes;
    } else {
      env.problems.push_back(fmt::format(
          "FLEXJIT_CACHE_MAX_BYTES='{}' is not a positive size (e.g. 1073741824, 512M, 1G); "
          "using {} bytes",
          size, env.cache_max_bytes));
    }
  }

  const std::string_view always = variable("FLEXJIT_ALWAYS_COMPILE");
  env.always_compile = !always.empty() && always != "0";
  env.dump_dir = variable("FLEXJIT_DUMP_DIR");
  env.cuda_home = variable("CUDA_HOME");
  env.nvrtc_library = variable("FLEXJIT_NVRTC");

  if (std::string_view level = variable("FLEXJIT_LOG"); !level.empty()) {
    if (level == "error") {
      env.log_level = LogLevel::Error;
    } else if (level == "warn") {
      env.log_level = LogLevel::Warn;
    } else if (level == "info") {
      env.log_level = LogLevel::Info;
    } else if (level == "debug") {
      env.log_level = LogLevel::Debug;
    } else {
      env.problems.push_back(fmt::format(
          "FLEXJIT_LOG='{}' is not one of error, warn, info, debug; using warn", level));
    }
  }
  return env;
}

const Environment& environment() {
  static const Environment env = read_environment();
  // Written directly: log_message would call back into environment() while it initialises.
  static const bool logged = [] {
    if (env.log_level >= LogLevel::Warn) {
      for (const std::string& problem : env.problems)
        write_log_line(LogLevel::Warn, problem);
    }
    return true;
  }();
  (void)logged;
  return env;
}

}  // namespace flexjit
