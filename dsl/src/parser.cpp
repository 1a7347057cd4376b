// Recursive descent, one function per grammar rule (docs/language.md lists the grammar).
// A syntax error abandons the declaration it is in; the parser then resumes at the next line
// that starts with a declaration keyword, so one run reports every broken declaration.
#include <algorithm>
#include <charconv>
#include <cmath>
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

// A float literal's value rounded to double (the checker rejects those beyond float32).
// `from_chars` reads the longest valid prefix, so a bad literal (`1.5f`, already reported)
// gets the value of its good part. Out of double range it reports no value: then an
// exponent-and-digits estimate says whether it overflowed (infinity) or underflowed (0).
double float_literal_value(std::string_view text) {
  double value = 0.0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc::result_out_of_range) return value;
  // Decimal magnitude: position of the first significant digit plus the exponent.
  int64_t magnitude = 0;
  size_t i = 0;
  size_t integer_digits = 0;
  bool significant = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    significant |= text[i] != '0';
    integer_digits += significant;
  }
  if (significant) {
    magnitude = static_cast<int64_t>(integer_digits);
  } else if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] == '0'; ++i)
      --magnitude;
  }
  size_t e = text.find_first_of("eE");
  if (e != std::string_view::npos) {
    bool negative = e + 1 < text.size() && text[e + 1] == '-';
    int64_t exponent = 0;
    for (size_t j = e + 1; j < text.size(); ++j) {
      if (text[j] < '0' || text[j] > '9') continue;
      exponent = std::min<int64_t>(exponent * 10 + (text[j] - '0'), int64_t{1} << 40);
    }
    magnitude += negative ? -exponent : exponent;
  }
  return magnitude > 0 ? HUGE_VAL : 0.0;
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
  bool score_decl();
  bool variant_decl();
  bool type(Decl& decl);
  bool dims(Decl& decl);
  bool body(Decl& decl);
  ExprPtr expr();
  ExprPtr conditional();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr equality();
  ExprPtr relational();
  ExprPtr bit_or();
  ExprPtr bit_xor();
  ExprPtr bit_and();
  ExprPtr shift();
  ExprPtr additive();
  ExprPtr multiplicative();
  ExprPtr binary_chain(ExprPtr (Parser::*operand)(), std::initializer_list<BinaryOp> ops);
  ExprPtr unary();
  ExprPtr primary();
  ExprPtr parenthesized();
  ExprPtr call(const Token& name);
  ExprPtr index(const Token& name);
  ExprPtr reduce();
  ExprPtr argument_list(ExprPtr node, const Token& first, std::string_view close);

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
      token.kind == TokenKind::Keyword && (word == "param" || word == "const" || word == "mask" ||
                                           word == "score" || word == "variant");
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
      if (decl.kind == DeclKind::Param || decl.kind == DeclKind::Const) {
        decl.declared_type = Type::Error;
        decl.type_span = {};
      }
      decl.variant_mask.clear();
      decl.variant_score.clear();
    }
  }
  return std::move(decls_);
}

// declaration = param_decl | const_decl | mask_decl | score_decl | variant_decl
bool Parser::declaration() {
  if (at("param")) return param_decl();
  if (at("const")) return const_decl();
  if (at("mask")) return mask_decl();
  if (at("score")) return score_decl();
  if (at("variant")) return variant_decl();
  syntax_error(peek(),
               "expected a declaration ('param', 'const', 'mask', 'score' or 'variant'), found " +
                   describe(peek()));
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

// param_decl = "param" name ":" type dims?
bool Parser::param_decl() {
  Token keyword = advance();
  std::optional<Token> name = declared_name();
  if (!name) return false;
  Decl& decl = add_decl(DeclKind::Param, keyword, *name);
  bool ok = expect(":") && type(decl) && (!at("[") || dims(decl));
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

// score_decl = "score" name "=" expr
bool Parser::score_decl() {
  Token keyword = advance();
  std::optional<Token> name = declared_name();
  if (!name) return false;
  Decl& decl = add_decl(DeclKind::Score, keyword, *name);
  decl.declared_type = Type::Float;
  bool ok = expect("=") && body(decl);
  decl.span = span_from(keyword.span.offset);
  return ok;
}

// variant_decl = "variant" name "=" name ("with" name)?
bool Parser::variant_decl() {
  Token keyword = advance();
  std::optional<Token> name = declared_name();
  if (!name) return false;
  Decl& decl = add_decl(DeclKind::Variant, keyword, *name);
  if (!expect("=")) return false;
  std::optional<Token> mask = declared_name();
  if (!mask) return false;
  decl.variant_mask = text_of(*mask);
  decl.variant_mask_span = mask->span;
  if (consume("with")) {
    std::optional<Token> score = declared_name();
    if (!score) return false;
    decl.variant_score = text_of(*score);
    decl.variant_score_span = score->span;
  }
  decl.span = span_from(keyword.span.offset);
  return true;
}

// type = "int" | "bool" | "float" | name
// Any name parses as a type so that the checker can say which types are supported.
bool Parser::type(Decl& decl) {
  const Token& token = peek();
  std::string_view word = text_of(token);
  bool builtin_type =
      token.kind == TokenKind::Keyword && (word == "int" || word == "bool" || word == "float");
  if (!builtin_type && token.kind != TokenKind::Ident) {
    syntax_error(token, "expected a type, found " + describe(token));
    return false;
  }
  decl.type_span = token.span;
  decl.declared_type = !builtin_type    ? Type::Error
                       : word == "int"  ? Type::Int
                       : word == "bool" ? Type::Bool
                                        : Type::Float;
  advance();
  return true;
}

// dims = "[" name ("," name)* "]"
// Any number of dimensions but 0 parses, so that the checker can say how many are supported.
bool Parser::dims(Decl& decl) {
  Token open = advance();
  ++paren_depth_;
  if (at("]")) {
    Token close = peek();
    syntax_error({TokenKind::Punct, cover(open.span, close.span)},
                 "an array has 1 or 2 dimensions, found 0");
    return false;
  }
  do {
    const Token& token = peek();
    if (token.kind != TokenKind::Ident) {
      syntax_error(token, "expected a dimension name, found " + describe(token));
      return false;
    }
    decl.dims.push_back({std::string(text_of(token)), token.span});
    advance();
  } while (consume(","));
  if (!expect("]")) return false;
  --paren_depth_;
  return true;
}

// The expression after "=", which may start on the next line.
bool Parser::body(Decl& decl) {
  skip_newlines();
  decl.value = expr();
  return decl.value != nullptr;
}

// expr = conditional
ExprPtr Parser::expr() {
  return conditional();
}

// conditional = or_expr ("?" conditional ":" conditional)?
// Right-associative: `a ? b : c ? d : e` is `a ? b : (c ? d : e)`. A newline right after
// `?` or `:` continues the expression.
ExprPtr Parser::conditional() {
  ExprPtr condition = or_expr();
  if (!condition || !at("?")) return condition;
  Token question = advance();
  skip_newlines();
  if (!enter_level(question)) return nullptr;
  ExprPtr then_value = conditional();
  if (!then_value || !expect(":")) return nullptr;
  skip_newlines();
  ExprPtr else_value = conditional();
  if (!else_value) return nullptr;
  --levels_;
  ExprPtr node = make_expr(Expr::Kind::Conditional, cover(condition->span, else_value->span));
  int depth = 1 + std::max({take_depth(condition.get()), take_depth(then_value.get()),
                            take_depth(else_value.get())});
  node->args.push_back(std::move(condition));
  node->args.push_back(std::move(then_value));
  node->args.push_back(std::move(else_value));
  return with_depth(std::move(node), depth, question);
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

// relational = bit_or (("<" | "<=" | ">" | ">=") bit_or)*
ExprPtr Parser::relational() {
  return binary_chain(&Parser::bit_or, {BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge});
}

// bit_or = bit_xor ("|" bit_xor)*
// The bitwise operators bind as in Python: tighter than comparisons, looser than arithmetic.
ExprPtr Parser::bit_or() {
  return binary_chain(&Parser::bit_xor, {BinaryOp::BitOr});
}

// bit_xor = bit_and ("^" bit_and)*
ExprPtr Parser::bit_xor() {
  return binary_chain(&Parser::bit_and, {BinaryOp::BitXor});
}

// bit_and = shift ("&" shift)*
ExprPtr Parser::bit_and() {
  return binary_chain(&Parser::shift, {BinaryOp::BitAnd});
}

// shift = additive (("<<" | ">>") additive)*
ExprPtr Parser::shift() {
  return binary_chain(&Parser::additive, {BinaryOp::Shl, BinaryOp::Shr});
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

// unary = ("-" | "!" | "~") unary | primary
ExprPtr Parser::unary() {
  if (!at("-") && !at("!") && !at("~")) return primary();
  Token op_token = advance();
  skip_newlines();
  if (!enter_level(op_token)) return nullptr;
  ExprPtr operand = unary();
  if (!operand) return nullptr;
  --levels_;
  ExprPtr node = make_expr(Expr::Kind::Unary, cover(op_token.span, operand->span));
  const std::string_view op = text_of(op_token);
  node->unary_op = op == "-" ? UnaryOp::Neg : op == "!" ? UnaryOp::Not : UnaryOp::BitNot;
  int depth = 1 + take_depth(operand.get());
  node->args.push_back(std::move(operand));
  return with_depth(std::move(node), depth, op_token);
}

// primary = parenthesized | reduce | call | index | name | int_lit | float_lit
//         | "true" | "false"
// `score` is a keyword (it starts a declaration) but reads as a name in an expression.
ExprPtr Parser::primary() {
  Token token = peek();
  if (at("(")) return parenthesized();
  if (at("any") || at("all")) return reduce();
  if (token.kind == TokenKind::IntLit) {
    advance();
    ExprPtr literal = make_expr(Expr::Kind::IntLit, token.span);
    literal->int_value = literal_value(text_of(token));
    return with_depth(std::move(literal), 0, token);
  }
  if (token.kind == TokenKind::FloatLit) {
    advance();
    ExprPtr literal = make_expr(Expr::Kind::FloatLit, token.span);
    literal->float_value = float_literal_value(text_of(token));
    return with_depth(std::move(literal), 0, token);
  }
  if (at("int") || at("float")) {
    advance();
    if (!at("(")) {
      syntax_error(peek(), fmt::format("expected '(' after '{}', found {}", text_of(token),
                                       describe(peek())));
      return nullptr;
    }
    return call(token);
  }
  if (at("true") || at("false")) {
    advance();
    ExprPtr literal = make_expr(Expr::Kind::BoolLit, token.span);
    literal->int_value = text_of(token) == "true" ? 1 : 0;
    return with_depth(std::move(literal), 0, token);
  }
  // A line that starts with `score NAME` is a score declaration, whatever precedes it: a
  // body left unfinished after an operator stops there rather than swallow the line.
  bool score_declaration =
      at("score") && starts_declaration_line(pos_) && tokens_[pos_ + 1].kind == TokenKind::Ident;
  if (token.kind == TokenKind::Ident || (at("score") && !score_declaration)) {
    advance();
    if (at("(")) return call(token);
    if (at("[")) return index(token);
    ExprPtr name = make_expr(Expr::Kind::Name, token.span);
    name->name = text_of(token);
    name->name_span = token.span;
    return with_depth(std::move(name), 0, token);
  }
  syntax_error(token, "expected an expression, found " + describe(token));
  return nullptr;
}

// parenthesized = "(" conditional ")"
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

// call = (name | "int" | "float") "(" (conditional ("," conditional)*)? ")"
// Any number of arguments parses, so that the checker can report a wrong count.
ExprPtr Parser::call(const Token& name) {
  ExprPtr node = make_expr(Expr::Kind::Call, name.span);
  node->name = text_of(name);
  node->name_span = name.span;
  return argument_list(std::move(node), name, ")");
}

// index = name "[" (conditional ("," conditional)*)? "]"
// Any number of indices parses, so that the checker can report a wrong count.
ExprPtr Parser::index(const Token& name) {
  ExprPtr node = make_expr(Expr::Kind::Index, name.span);
  node->name = text_of(name);
  node->name_span = name.span;
  return argument_list(std::move(node), name, "]");
}

// The bracketed, comma-separated arguments of a call or an index, up to `close`; `node`
// starts at `first`.
ExprPtr Parser::argument_list(ExprPtr node, const Token& first, std::string_view close) {
  Token open = advance();
  if (!enter_level(open)) return nullptr;
  ++paren_depth_;
  int depth = 0;
  if (!at(close)) {
    do {
      ExprPtr arg = expr();
      if (!arg) return nullptr;
      depth = std::max(depth, take_depth(arg.get()));
      node->args.push_back(std::move(arg));
    } while (consume(","));
  }
  if (!expect(close)) return nullptr;
  --paren_depth_;
  --levels_;
  node->span = span_from(first.span.offset);
  return with_depth(std::move(node), depth + 1, open);
}

// reduce = ("any" | "all") "(" name "<" conditional ":" conditional ")"
ExprPtr Parser::reduce() {
  Token keyword = advance();
  ExprPtr node = make_expr(Expr::Kind::Reduce, keyword.span);
  node->reduce_all = text_of(keyword) == "all";
  if (!at("(")) {
    syntax_error(peek(), fmt::format("expected '(' after '{}', found {}", text_of(keyword),
                                     describe(peek())));
    return nullptr;
  }
  Token open = advance();
  if (!enter_level(open)) return nullptr;
  ++paren_depth_;
  const Token& variable = peek();
  if (variable.kind != TokenKind::Ident) {
    syntax_error(variable, fmt::format("expected the name of the variable of '{}', found {}",
                                       text_of(keyword), describe(variable)));
    return nullptr;
  }
  node->name = text_of(variable);
  node->name_span = variable.span;
  advance();
  if (!expect("<")) return nullptr;
  ExprPtr count = expr();
  if (!count || !expect(":")) return nullptr;
  ExprPtr predicate = expr();
  if (!predicate || !expect(")")) return nullptr;
  --paren_depth_;
  --levels_;
  node->span = span_from(keyword.span.offset);
  int depth = 1 + std::max(take_depth(count.get()), take_depth(predicate.get()));
  node->args.push_back(std::move(count));
  node->args.push_back(std::move(predicate));
  return with_depth(std::move(node), depth, open);
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
