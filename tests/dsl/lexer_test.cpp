#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "flexjit/dsl/frontend.h"

using namespace flexjit::dsl;

namespace {

struct Lexed {
  std::vector<Token> tokens;
  std::vector<Diagnostic> diagnostics;
  std::string text;

  std::string_view text_of(size_t i) const {
    return std::string_view(text).substr(tokens[i].span.offset, tokens[i].span.length);
  }
  // Every token's text but the end's.
  std::vector<std::string_view> texts() const {
    std::vector<std::string_view> all;
    for (size_t i = 0; i + 1 < tokens.size(); ++i)
      all.push_back(text_of(i));
    return all;
  }
};

Lexed lex(std::string text) {
  Lexed lexed;
  lexed.text = text;
  lexed.tokens = tokenize(Source{"t.mask", std::move(text)}, lexed.diagnostics);
  return lexed;
}

}  // namespace

TEST_CASE("tokenize splits a declaration into kinds and byte ranges", "[dsl][lexer]") {
  Lexed lexed = lex("mask m_1 = q >= kv # comment, with 'bytes' \xff\n");
  REQUIRE(lexed.diagnostics.empty());
  std::vector<TokenKind> kinds;
  for (const Token& token : lexed.tokens)
    kinds.push_back(token.kind);
  REQUIRE(kinds == std::vector<TokenKind>{TokenKind::Keyword, TokenKind::Ident, TokenKind::Punct,
                                          TokenKind::Ident, TokenKind::Punct, TokenKind::Ident,
                                          TokenKind::Newline, TokenKind::End});
  CHECK(lexed.text_of(0) == "mask");
  CHECK(lexed.text_of(1) == "m_1");
  CHECK(lexed.text_of(4) == ">=");
  CHECK(lexed.tokens[5].span.offset == 16);
  CHECK(lexed.text_of(5) == "kv");
}

TEST_CASE("two-byte operators are read longest first", "[dsl][lexer]") {
  Lexed lexed = lex("<=>=!===&&||<>!=");
  REQUIRE(lexed.diagnostics.empty());
  CHECK(lexed.texts() ==
        std::vector<std::string_view>{"<=", ">=", "!=", "==", "&&", "||", "<", ">", "!="});
  // The bitwise operators, and three of a kind: the longest match first, then what is left.
  Lexed bitwise = lex("a&b|c^~d<<e>>f&&&|||<<<>>>");
  REQUIRE(bitwise.diagnostics.empty());
  CHECK(bitwise.texts() == std::vector<std::string_view>{"a",  "&",  "b",  "|",  "c",  "^",  "~",
                                                         "d",  "<<", "e",  ">>", "f",  "&&", "&",
                                                         "||", "|",  "<<", "<",  ">>", ">"});
}

TEST_CASE("keywords are whole words", "[dsl][lexer]") {
  Lexed lexed = lex("masks int integer true truex bool");
  REQUIRE(lexed.diagnostics.empty());
  CHECK(lexed.tokens[0].kind == TokenKind::Ident);
  CHECK(lexed.tokens[1].kind == TokenKind::Keyword);
  CHECK(lexed.tokens[2].kind == TokenKind::Ident);
  CHECK(lexed.tokens[3].kind == TokenKind::Keyword);
  CHECK(lexed.tokens[4].kind == TokenKind::Ident);
  CHECK(lexed.tokens[5].kind == TokenKind::Keyword);
}

TEST_CASE("the full language's keywords and punctuation", "[dsl][lexer]") {
  Lexed lexed = lex("score variant with float any all scores any_x ? [ ] ?:");
  REQUIRE(lexed.diagnostics.empty());
  std::vector<TokenKind> kinds;
  for (const Token& token : lexed.tokens)
    kinds.push_back(token.kind);
  CHECK(kinds == std::vector<TokenKind>{TokenKind::Keyword, TokenKind::Keyword, TokenKind::Keyword,
                                        TokenKind::Keyword, TokenKind::Keyword, TokenKind::Keyword,
                                        TokenKind::Ident, TokenKind::Ident, TokenKind::Punct,
                                        TokenKind::Punct, TokenKind::Punct, TokenKind::Punct,
                                        TokenKind::Punct, TokenKind::End});
  CHECK(lexed.text_of(11) == "?");
  CHECK(lexed.text_of(12) == ":");
}

TEST_CASE("float literals: a point, an exponent, or both", "[dsl][lexer]") {
  Lexed lexed = lex("50.0 1.5e-3 2e4 1. 1.e5 7E+2 0.000 42");
  REQUIRE(lexed.diagnostics.empty());
  std::vector<std::string_view> floats;
  for (size_t i = 0; i + 1 < lexed.tokens.size(); ++i) {
    if (lexed.tokens[i].kind == TokenKind::FloatLit) floats.push_back(lexed.text_of(i));
  }
  CHECK(floats ==
        std::vector<std::string_view>{"50.0", "1.5e-3", "2e4", "1.", "1.e5", "7E+2", "0.000"});
  CHECK(lexed.tokens[7].kind == TokenKind::IntLit);
  // `.5` is not a literal: a number starts with a digit.
  Lexed dot = lex(".5");
  REQUIRE(dot.diagnostics.size() == 1);
  CHECK(dot.diagnostics[0].message == "unexpected character '.'");
  CHECK(dot.tokens[0].kind == TokenKind::IntLit);
}

TEST_CASE("a float literal followed by letters or a second point is one bad literal",
          "[dsl][lexer]") {
  Lexed lexed = lex("1.5f 1.5.2 2e 3e+ 1e5x");
  REQUIRE(lexed.diagnostics.size() == 5);
  CHECK(lexed.diagnostics[0].message == "invalid float literal '1.5f'");
  CHECK(lexed.diagnostics[1].message == "invalid float literal '1.5.2'");
  CHECK(lexed.diagnostics[1].span.length == 5);
  // An `e` with no digits after it is no exponent: the literal is an integer with letters.
  CHECK(lexed.diagnostics[2].message == "invalid integer literal '2e'");
  CHECK(lexed.diagnostics[3].message == "invalid integer literal '3e'");
  CHECK(lexed.diagnostics[4].message == "invalid float literal '1e5x'");
  // `3e` then `+`: the sign is an operator again.
  CHECK(lexed.text_of(4) == "+");
}

TEST_CASE("a literal followed by letters is one bad literal", "[dsl][lexer]") {
  Lexed lexed = lex("12ab 0x10 007");
  REQUIRE(lexed.diagnostics.size() == 2);
  CHECK(lexed.diagnostics[0].message == "invalid integer literal '12ab'");
  CHECK(lexed.diagnostics[1].message == "invalid integer literal '0x10'");
  CHECK(lexed.diagnostics[1].span.offset == 5);
  CHECK(lexed.diagnostics[1].span.length == 4);
  REQUIRE(lexed.tokens.size() == 4);
  CHECK(lexed.tokens[0].kind == TokenKind::IntLit);
  CHECK(lexed.text_of(2) == "007");
}

TEST_CASE("bytes that start no token are reported and skipped", "[dsl][lexer]") {
  Lexed lexed = lex(std::string("q @ $ ` \xe2\x80\x94 ;\0kv", 16));
  REQUIRE(lexed.diagnostics.size() == 6);
  CHECK(lexed.diagnostics[0].message == "unexpected character '@'");
  CHECK(lexed.diagnostics[1].message == "unexpected character '$'");
  CHECK(lexed.diagnostics[2].message == "unexpected character '`'");
  // A UTF-8 character is one mistake, not three.
  CHECK(lexed.diagnostics[3].message == "unexpected character '\\xe2\\x80\\x94'");
  CHECK(lexed.diagnostics[3].span.length == 3);
  CHECK(lexed.diagnostics[4].message == "unexpected character ';'");
  CHECK(lexed.diagnostics[5].message == "unexpected character '\\x00'");
  REQUIRE(lexed.tokens.size() == 3);
  CHECK(lexed.text_of(0) == "q");
  CHECK(lexed.text_of(1) == "kv");
}

TEST_CASE("the end token sits on the last line", "[dsl][lexer]") {
  std::vector<Diagnostic> diagnostics;
  CHECK(tokenize(Source{"t", "q\n"}, diagnostics).back().span.offset == 1);
  CHECK(tokenize(Source{"t", "q"}, diagnostics).back().span.offset == 1);
  CHECK(tokenize(Source{"t", ""}, diagnostics).back().span.offset == 0);
  CHECK(diagnostics.empty());
}

TEST_CASE("quote escapes unprintable bytes and shortens long text", "[dsl][lexer]") {
  CHECK(quote("windw") == "'windw'");
  CHECK(quote(std::string_view("a\0'\\", 4)) == "'a\\x00\\x27\\x5c'");
  CHECK(quote(std::string(100, 'x')) == "'" + std::string(40, 'x') + "...'");
}
