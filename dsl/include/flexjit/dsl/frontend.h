// Lexer, parser and checker entry points.
#pragma once

#include <string_view>
#include <vector>

#include "flexjit/dsl/ast.h"
#include "flexjit/dsl/diagnostic.h"

namespace flexjit::dsl {

enum class TokenKind : uint8_t {
  Ident,
  IntLit,
  Punct,    // operators and punctuation: + - * / % < <= > >= == != && || ! ( ) , : =
  Keyword,  // param const mask true false int bool
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
// mismatch, wrong arity, duplicate declaration, cycle among masks, literal out of int32
// range, constant division by zero) and warnings (unused parameter).
void check(Module& module, std::vector<Diagnostic>& diagnostics);

// parse + check.
Module parse_and_check(Source source, std::vector<Diagnostic>& diagnostics);

}  // namespace flexjit::dsl
