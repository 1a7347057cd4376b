#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "flexjit/dsl/frontend.h"

using namespace flexjit::dsl;

namespace {

// The tree as an S-expression: "(+ 1 (* 2 3))". Literals and names print as written.
std::string sexpr(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::IntLit:
      return std::to_string(expr.int_value);
    case Expr::Kind::BoolLit:
      return expr.int_value ? "true" : "false";
    case Expr::Kind::Name:
      return expr.name;
    case Expr::Kind::Unary:
      return std::string("(") + op_spelling(expr.unary_op) + " " + sexpr(*expr.args[0]) + ")";
    case Expr::Kind::Binary:
      return std::string("(") + op_spelling(expr.binary_op) + " " + sexpr(*expr.args[0]) + " " +
             sexpr(*expr.args[1]) + ")";
    case Expr::Kind::Call: {
      std::string out = "(" + expr.name;
      for (const ExprPtr& arg : expr.args)
        out += " " + sexpr(*arg);
      return out + ")";
    }
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
        "expected a declaration ('param', 'const' or 'mask'), found '>='");
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
