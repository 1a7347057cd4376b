// Recursive descent, one function per grammar rule (docs/language.md lists the grammar).
// A syntax error abandons the declaration it is in; the parser then resumes at the next line
// that starts with a declaration keyword, so one run reports every broken declaration.
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "flexjit/dsl/frontend.h"

namespace flexjit::dsl {
namespace {

// Deepest expression accepted: every operator, call and pair of parentheses above the
// deepest leaf is one level. The parser recurses once per level and so do the checker and
// the lowering, so the cap bounds every stage's stack whatever the input.
constexpr int kMaxExprDepth = 256;

Span cover(Span first, Span last) {
  return {first.offset, last.offset + last.length - first.offset};
}

// Literals are stored as written; the checker rejects those outside int32. A value beyond
// int64 saturates, which keeps it out of range.
int64_t literal_value(std::string_view digits) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') break;
    int digit = c - '0';
    value = value > (kMax - digit) / 10 ? kMax : value * 10 + digit;
  }
  return value;
}

ExprPtr make_expr(Expr::Kind kind, Span span) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->span = span;
  return expr;
}

class Parser {
 public:
  Parser(std::string_view text, std::vector<Token> tokens, std::vector<uint32_t> lex_error_offsets,
         std::vector<Diagnostic>& diagnostics)
      : text_(text),
        tokens_(std::move(tokens)),
        lex_error_offsets_(std::move(lex_error_offsets)),
        diagnostics_(diagnostics) {}

  std::vector<Decl> file();

 private:
  bool declaration();
  bool param_decl();
  bool const_decl();
  bool mask_decl();
  bool type(Decl& decl);
  bool body(Decl& decl);
  ExprPtr expr();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr equality();
  ExprPtr relational();
  ExprPtr additive();
  ExprPtr multiplicative();
  ExprPtr binary_chain(ExprPtr (Parser::*operand)(), std::initializer_list<BinaryOp> ops);
  ExprPtr unary();
  ExprPtr primary();
  ExprPtr parenthesized();
  ExprPtr call(const Token& name);

  std::string_view text_of(const Token& token) const {
    return text_.substr(token.span.offset, token.span.length);
  }
  const Token& peek();
  Token advance();
  bool at(std::string_view spelling);
  bool consume(std::string_view spelling);
  bool expect(std::string_view spelling);
  void skip_newlines();
  std::string describe(const Token& token) const;
  bool lex_error_between(uint32_t begin, uint32_t end) const;
  void syntax_error(const Token& at, std::string message);
  void synchronize();
  bool starts_declaration_line(size_t index) const;
  std::optional<Token> declared_name();
  Decl& add_decl(DeclKind kind, const Token& keyword, const Token& name);
  Span span_from(uint32_t offset) const { return {offset, prev_end_ - offset}; }
  bool enter_level(const Token& at);
  ExprPtr with_depth(ExprPtr expr, int depth, const Token& at);
  int take_depth(const Expr* expr);

  std::string_view text_;
  std::vector<Token> tokens_;
  std::vector<uint32_t> lex_error_offsets_;  // ascending
  std::vector<Diagnostic>& diagnostics_;
  std::vector<Decl> decls_;

  size_t pos_ = 0;
  uint32_t prev_end_ = 0;    // end of the last consumed token
  uint32_t line_start_ = 0;  // where the current declaration's line starts
  int paren_depth_ = 0;      // newlines inside parentheses continue the expression
  int levels_ = 0;           // nesting levels entered by the recursion, for kMaxExprDepth
  // Depth of each expression built but not yet attached to a parent (a Binary chain grows
  // the tree without recursing, so depth is counted on the nodes, not only on the stack).
  std::unordered_map<const Expr*, int> depth_;
};

const Token& Parser::peek() {
  if (paren_depth_ > 0) skip_newlines();
  return tokens_[pos_];
}

Token Parser::advance() {
  Token token = peek();
  if (token.kind != TokenKind::End) {
    ++pos_;
    prev_end_ = token.span.offset + token.span.length;
  }
  return token;
}

// Keywords and punctuators never share a spelling, so one test serves both.
bool Parser::at(std::string_view spelling) {
  const Token& token = peek();
  return (token.kind == TokenKind::Punct || token.kind == TokenKind::Keyword) &&
         text_of(token) == spelling;
}

bool Parser::consume(std::string_view spelling) {
  if (!at(spelling)) return false;
  advance();
  return true;
}

bool Parser::expect(std::string_view spelling) {
  if (consume(spelling)) return true;
  syntax_error(peek(), fmt::format("expected '{}', found {}", spelling, describe(peek())));
  return false;
}

void Parser::skip_newlines() {
  while (tokens_[pos_].kind == TokenKind::Newline)
    ++pos_;
}

std::string Parser::describe(const Token& token) const {
  if (token.kind == TokenKind::End) return "end of file";
  if (token.kind == TokenKind::Newline) return "end of line";
  return quote(text_of(token));
}

bool Parser::lex_error_between(uint32_t begin, uint32_t end) const {
  auto rejected = std::lower_bound(lex_error_offsets_.begin(), lex_error_offsets_.end(), begin);
  return rejected != lex_error_offsets_.end() && *rejected < end;
}

void Parser::syntax_error(const Token& at, std::string message) {
  // A byte the lexer rejected earlier on this declaration's lines is the likely cause; a
  // second error for it would only be noise.
  if (lex_error_between(line_start_, at.span.offset + 1)) return;
  diagnostics_.push_back({Severity::Error, at.span, std::move(message)});
}

bool Parser::starts_declaration_line(size_t index) const {
  const Token& token = tokens_[index];
  std::string_view word = text_of(token);
  bool declaration_keyword =
      token.kind == TokenKind::Keyword && (word == "param" || word == "const" || word == "mask");
  return declaration_keyword && (index == 0 || tokens_[index - 1].kind == TokenKind::Newline);
}

void Parser::synchronize() {
  while (tokens_[pos_].kind != TokenKind::End && !starts_declaration_line(pos_))
    ++pos_;
}

bool Parser::enter_level(const Token& at) {
  if (levels_ >= kMaxExprDepth) {
    syntax_error(
        at, fmt::format("expression nested too deeply (the limit is {} levels)", kMaxExprDepth));
    return false;
  }
  ++levels_;
  return true;
}

ExprPtr Parser::with_depth(ExprPtr expr, int depth, const Token& at) {
  if (depth > kMaxExprDepth) {
    syntax_error(
        at, fmt::format("expression nested too deeply (the limit is {} levels)", kMaxExprDepth));
    return nullptr;
  }
  depth_[expr.get()] = depth;
  return expr;
}

int Parser::take_depth(const Expr* expr) {
  auto it = depth_.find(expr);
  if (it == depth_.end()) return 0;
  int depth = it->second;
  depth_.erase(it);
  return depth;
}

// file = "\n"* (declaration "\n"+)* (declaration "\n"*)? EOF
std::vector<Decl> Parser::file() {
  for (;;) {
    skip_newlines();
    if (tokens_[pos_].kind == TokenKind::End) break;
    line_start_ = pos_ == 0 ? 0 : tokens_[pos_ - 1].span.offset + 1;
    paren_depth_ = 0;
    levels_ = 0;
    depth_.clear();
    size_t decl_count = decls_.size();
    bool parsed = declaration();
    const Token& next = tokens_[pos_];
    if (parsed && next.kind != TokenKind::Newline && next.kind != TokenKind::End) {
      syntax_error(next, "expected end of line after the declaration, found " + describe(next));
      parsed = false;
    }
    if (!parsed) synchronize();
    // A declaration with a syntax error, or with bytes the lexer dropped, may be misparsed:
    // keep only its name, so that uses of it resolve and raise no follow-on errors.
    bool unreliable = !parsed || lex_error_between(line_start_, tokens_[pos_].span.offset);
    if (decls_.size() > decl_count && unreliable) {
      Decl& decl = decls_.back();
      decl.value.reset();
      if (decl.kind != DeclKind::Mask) {
        decl.declared_type = Type::Error;
        decl.type_span = {};
      }
    }
  }
  return std::move(decls_);
}

// declaration = param_decl | const_decl | mask_decl
bool Parser::declaration() {
  if (at("param")) return param_decl();
  if (at("const")) return const_decl();
  if (at("mask")) return mask_decl();
  syntax_error(peek(),
               "expected a declaration ('param', 'const' or 'mask'), found " + describe(peek()));
  return false;
}

std::optional<Token> Parser::declared_name() {
  if (peek().kind == TokenKind::Ident) return advance();
  syntax_error(peek(), "expected a name, found " + describe(peek()));
  return std::nullopt;
}

Decl& Parser::add_decl(DeclKind kind, const Token& keyword, const Token& name) {
  Decl& decl = decls_.emplace_back();
  decl.kind = kind;
  decl.name = text_of(name);
  decl.name_span = name.span;
  decl.span = span_from(keyword.span.offset);
  return decl;
}

// param_decl = "param" name ":" type
bool Parser::param_decl() {
  Token keyword = advance();
  std::optional<Token> name = declared_name();
  if (!name) return false;
  Decl& decl = add_decl(DeclKind::Param, keyword, *name);
  bool ok = expect(":") && type(decl);
  decl.span = span_from(keyword.span.offset);
  return ok;
}

// const_decl = "const" name ":" type "=" expr
bool Parser::const_decl() {
  Token keyword = advance();
  std::optional<Token> name = declared_name();
  if (!name) return false;
  Decl& decl = add_decl(DeclKind::Const, keyword, *name);
  bool ok = expect(":") && type(decl) && expect("=") && body(decl);
  decl.span = span_from(keyword.span.offset);
  return ok;
}

// mask_decl = "mask" name "=" expr
bool Parser::mask_decl() {
  Token keyword = advance();
  std::optional<Token> name = declared_name();
  if (!name) return false;
  Decl& decl = add_decl(DeclKind::Mask, keyword, *name);
  decl.declared_type = Type::Bool;
  bool ok = expect("=") && body(decl);
  decl.span = span_from(keyword.span.offset);
  return ok;
}

// type = "int" | "bool" | name
// Any name parses as a type so that the checker can say which types are supported.
bool Parser::type(Decl& decl) {
  const Token& token = peek();
  std::string_view word = text_of(token);
  bool builtin_type = token.kind == TokenKind::Keyword && (word == "int" || word == "bool");
  if (!builtin_type && token.kind != TokenKind::Ident) {
    syntax_error(token, "expected a type, found " + describe(token));
    return false;
  }
  decl.type_span = token.span;
  decl.declared_type = word == "int" ? Type::Int : word == "bool" ? Type::Bool : Type::Error;
  advance();
  return true;
}

// The expression after "=", which may start on the next line.
bool Parser::body(Decl& decl) {
  skip_newlines();
  decl.value = expr();
  return decl.value != nullptr;
}

// expr = or_expr
ExprPtr Parser::expr() {
  return or_expr();
}

// or_expr = and_expr ("||" and_expr)*
ExprPtr Parser::or_expr() {
  return binary_chain(&Parser::and_expr, {BinaryOp::Or});
}

// and_expr = equality ("&&" equality)*
ExprPtr Parser::and_expr() {
  return binary_chain(&Parser::equality, {BinaryOp::And});
}

// equality = relational (("==" | "!=") relational)*
ExprPtr Parser::equality() {
  return binary_chain(&Parser::relational, {BinaryOp::Eq, BinaryOp::Ne});
}

// relational = additive (("<" | "<=" | ">" | ">=") additive)*
ExprPtr Parser::relational() {
  return binary_chain(&Parser::additive, {BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge});
}

// additive = multiplicative (("+" | "-") multiplicative)*
ExprPtr Parser::additive() {
  return binary_chain(&Parser::multiplicative, {BinaryOp::Add, BinaryOp::Sub});
}

// multiplicative = unary (("*" | "/" | "%") unary)*
ExprPtr Parser::multiplicative() {
  return binary_chain(&Parser::unary, {BinaryOp::Mul, BinaryOp::Div, BinaryOp::Mod});
}

// The left-associative loop of the binary rules above. A newline right after the operator
// continues the expression.
ExprPtr Parser::binary_chain(ExprPtr (Parser::*operand)(), std::initializer_list<BinaryOp> ops) {
  ExprPtr lhs = (this->*operand)();
  while (lhs) {
    const Token& token = peek();
    auto op = std::find_if(ops.begin(), ops.end(), [&](BinaryOp op) {
      return token.kind == TokenKind::Punct && text_of(token) == op_spelling(op);
    });
    if (op == ops.end()) break;
    Token op_token = advance();
    skip_newlines();
    ExprPtr rhs = (this->*operand)();
    if (!rhs) return nullptr;
    ExprPtr node = make_expr(Expr::Kind::Binary, cover(lhs->span, rhs->span));
    node->binary_op = *op;
    int depth = 1 + std::max(take_depth(lhs.get()), take_depth(rhs.get()));
    node->args.push_back(std::move(lhs));
    node->args.push_back(std::move(rhs));
    lhs = with_depth(std::move(node), depth, op_token);
  }
  return lhs;
}

// unary = ("-" | "!") unary | primary
ExprPtr Parser::unary() {
  if (!at("-") && !at("!")) return primary();
  Token op_token = advance();
  skip_newlines();
  if (!enter_level(op_token)) return nullptr;
  ExprPtr operand = unary();
  if (!operand) return nullptr;
  --levels_;
  ExprPtr node = make_expr(Expr::Kind::Unary, cover(op_token.span, operand->span));
  node->unary_op = text_of(op_token) == "-" ? UnaryOp::Neg : UnaryOp::Not;
  int depth = 1 + take_depth(operand.get());
  node->args.push_back(std::move(operand));
  return with_depth(std::move(node), depth, op_token);
}

// primary = parenthesized | call | name | int_lit | "true" | "false"
ExprPtr Parser::primary() {
  Token token = peek();
  if (at("(")) return parenthesized();
  if (token.kind == TokenKind::IntLit) {
    advance();
    ExprPtr literal = make_expr(Expr::Kind::IntLit, token.span);
    literal->int_value = literal_value(text_of(token));
    return with_depth(std::move(literal), 0, token);
  }
  if (at("true") || at("false")) {
    advance();
    ExprPtr literal = make_expr(Expr::Kind::BoolLit, token.span);
    literal->int_value = text_of(token) == "true" ? 1 : 0;
    return with_depth(std::move(literal), 0, token);
  }
  if (token.kind == TokenKind::Ident) {
    advance();
    if (at("(")) return call(token);
    ExprPtr name = make_expr(Expr::Kind::Name, token.span);
    name->name = text_of(token);
    return with_depth(std::move(name), 0, token);
  }
  syntax_error(token, "expected an expression, found " + describe(token));
  return nullptr;
}

// parenthesized = "(" expr ")"
// The parentheses make no node; they widen the inner expression's span.
ExprPtr Parser::parenthesized() {
  Token open = advance();
  if (!enter_level(open)) return nullptr;
  ++paren_depth_;
  ExprPtr inner = expr();
  if (!inner || !expect(")")) return nullptr;
  --paren_depth_;
  --levels_;
  inner->span = span_from(open.span.offset);
  int depth = 1 + take_depth(inner.get());
  return with_depth(std::move(inner), depth, open);
}

// call = name "(" (expr ("," expr)*)? ")"
ExprPtr Parser::call(const Token& name) {
  Token open = advance();
  if (!enter_level(open)) return nullptr;
  ++paren_depth_;
  ExprPtr node = make_expr(Expr::Kind::Call, name.span);
  node->name = text_of(name);
  int depth = 0;
  if (!at(")")) {
    do {
      ExprPtr arg = expr();
      if (!arg) return nullptr;
      depth = std::max(depth, take_depth(arg.get()));
      node->args.push_back(std::move(arg));
    } while (consume(","));
  }
  if (!expect(")")) return nullptr;
  --paren_depth_;
  --levels_;
  node->span = span_from(name.span.offset);
  return with_depth(std::move(node), depth + 1, open);
}

}  // namespace

Module parse(Source source, std::vector<Diagnostic>& diagnostics) {
  Module module;
  module.source = std::move(source);
  std::vector<Diagnostic> found;
  std::vector<Token> tokens = tokenize(module.source, found);
  std::vector<uint32_t> lex_error_offsets;
  for (const Diagnostic& diagnostic : found)
    lex_error_offsets.push_back(diagnostic.span.offset);
  Parser parser(module.source.text, std::move(tokens), std::move(lex_error_offsets), found);
  module.decls = parser.file();
  // Lexer and parser errors interleave in source order.
  std::stable_sort(found.begin(), found.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return a.span.offset < b.span.offset;
  });
  diagnostics.insert(diagnostics.end(), std::make_move_iterator(found.begin()),
                     std::make_move_iterator(found.end()));
  return module;
}

}  // namespace flexjit::dsl
