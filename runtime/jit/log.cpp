#include "jit/log.h"

#include <unistd.h>

#include <string>

namespace flexjit {

bool log_enabled(LogLevel level) {
  return level <= environment().log_level;
}

void log_message(LogLevel level, std::string_view message) {
  if (log_enabled(level)) write_log_line(level, message);
}

void write_log_line(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"error", "warning", "info", "debug"};
  const std::string line =
      fmt::format("flexjit: {}: {}\n", kNames[static_cast<int>(level)], message);
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}

}  // namespace flexjit
