// Diagnostic log lines on stderr, "flexjit: <level>: <message>", filtered by FLEXJIT_LOG.
// For what a user of the library should know about but not act on (a rebuilt cache entry, a
// cache directory that cannot be written); errors a caller must handle are returned as values.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "jit/environment.h"

namespace flexjit {

// Whether messages of `level` are printed (FLEXJIT_LOG, default warn).
bool log_enabled(LogLevel level);

// Prints one line if `level` is enabled.
void log_message(LogLevel level, std::string_view message);

// Prints one line whatever the level, with one write(2), so the lines of concurrent threads and
// processes do not interleave.
void write_log_line(LogLevel level, std::string_view message);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_message(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace flexjit
