// Diagnostics are values: the library collects them, only the CLI prints them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flexjit::dsl {

// A mask file (or an in-memory string) with the name used in diagnostics.
struct Source {
  std::string name;  // "dsl/lib/standard.mask", or "<string>"
  std::string text;
};

// A byte range of a Source. Line and column are computed only when printed.
struct Span {
  uint32_t offset = 0;
  uint32_t length = 0;
};

enum class Severity : uint8_t { Error, Warning };

struct Diagnostic {
  Severity severity = Severity::Error;
  Span span;
  std::string message;
};

struct LineCol {
  uint32_t line = 1;    // 1-based
  uint32_t column = 1;  // 1-based, in bytes
};

// Line and column of a byte offset (offsets past the end clamp to the end).
LineCol line_col(std::string_view text, uint32_t offset);

// `file:line:col: error: message`, then the source line and a caret under the column
// (tildes under the rest of the span on that line). Ends with a newline.
std::string format_diagnostic(const Source& source, const Diagnostic& diagnostic);

// Every diagnostic in order, formatted as above.
std::string format_diagnostics(const Source& source, const std::vector<Diagnostic>& diagnostics);

// Every diagnostic as one JSON document for editors:
// {"file": NAME, "diagnostics": [{"severity": "error"|"warning", "line": L, "column": C,
//   "end_line": L2, "end_column": C2, "offset": O, "length": N, "message": M}, ...]}
// (1-based lines and columns, the end exclusive). Ends with a newline.
std::string format_diagnostics_json(const Source& source,
                                    const std::vector<Diagnostic>& diagnostics);

bool has_errors(const std::vector<Diagnostic>& diagnostics);

// `text` with every control byte but newline and tab (and DEL) shown as '?': what a program
// writes to a terminal of text that may come from a file or the command line.
std::string printable(std::string_view text);

// `text` in single quotes for a message (`unknown name 'windw'`): bytes that are not printable
// ASCII, and the quote and backslash, are written as \xNN; text longer than 40 bytes is cut
// there and ends with "...", so an adversarial name cannot blow up a message.
std::string quote(std::string_view text);

}  // namespace flexjit::dsl
