#include <array>
#include <cstdint>
#include <limits>
#include <string_view>

#include "flexjit/dsl/frontend.h"

namespace flexjit::dsl {
namespace {

// Spans hold 32-bit offsets, and the end-of-file token sits one past the last byte.
constexpr size_t kMaxSourceBytes = std::numeric_limits<uint32_t>::max() - 1;

constexpr std::array<std::string_view, 13> kKeywords = {
    "param", "const", "mask", "score", "variant", "with", "true",
    "false", "int",   "bool", "float", "any",     "all"};

// Longest first, so that "<=" is not read as "<" then "=", nor "&&" as "&" then "&".
constexpr std::array<std::string_view, 28> kPuncts = {
    "<=", ">=", "==", "!=", "&&", "||", "<<", ">>", "+", "-", "*", "/", "%", "<",
    ">",  "!",  "&",  "|",  "^",  "~",  "?",  "(",  ")", "[", "]", ",", ":", "="};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_ident_char(char c) {
  return is_ident_start(c) || is_digit(c);
}
bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}
bool is_ascii(char c) {
  return static_cast<unsigned char>(c) < 0x80;
}

bool is_keyword(std::string_view word) {
  for (std::string_view keyword : kKeywords) {
    if (word == keyword) return true;
  }
  return false;
}

size_t punct_length(std::string_view rest) {
  for (std::string_view punct : kPuncts) {
    if (rest.starts_with(punct)) return punct.size();
  }
  return 0;
}

Span span_of(size_t begin, size_t end) {
  return {static_cast<uint32_t>(begin), static_cast<uint32_t>(end - begin)};
}

// The end of the exponent (`e`, an optional sign, digits) starting at `i`, or `i` when there
// is none there.
size_t exponent_end(std::string_view text, size_t i) {
  if (i >= text.size() || (text[i] != 'e' && text[i] != 'E')) return i;
  size_t j = i + 1;
  if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
  if (j >= text.size() || !is_digit(text[j])) return i;
  while (j < text.size() && is_digit(text[j]))
    ++j;
  return j;
}

}  // namespace

std::vector<Token> tokenize(const Source& source, std::vector<Diagnostic>& diagnostics) {
  std::string_view text = source.text;
  std::vector<Token> tokens;
  if (text.size() > kMaxSourceBytes) {
    diagnostics.push_back(
        {Severity::Error, {0, 0}, "source is too large (the limit is 4 GiB minus 2 bytes)"});
    tokens.push_back({TokenKind::End, {0, 0}});
    return tokens;
  }

  auto error = [&](size_t begin, size_t end, std::string message) {
    diagnostics.push_back({Severity::Error, span_of(begin, end), std::move(message)});
  };

  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    size_t begin = i;
    if (c == '\n') {
      tokens.push_back({TokenKind::Newline, span_of(i, i + 1)});
      ++i;
    } else if (is_blank(c)) {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n')
        ++i;
    } else if (is_ident_start(c)) {
      while (i < text.size() && is_ident_char(text[i]))
        ++i;
      TokenKind kind =
          is_keyword(text.substr(begin, i - begin)) ? TokenKind::Keyword : TokenKind::Ident;
      tokens.push_back({kind, span_of(begin, i)});
    } else if (is_digit(c)) {
      // int_lit = digits; float_lit = digits "." digits? exponent? | digits exponent.
      // A literal runs over every identifier character and `.` after it, so `12ab`, `0x10`
      // or `1.5.2` is one bad literal rather than a number followed by something. It is
      // still a token, so the parser goes on.
      while (i < text.size() && is_digit(text[i]))
        ++i;
      bool is_float = false;
      if (i < text.size() && text[i] == '.') {
        is_float = true;
        ++i;
        while (i < text.size() && is_digit(text[i]))
          ++i;
      }
      size_t exponent = exponent_end(text, i);
      is_float |= exponent != i;
      i = exponent;
      size_t good_end = i;
      while (i < text.size() && (is_ident_char(text[i]) || text[i] == '.'))
        ++i;
      if (i != good_end) {
        error(begin, i,
              std::string(is_float ? "invalid float literal " : "invalid integer literal ") +
                  quote(text.substr(begin, i - begin)));
      }
      tokens.push_back({is_float ? TokenKind::FloatLit : TokenKind::IntLit, span_of(begin, i)});
    } else if (size_t length = punct_length(text.substr(i))) {
      i += length;
      tokens.push_back({TokenKind::Punct, span_of(begin, i)});
    } else if (!is_ascii(c)) {
      // One diagnostic for a run of non-ASCII bytes: a UTF-8 character is one mistake.
      while (i < text.size() && !is_ascii(text[i]))
        ++i;
      error(begin, i, "unexpected character " + quote(text.substr(begin, i - begin)));
    } else {
      ++i;
      error(begin, i, "unexpected character " + quote(text.substr(begin, 1)));
    }
  }

  // A file that ends with a newline has its end on the last line, so an error there
  // ("expected an expression, found end of file") points after the last character.
  size_t end = text.ends_with('\n') ? text.size() - 1 : text.size();
  tokens.push_back({TokenKind::End, span_of(end, end)});
  return tokens;
}

}  // namespace flexjit::dsl
