#include "flexjit/dsl/diagnostic.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace flexjit::dsl {

namespace {

// Where each line of a text starts, so that many diagnostics in a long file cost a binary
// search each rather than a scan from the start.
class LineIndex {
 public:
  explicit LineIndex(std::string_view text) : text_(text) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') starts_.push_back(i + 1);
    }
  }

  // Where line `line` (1-based) ends: at its newline, or at the end of the text.
  size_t line_end(uint32_t line) const {
    return line < starts_.size() ? starts_[line] - 1 : text_.size();
  }

  // Line and column of `offset` (clamped to the end of the text).
  LineCol locate(size_t offset) const {
    offset = std::min(offset, text_.size());
    size_t line = std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin();
    return {static_cast<uint32_t>(line), static_cast<uint32_t>(offset - starts_[line - 1] + 1)};
  }

 private:
  std::string_view text_;
  std::vector<size_t> starts_ = {0};
};

// A source line longer than this is shown as a window of this many bytes around the column
// (with "..." where it is cut), so that many diagnostics on one long line (a minified or
// adversarial file) print in linear space.
constexpr size_t kMaxShownLine = 160;
// Bytes the window shows before the column, when the line is cut.
constexpr size_t kShownBefore = 60;

std::string format_with(const Source& source, const LineIndex& lines,
                        const Diagnostic& diagnostic) {
  std::string_view text = source.text;
  size_t offset = std::min<size_t>(diagnostic.span.offset, text.size());
  LineCol at = lines.locate(offset);
  size_t line_start = offset - (at.column - 1);
  std::string_view line = text.substr(line_start, lines.line_end(at.line) - line_start);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  // The window [from, to) of the line that is shown.
  size_t column = offset - line_start;
  size_t from = 0;
  size_t to = line.size();
  if (line.size() > kMaxShownLine) {
    from = column > kShownBefore ? column - kShownBefore : 0;
    to = std::min(line.size(), from + kMaxShownLine);
    from = std::min(from, to - kMaxShownLine);
  }
  std::string shown;
  std::string marker;
  if (from > 0) {
    shown = "...";
    marker = "   ";
  }
  // Control bytes (ESC, NUL, ...) of a hostile file never reach the terminal: each is shown as
  // one '?', so the caret stays under its column. Tabs stay, for the marker line below (a line
  // holds no newline).
  shown += printable(line.substr(from, to - from));
  if (to < line.size()) shown += "...";

  // The marker line repeats the source line's tabs so that the caret lines up with the
  // column whatever the terminal's tab width.
  for (size_t i = line_start + from; i < offset; ++i)
    marker += text[i] == '\t' ? '\t' : ' ';
  marker += '^';
  size_t span_end = std::min<size_t>(offset + diagnostic.span.length, line_start + to);
  if (span_end > offset + 1) marker.append(span_end - offset - 1, '~');

  const char* severity = diagnostic.severity == Severity::Error ? "error" : "warning";
  return fmt::format("{}:{}:{}: {}: {}\n{}\n{}\n", source.name, at.line, at.column, severity,
                     diagnostic.message, shown, marker);
}

}  // namespace

LineCol line_col(std::string_view text, uint32_t offset) {
  size_t end = std::min<size_t>(offset, text.size());
  LineCol at;
  size_t line_start = 0;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++at.line;
      line_start = i + 1;
    }
  }
  at.column = static_cast<uint32_t>(end - line_start + 1);
  return at;
}

std::string format_diagnostic(const Source& source, const Diagnostic& diagnostic) {
  return format_with(source, LineIndex(source.text), diagnostic);
}

std::string format_diagnostics(const Source& source, const std::vector<Diagnostic>& diagnostics) {
  LineIndex lines(source.text);
  std::string out;
  for (const Diagnostic& diagnostic : diagnostics)
    out += format_with(source, lines, diagnostic);
  return out;
}

std::string format_diagnostics_json(const Source& source,
                                    const std::vector<Diagnostic>& diagnostics) {
  std::string_view text = source.text;
  LineIndex lines(text);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Diagnostic& diagnostic : diagnostics) {
    size_t offset = std::min<size_t>(diagnostic.span.offset, text.size());
    size_t end = std::min<size_t>(offset + diagnostic.span.length, text.size());
    LineCol begin_at = lines.locate(offset);
    LineCol end_at = lines.locate(end);
    list.push_back({
        {"severity", diagnostic.severity == Severity::Error ? "error" : "warning"},
        {"line", begin_at.line},
        {"column", begin_at.column},
        {"end_line", end_at.line},
        {"end_column", end_at.column},
        {"offset", offset},
        {"length", end - offset},
        {"message", diagnostic.message},
    });
  }
  nlohmann::ordered_json document = {{"file", source.name}, {"diagnostics", std::move(list)}};
  // Messages quote source text through quote(), so they are ASCII; the file name may be any
  // bytes, which `replace` turns into U+FFFD rather than throwing.
  return document.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

bool has_errors(const std::vector<Diagnostic>& diagnostics) {
  return std::any_of(diagnostics.begin(), diagnostics.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::Error; });
}

std::string printable(std::string_view text) {
  std::string shown;
  shown.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    shown += c != '\n' && c != '\t' && (byte < 0x20 || byte == 0x7f) ? '?' : c;
  }
  return shown;
}

std::string quote(std::string_view text) {
  // Long enough for any sensible name; an adversarial 1 MB identifier must not make a 1 MB
  // message.
  constexpr size_t kMaxQuotedBytes = 40;
  std::string out = "'";
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == kMaxQuotedBytes) {
      out += "...";
      break;
    }
    unsigned char byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\' && byte != '\'') {
      out += static_cast<char>(byte);
    } else {
      out += fmt::format("\\x{:02x}", byte);
    }
  }
  out += "'";
  return out;
}

}  // namespace flexjit::dsl
