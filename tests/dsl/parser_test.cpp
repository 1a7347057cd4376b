#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "flexjit/dsl/frontend.h"

using namespace flexjit::dsl;

namespace {

// The tree as an S-expression: "(+ 1 (* 2 3))". Names print as written, int literals as
// their value, float literals as their value and "f" ("1.5f"), `c ? a : b` as "(? c a b)",
// `t[i, j]` as "([] t i j)", `any(i < n: p)` as "(any i n p)".
std::string sexpr(const Expr& expr) {
  auto list = [&](std::string head) {
    std::string out = "(" + head;
    for (const ExprPtr& arg : expr.args)
      out += " " + sexpr(*arg);
    return out + ")";
  };
  switch (expr.kind) {
    case Expr::Kind::IntLit:
      return std::to_string(expr.int_value);
    case Expr::Kind::FloatLit:
      return fmt::format("{}f", expr.float_value);
    case Expr::Kind::Conditional:
      return list("?");
    case Expr::Kind::Index:
      return list("[] " + expr.name);
    case Expr::Kind::Reduce:
      return list((expr.reduce_all ? "all " : "any ") + expr.name);
    case Expr::Kind::BoolLit:
      return expr.int_value ? "true" : "false";
    case Expr::Kind::Name:
      return expr.name;
    case Expr::Kind::Unary:
      return std::string("(") + op_spelling(expr.unary_op) + " " + sexpr(*expr.args[0]) + ")";
    case Expr::Kind::Binary:
      return std::string("(") + op_spelling(expr.binary_op) + " " + sexpr(*expr.args[0]) + " " +
             sexpr(*expr.args[1]) + ")";
    case Expr::Kind::Call:
      return list(expr.name);
  }
  return "?";
}

// The body of the only mask of `mask m = <body>`, which must parse without errors.
std::string parse_body(const std::string& body) {
  std::vector<Diagnostic> diagnostics;
  Module module = parse(Source{"t.mask", "mask m = " + body + "\n"}, diagnostics);
  INFO(format_diagnostics(module.source, diagnostics));
  REQUIRE(diagnostics.empty());
  REQUIRE(module.decls.size() == 1);
  REQUIRE(module.decls[0].value);
  return sexpr(*module.decls[0].value);
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::string_view text_of(const Module& module, Span span) {
  return std::string_view(module.source.text).substr(span.offset, span.length);
}

}  // namespace

TEST_CASE("standard.mask parses and checks without diagnostics", "[dsl][parser]") {
  std::string path = FLEXJIT_SOURCE_DIR "/dsl/lib/standard.mask";
  std::string text = read_file(path);
  REQUIRE(!text.empty());
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(Source{path, text}, diagnostics);
  INFO(format_diagnostics(module.source, diagnostics));
  REQUIRE(diagnostics.empty());

  int window = module.find("window");
  int causal = module.find("causal");
  int sliding = module.find("sliding");
  REQUIRE(window >= 0);
  REQUIRE(causal >= 0);
  REQUIRE(sliding >= 0);
  CHECK(module.find("nothing") == -1);
  CHECK(module.decls[window].kind == DeclKind::Param);
  CHECK(module.decls[window].declared_type == Type::Int);
  CHECK(sexpr(*module.decls[causal].value) == "(>= q kv)");

  // sliding = causal && q - kv < window, with every name resolved and every node typed.
  const Expr& body = *module.decls[sliding].value;
  REQUIRE(sexpr(body) == "(&& causal (< (- q kv) window))");
  CHECK(body.type == Type::Bool);
  const Expr& causal_ref = *body.args[0];
  CHECK(causal_ref.ref_kind == RefKind::Mask);
  CHECK(causal_ref.ref_index == causal);
  const Expr& less = *body.args[1];
  CHECK(less.type == Type::Bool);
  const Expr& difference = *less.args[0];
  CHECK(difference.type == Type::Int);
  CHECK(difference.args[0]->ref_kind == RefKind::Builtin);
  CHECK(difference.args[0]->ref_index == static_cast<int>(Builtin::Q));
  CHECK(difference.args[1]->ref_index == static_cast<int>(Builtin::KV));
  CHECK(less.args[1]->ref_kind == RefKind::Param);
  CHECK(less.args[1]->ref_index == window);
  CHECK(less.args[1]->type == Type::Int);
}

TEST_CASE("operators bind by precedence and associate to the left", "[dsl][parser]") {
  CHECK(parse_body("1 + 2 * 3") == "(+ 1 (* 2 3))");
  CHECK(parse_body("1 - 2 - 3") == "(- (- 1 2) 3)");
  CHECK(parse_body("1 - (2 - 3)") == "(- 1 (- 2 3))");
  CHECK(parse_body("8 / 4 % 3 * 2") == "(* (% (/ 8 4) 3) 2)");
  CHECK(parse_body("a || b && c") == "(|| a (&& b c))");
  CHECK(parse_body("a && b || c") == "(|| (&& a b) c)");
  CHECK(parse_body("a == b < c + d") == "(== a (< b (+ c d)))");
  CHECK(parse_body("a != b == c") == "(== (!= a b) c)");
  CHECK(parse_body("x <= y > z >= w") == "(>= (> (<= x y) z) w)");
  CHECK(parse_body("-q % 3") == "(% (- q) 3)");
  CHECK(parse_body("!a && !!b") == "(&& (! a) (! (! b)))");
  CHECK(parse_body("q - -kv") == "(- q (- kv))");
  CHECK(parse_body("max(min(q, kv), abs(q - kv)) > 0") == "(> (max (min q kv) (abs (- q kv))) 0)");
  CHECK(parse_body("f() || true || false") == "(|| (|| (f) true) false)");
}

TEST_CASE("bitwise operators bind as in Python", "[dsl][parser]") {
  // Below arithmetic, above comparisons; & above ^ above |; shifts above &.
  CHECK(parse_body("a | b ^ c & d << e + f") == "(| a (^ b (& c (<< d (+ e f)))))");
  CHECK(parse_body("a + b >> c - d") == "(>> (+ a b) (- c d))");
  CHECK(parse_body("a & b | c & d") == "(| (& a b) (& c d))");
  CHECK(parse_body("x & 1 == 1") == "(== (& x 1) 1)");
  CHECK(parse_body("a < b | c") == "(< a (| b c))");
  CHECK(parse_body("a && b & c || d | e") == "(|| (&& a (& b c)) (| d e))");
  CHECK(parse_body("a << b << c >> d") == "(>> (<< (<< a b) c) d)");
  CHECK(parse_body("~a & ~-b") == "(& (~ a) (~ (- b)))");
  CHECK(parse_body("-~!a") == "(- (~ (! a)))");
  CHECK(parse_body("(bits[q, kv / 32] >> (kv % 32)) & 1 == 1") ==
        "(== (& (>> ([] bits q (/ kv 32)) (% kv 32)) 1) 1)");
  // A newline continues after each of them.
  CHECK(parse_body("a &\n b |\n c ^\n d <<\n e >>\n ~\n f") ==
        "(| (& a b) (^ c (>> (<< d e) (~ f))))");
}

TEST_CASE("a newline continues after an operator or inside parentheses", "[dsl][parser]") {
  CHECK(parse_body("q >=\n   kv") == "(>= q kv)");
  CHECK(parse_body("\n\n  q >= kv") == "(>= q kv)");
  CHECK(parse_body("(q\n >= kv\n)") == "(>= q kv)");
  CHECK(parse_body("min(\nq,\n kv\n) > -\n1") == "(> (min q kv) (- 1))");
  CHECK(parse_body("q >= kv # comment\n") == "(>= q kv)");
  // A line that starts with an operator begins a new declaration, which it cannot.
  std::vector<Diagnostic> diagnostics;
  parse(Source{"t", "mask m = q\n  >= kv\n"}, diagnostics);
  REQUIRE(diagnostics.size() == 1);
  CHECK(diagnostics[0].message ==
        "expected a declaration ('param', 'const', 'mask', 'score' or 'variant'), found '>='");
}

TEST_CASE("declarations record names, types and spans", "[dsl][parser]") {
  std::vector<Diagnostic> diagnostics;
  Module module = parse(Source{"t",
                               "# header\n"
                               "param window: int\n"
                               "const on: bool = true\n"
                               "\n"
                               "mask m = (q\n"
                               "  - kv) < window\n"},
                        diagnostics);
  REQUIRE(diagnostics.empty());
  REQUIRE(module.decls.size() == 3);
  const Decl& param = module.decls[0];
  CHECK(param.kind == DeclKind::Param);
  CHECK(param.name == "window");
  CHECK(text_of(module, param.span) == "param window: int");
  CHECK(text_of(module, param.name_span) == "window");
  CHECK(text_of(module, param.type_span) == "int");
  CHECK(param.value == nullptr);
  const Decl& constant = module.decls[1];
  CHECK(constant.kind == DeclKind::Const);
  CHECK(constant.declared_type == Type::Bool);
  CHECK(constant.value->kind == Expr::Kind::BoolLit);
  CHECK(constant.value->int_value == 1);
  const Decl& mask = module.decls[2];
  CHECK(mask.kind == DeclKind::Mask);
  CHECK(mask.declared_type == Type::Bool);
  CHECK(text_of(module, mask.span) == "mask m = (q\n  - kv) < window");
  // Parentheses make no node but belong to the span of what they enclose.
  CHECK(text_of(module, mask.value->args[0]->span) == "(q\n  - kv)");
  CHECK(text_of(module, mask.value->args[1]->span) == "window");
}

TEST_CASE("literals keep the value as written", "[dsl][parser]") {
  CHECK(parse_body("2147483648") == "2147483648");
  CHECK(parse_body("-2147483648") == "(- 2147483648)");
  CHECK(parse_body("0007") == "7");
  // Past int64 the value saturates, which keeps it out of range for the checker.
  CHECK(parse_body("99999999999999999999999") == "9223372036854775807");
}

TEST_CASE("after a syntax error the parser resumes at the next declaration", "[dsl][parser]") {
  std::vector<Diagnostic> diagnostics;
  Module module = parse(Source{"t",
                               "mask a = (q >= kv\n"
                               "mask b = q >= kv\n"
                               "mask mask = q\n"
                               "mask c = q >= kv )\n"
                               "mask d = q > kv\n"},
                        diagnostics);
  REQUIRE(diagnostics.size() == 3);
  CHECK(diagnostics[0].message == "expected ')', found 'mask'");
  CHECK(diagnostics[1].message == "expected a name, found 'mask'");
  CHECK(diagnostics[2].message == "expected end of line after the declaration, found ')'");
  // Broken declarations keep their names (so uses resolve) but lose their bodies.
  REQUIRE(module.decls.size() == 4);
  CHECK(module.decls[0].name == "a");
  CHECK(module.decls[0].value == nullptr);
  CHECK(module.decls[1].name == "b");
  CHECK(sexpr(*module.decls[1].value) == "(>= q kv)");
  CHECK(module.decls[2].name == "c");
  CHECK(module.decls[2].value == nullptr);
  CHECK(module.decls[3].name == "d");
  CHECK(sexpr(*module.decls[3].value) == "(> q kv)");
}

TEST_CASE("?: binds loosest and associates to the right", "[dsl][parser]") {
  CHECK(parse_body("a || b ? c : d") == "(? (|| a b) c d)");
  CHECK(parse_body("a ? b : c ? d : e") == "(? a b (? c d e))");
  CHECK(parse_body("a ? b ? c : d : e") == "(? a (? b c d) e)");
  CHECK(parse_body("q > 0 ? q + 1 : kv * 2") == "(? (> q 0) (+ q 1) (* kv 2))");
  CHECK(parse_body("(a ? b : c) && d") == "(&& (? a b c) d)");
  CHECK(parse_body("f(a ? b : c, d)") == "(f (? a b c) d)");
  CHECK(parse_body("a ?\n  b :\n  c") == "(? a b c)");
  CHECK(parse_body("(a\n ? b\n : c)") == "(? a b c)");
}

TEST_CASE("index, conversion and reduce expressions", "[dsl][parser]") {
  CHECK(parse_body("doc[b, q] == doc[b, kv]") == "(== ([] doc b q) ([] doc b kv))");
  CHECK(parse_body("t[i + 1] < -t[0]") == "(< ([] t (+ i 1)) (- ([] t 0)))");
  CHECK(parse_body("t[]") == "([] t)");  // the checker reports the count
  CHECK(parse_body("t[a, b, c]") == "([] t a b c)");
  CHECK(parse_body("int(x) + float(y > 0)") == "(+ (int x) (float (> y 0)))");
  CHECK(parse_body("int(x, y)") == "(int x y)");
  CHECK(parse_body("score(1) + score[2] - score") == "(- (+ (score 1) ([] score 2)) score)");
  CHECK(parse_body("any(i < 4: i == q)") == "(any i 4 (== i q))");
  CHECK(parse_body("all(i < n * 2: any(j < i: t[i, j] > 0)) || c") ==
        "(|| (all i (* n 2) (any j i (> ([] t i j) 0))) c)");
  CHECK(parse_body("any(i < c ? 1 : 2: p)") == "(any i (? c 1 2) p)");
  CHECK(parse_body("any(i < 8:\n  t[b,\n    i] > 0)") == "(any i 8 (> ([] t b i) 0))");
}

TEST_CASE("float literals keep their value rounded to double", "[dsl][parser]") {
  auto value = [](const std::string& literal) {
    std::vector<Diagnostic> diagnostics;
    Module module = parse(Source{"t", "score s = " + literal}, diagnostics);
    REQUIRE(diagnostics.empty());
    REQUIRE(module.decls[0].value->kind == Expr::Kind::FloatLit);
    return module.decls[0].value->float_value;
  };
  CHECK(value("50.0") == 50.0);
  CHECK(value("1.5e-3") == 0.0015);
  CHECK(value("2e4") == 20000.0);
  CHECK(value("1.") == 1.0);
  CHECK(value("1.e2") == 100.0);
  CHECK(value("0.1") == 0.1);
  // Beyond double: overflow is infinity (the checker rejects it), underflow is 0.
  CHECK(std::isinf(value("1e400")));
  CHECK(std::isinf(value(std::string(400, '9') + ".0")));
  CHECK(std::isinf(value("1e99999999999999999999999")));
  CHECK(value("1e-400") == 0.0);
  CHECK(value("0." + std::string(400, '0') + "1") == 0.0);
  CHECK(value("0.000000000000000000000000000000000000001e-400") == 0.0);
  CHECK(value(std::string(400, '0') + "1.5") == 1.5);
}

TEST_CASE("score, variant and array declarations", "[dsl][parser]") {
  std::vector<Diagnostic> diagnostics;
  Module module = parse(Source{"t",
                               "param doc: int[b, kv]\n"
                               "param slopes: float[h]\n"
                               "const cap: float = 50.0\n"
                               "score softcap = cap * tanh(score / cap)\n"
                               "variant plain = causal\n"
                               "variant capped = causal with softcap\n"},
                        diagnostics);
  REQUIRE(diagnostics.empty());
  REQUIRE(module.decls.size() == 6);
  const Decl& doc = module.decls[0];
  CHECK(doc.declared_type == Type::Int);
  CHECK(text_of(module, doc.type_span) == "int");
  REQUIRE(doc.dims.size() == 2);
  CHECK(doc.dims[0].name == "b");
  CHECK(doc.dims[1].name == "kv");
  CHECK(text_of(module, doc.dims[1].span) == "kv");
  CHECK(text_of(module, doc.span) == "param doc: int[b, kv]");
  CHECK(module.decls[1].declared_type == Type::Float);
  CHECK(module.decls[1].is_array());
  CHECK(module.decls[2].declared_type == Type::Float);
  CHECK(sexpr(*module.decls[2].value) == "50f");
  const Decl& score = module.decls[3];
  CHECK(score.kind == DeclKind::Score);
  CHECK(score.declared_type == Type::Float);
  CHECK(sexpr(*score.value) == "(* cap (tanh (/ score cap)))");
  const Expr& tanh = *score.value->args[1];
  CHECK(text_of(module, tanh.name_span) == "tanh");
  CHECK(text_of(module, tanh.span) == "tanh(score / cap)");
  const Decl& plain = module.decls[4];
  CHECK(plain.kind == DeclKind::Variant);
  CHECK(plain.variant_mask == "causal");
  CHECK(plain.variant_score.empty());
  CHECK(plain.value == nullptr);
  const Decl& capped = module.decls[5];
  CHECK(capped.variant_mask == "causal");
  CHECK(text_of(module, capped.variant_mask_span) == "causal");
  CHECK(capped.variant_score == "softcap");
  CHECK(text_of(module, capped.variant_score_span) == "softcap");
  CHECK(text_of(module, capped.span) == "variant capped = causal with softcap");
}

TEST_CASE("spans of the new expressions", "[dsl][parser]") {
  std::vector<Diagnostic> diagnostics;
  Module module =
      parse(Source{"t", "mask m = any(i < 4: t[b, i] > 0) ? q > 0 : false\n"}, diagnostics);
  REQUIRE(diagnostics.empty());
  const Expr& conditional = *module.decls[0].value;
  CHECK(text_of(module, conditional.span) == "any(i < 4: t[b, i] > 0) ? q > 0 : false");
  const Expr& any = *conditional.args[0];
  CHECK(text_of(module, any.span) == "any(i < 4: t[b, i] > 0)");
  CHECK(text_of(module, any.name_span) == "i");
  const Expr& index = *any.args[1]->args[0];
  CHECK(text_of(module, index.span) == "t[b, i]");
  CHECK(text_of(module, index.name_span) == "t");
}

TEST_CASE("recovery resumes at score and variant declarations too", "[dsl][parser]") {
  std::vector<Diagnostic> diagnostics;
  Module module = parse(Source{"t",
                               "score s = score +\n"
                               "variant v = m\n"
                               "param t: int[b\n"
                               "mask m = c ? q : \n"
                               "score r = score\n"
                               "param u: float[]\n"
                               "variant w = m with\n"
                               "mask last = true\n"},
                        diagnostics);
  REQUIRE(diagnostics.size() == 5);
  CHECK(diagnostics[0].message == "expected an expression, found 'variant'");
  CHECK(diagnostics[1].message == "expected ']', found 'mask'");
  CHECK(diagnostics[2].message == "expected an expression, found 'score'");
  CHECK(diagnostics[3].message == "an array has 1 or 2 dimensions, found 0");
  CHECK(diagnostics[4].message == "expected a name, found end of line");
  REQUIRE(module.decls.size() == 8);
  // Broken declarations keep their names; a broken score stays a float, a broken param or
  // variant names nothing.
  CHECK(module.decls[0].kind == DeclKind::Score);
  CHECK(module.decls[0].declared_type == Type::Float);
  CHECK(module.decls[0].value == nullptr);
  CHECK(module.decls[1].variant_mask == "m");
  CHECK(module.decls[2].declared_type == Type::Error);
  CHECK(module.decls[3].value == nullptr);
  CHECK(sexpr(*module.decls[4].value) == "score");
  CHECK(module.decls[5].declared_type == Type::Error);
  CHECK(module.decls[6].variant_mask.empty());
  CHECK(sexpr(*module.decls[7].value) == "true");
}
