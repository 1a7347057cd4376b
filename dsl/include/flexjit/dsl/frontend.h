// Lexer, parser and checker entry points.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flexjit/dsl/ast.h"
#include "flexjit/dsl/diagnostic.h"

namespace flexjit::dsl {

enum class TokenKind : uint8_t {
  Ident,
  IntLit,
  FloatLit,  // digits with a `.` and/or an exponent: 1.5, 50.0, 1e-3, .5 is not one
  Punct,  // operators and punctuation: + - * / % < <= > >= == != && || ! & | ^ ~ << >> ? ( ) [ ] ,
          // : =
  Keyword,  // param const mask score variant with true false int bool float any all
  Newline,  // declarations end at a newline unless inside parentheses or after an operator
  End,
};

// A token is a byte range of the source; its text is source.text.substr(offset, length).
struct Token {
  TokenKind kind = TokenKind::End;
  Span span;
};

// Splits `source` into tokens ending with one End token. Comments run from `#` to the end
// of the line. Bytes that start no token are reported and skipped.
std::vector<Token> tokenize(const Source& source, std::vector<Diagnostic>& diagnostics);

// Parses a whole file. Syntax errors are reported and the parser recovers at the next
// declaration, so one run reports every error it can.
Module parse(Source source, std::vector<Diagnostic>& diagnostics);

// Resolves names, computes types and reports every semantic error (unknown name, type
// mismatch, wrong arity, duplicate declaration, cycle among masks, scores or constants, a
// mask using `score`, literal out of range, constant division by zero, a bad `any`/`all`
// count, a variant naming something that is not a mask or a score) and warnings (unused
// parameter).
void check(Module& module, std::vector<Diagnostic>& diagnostics);

// parse + check.
Module parse_and_check(Source source, std::vector<Diagnostic>& diagnostics);

// Mask files larger than this are refused unread (a device such as /dev/zero never ends).
inline constexpr size_t kMaxSourceFileBytes = size_t{64} << 20;

// A mask file read whole (read_source_file): its source, or why not.
struct SourceFile {
  std::optional<Source> source;
  std::string error;     // "cannot open 'P': No such file or directory", "cannot read 'P': ..."
  bool missing = false;  // the file could not be opened (as opposed to read)
};

// Reads the file at `path` (a regular file, or a pipe or device read to its end). A directory,
// a read error (EIO from /proc/self/mem) or more than kMaxSourceFileBytes is an error, never
// an empty or partial source.
SourceFile read_source_file(const std::string& path);

}  // namespace flexjit::dsl
