#include "flexjit/dsl/diagnostic.h"

#include <algorithm>

#include <fmt/format.h>

namespace flexjit::dsl {

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
  std::string_view text = source.text;
  size_t offset = std::min<size_t>(diagnostic.span.offset, text.size());
  LineCol at = line_col(text, static_cast<uint32_t>(offset));
  size_t line_start = offset - (at.column - 1);
  size_t line_end = std::min(text.find('\n', line_start), text.size());
  std::string_view line = text.substr(line_start, line_end - line_start);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  // The marker line repeats the source line's tabs so that the caret lines up with the
  // column whatever the terminal's tab width.
  std::string marker;
  for (size_t i = line_start; i < offset; ++i)
    marker += text[i] == '\t' ? '\t' : ' ';
  marker += '^';
  size_t span_end = std::min<size_t>(offset + diagnostic.span.length, line_start + line.size());
  if (span_end > offset + 1) marker.append(span_end - offset - 1, '~');

  const char* severity = diagnostic.severity == Severity::Error ? "error" : "warning";
  return fmt::format("{}:{}:{}: {}: {}\n{}\n{}\n", source.name, at.line, at.column, severity,
                     diagnostic.message, line, marker);
}

std::string format_diagnostics(const Source& source, const std::vector<Diagnostic>& diagnostics) {
  std::string out;
  for (const Diagnostic& diagnostic : diagnostics)
    out += format_diagnostic(source, diagnostic);
  return out;
}

bool has_errors(const std::vector<Diagnostic>& diagnostics) {
  return std::any_of(diagnostics.begin(), diagnostics.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::Error; });
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
