// Golden diagnostics: for each error class a small source and the exact text the CLI would
// print. Columns were counted by hand from the sources.
#include <string>

#include <catch2/catch.hpp>

#include "flexjit/dsl/frontend.h"

using namespace flexjit::dsl;

namespace {

std::string diagnose(std::string text) {
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(Source{"t.mask", std::move(text)}, diagnostics);
  return format_diagnostics(module.source, diagnostics);
}

}  // namespace

TEST_CASE("unknown name, and an unused parameter", "[dsl][checker]") {
  CHECK(diagnose("param window: int\n"
                 "mask sliding = q - kv < windw\n") ==
        "t.mask:1:7: warning: unused parameter 'window'\n"
        "param window: int\n"
        "      ^~~~~~\n"
        "t.mask:2:25: error: unknown name 'windw'\n"
        "mask sliding = q - kv < windw\n"
        "                        ^~~~~\n");
}

TEST_CASE("a parameter used only by an unused mask is used", "[dsl][checker]") {
  CHECK(diagnose("param w: int\n"
                 "mask unused = q - kv < w\n"
                 "mask m = q >= kv\n") == "");
}

TEST_CASE("type mismatches", "[dsl][checker]") {
  CHECK(diagnose("mask m = q && kv") ==
        "t.mask:1:10: error: operator '&&' expects 'bool', found 'int'\n"
        "mask m = q && kv\n"
        "         ^\n"
        "t.mask:1:15: error: operator '&&' expects 'bool', found 'int'\n"
        "mask m = q && kv\n"
        "              ^~\n");
  CHECK(diagnose("mask m = q + 1") ==
        "t.mask:1:10: error: expected 'bool', found 'int'\n"
        "mask m = q + 1\n"
        "         ^~~~~\n");
  CHECK(diagnose("mask m = !q") ==
        "t.mask:1:11: error: operator '!' expects 'bool', found 'int'\n"
        "mask m = !q\n"
        "          ^\n");
  CHECK(diagnose("mask m = -(q < kv)") ==
        "t.mask:1:11: error: operator '-' expects 'int', found 'bool'\n"
        "mask m = -(q < kv)\n"
        "          ^~~~~~~~\n");
  CHECK(diagnose("mask m = (q < kv) == 1") ==
        "t.mask:1:10: error: operator '==' cannot compare 'bool' with 'int'\n"
        "mask m = (q < kv) == 1\n"
        "         ^~~~~~~~~~~~~\n");
  CHECK(diagnose("mask m = (q < kv) == (q > 0) && true != false") == "");
}

TEST_CASE("an expression of type Error raises no further errors", "[dsl][checker]") {
  // Only the unknown name is reported: not `+` on it, not `&&` on the sum, not the body.
  CHECK(diagnose("mask m = (nope + 1) && q + nope2 * 2") ==
        "t.mask:1:11: error: unknown name 'nope'\n"
        "mask m = (nope + 1) && q + nope2 * 2\n"
        "          ^~~~\n"
        "t.mask:1:28: error: unknown name 'nope2'\n"
        "mask m = (nope + 1) && q + nope2 * 2\n"
        "                           ^~~~~\n");
  // A mismatched operand makes its operator an Error too: one report, not a cascade.
  CHECK(diagnose("mask m = (q && true) + 1 < 2") ==
        "t.mask:1:11: error: operator '&&' expects 'bool', found 'int'\n"
        "mask m = (q && true) + 1 < 2\n"
        "          ^\n");
}

TEST_CASE("calls: arity, argument types, unknown functions", "[dsl][checker]") {
  CHECK(diagnose("mask m = min(q) > 0") ==
        "t.mask:1:10: error: 'min' expects 2 arguments, found 1\n"
        "mask m = min(q) > 0\n"
        "         ^~~~~~\n");
  CHECK(diagnose("mask m = abs(q, kv) > 0") ==
        "t.mask:1:10: error: 'abs' expects 1 argument, found 2\n"
        "mask m = abs(q, kv) > 0\n"
        "         ^~~~~~~~~~\n");
  CHECK(diagnose("mask m = abs(q < kv) > 0") ==
        "t.mask:1:14: error: 'abs' expects 'int' arguments, found 'bool'\n"
        "mask m = abs(q < kv) > 0\n"
        "             ^~~~~~\n");
  CHECK(diagnose("mask m = foo(q) > 0") ==
        "t.mask:1:10: error: unknown function 'foo'\n"
        "mask m = foo(q) > 0\n"
        "         ^~~\n");
  CHECK(diagnose("mask m = max(q, kv, windw) > 0") ==
        "t.mask:1:10: error: 'max' expects 2 arguments, found 3\n"
        "mask m = max(q, kv, windw) > 0\n"
        "         ^~~~~~~~~~~~~~~~~\n"
        "t.mask:1:21: error: unknown name 'windw'\n"
        "mask m = max(q, kv, windw) > 0\n"
        "                    ^~~~~\n");
}

TEST_CASE("a name of the wrong kind", "[dsl][checker]") {
  // Calling a parameter is the mistake; the parameter is not also reported unused.
  CHECK(diagnose("param w: int\n"
                 "mask m = w(q) > 0\n") ==
        "t.mask:2:10: error: 'w' is not a function\n"
        "mask m = w(q) > 0\n"
        "         ^\n");
  CHECK(diagnose("mask c = q >= kv\nmask m = c(q) || kv(1) > 0\n") ==
        "t.mask:2:10: error: 'c' is not a function\n"
        "mask m = c(q) || kv(1) > 0\n"
        "         ^\n"
        "t.mask:2:18: error: 'kv' is not a function\n"
        "mask m = c(q) || kv(1) > 0\n"
        "                 ^~\n");
  CHECK(diagnose("mask m = abs < 3") ==
        "t.mask:1:10: error: 'abs' is a function; call it as 'abs(...)'\n"
        "mask m = abs < 3\n"
        "         ^~~\n");
}

TEST_CASE("duplicate declarations and builtin names", "[dsl][checker]") {
  CHECK(diagnose("param w: int\n"
                 "param w: int\n"
                 "mask w = q < w\n") ==
        "t.mask:2:7: error: duplicate declaration of 'w' (first declared on line 1)\n"
        "param w: int\n"
        "      ^\n"
        "t.mask:3:6: error: duplicate declaration of 'w' (first declared on line 1)\n"
        "mask w = q < w\n"
        "     ^\n");
  CHECK(diagnose("mask q = true\nmask min = true\n") ==
        "t.mask:1:6: error: 'q' is a builtin name and cannot be declared\n"
        "mask q = true\n"
        "     ^\n"
        "t.mask:2:6: error: 'min' is a builtin function and cannot be declared\n"
        "mask min = true\n"
        "     ^~~\n");
}

TEST_CASE("cycles among masks are reported once with their path", "[dsl][checker]") {
  CHECK(diagnose("mask a = b2\n"
                 "mask b2 = a\n") ==
        "t.mask:1:6: error: cycle among masks: 'a' -> 'b2' -> 'a'\n"
        "mask a = b2\n"
        "     ^\n");
  CHECK(diagnose("mask a = a || a") ==
        "t.mask:1:6: error: cycle among masks: 'a' -> 'a'\n"
        "mask a = a || a\n"
        "     ^\n");
  // Entered from outside the cycle: the path starts where the cycle does.
  CHECK(diagnose("mask x = a\n"
                 "mask a = c && q >= kv\n"
                 "mask c = d\n"
                 "mask d = a || x\n") ==
        "t.mask:1:6: error: cycle among masks: 'x' -> 'a' -> 'c' -> 'd' -> 'x'\n"
        "mask x = a\n"
        "     ^\n"
        "t.mask:2:6: error: cycle among masks: 'a' -> 'c' -> 'd' -> 'a'\n"
        "mask a = c && q >= kv\n"
        "     ^\n");
  // Sharing is not a cycle.
  CHECK(diagnose("mask a = c && d\nmask c = d\nmask d = q >= kv\n") == "");
}

TEST_CASE("a long chain of masks is checked without deep recursion", "[dsl][checker]") {
  std::string text;
  constexpr int kMasks = 20000;
  for (int i = 0; i < kMasks; ++i)
    text += "mask m" + std::to_string(i) + " = m" + std::to_string(i + 1) + "\n";
  text += "mask m" + std::to_string(kMasks) + " = m0\n";
  std::vector<Diagnostic> diagnostics;
  parse_and_check(Source{"t", text}, diagnostics);
  REQUIRE(diagnostics.size() == 1);
  CHECK(diagnostics[0].message.starts_with("cycle among masks: 'm0' -> 'm1' -> 'm2' -> "));
  CHECK(diagnostics[0].message.ends_with(" -> 'm20000' -> 'm0'"));
}

TEST_CASE("integer literals must fit int32", "[dsl][checker]") {
  CHECK(diagnose("mask m = q < 2147483648") ==
        "t.mask:1:14: error: integer literal '2147483648' is out of range (the largest int is "
        "2147483647)\n"
        "mask m = q < 2147483648\n"
        "             ^~~~~~~~~~\n");
  CHECK(diagnose("mask m = q < -2147483649") ==
        "t.mask:1:15: error: integer literal '2147483649' is out of range (the largest int is "
        "2147483647)\n"
        "mask m = q < -2147483649\n"
        "              ^~~~~~~~~~\n");
  // INT_MIN is unary minus on 2147483648, accepted only there.
  CHECK(diagnose("mask m = q > -2147483648 && kv < 2147483647 && q > -(2147483648)") == "");
  CHECK(diagnose("const lo: int = -2147483648\nmask m = q > lo") == "");
  // Binary minus is not a negated literal.
  CHECK(diagnose("mask m = q > 0 - 2147483648").find("out of range") != std::string::npos);
}

TEST_CASE("division or modulo by a constant zero", "[dsl][checker]") {
  CHECK(diagnose("const z: int = 0\n"
                 "mask m = q / z == 0 && kv % 0 == 0\n") ==
        "t.mask:2:14: error: constant division by zero\n"
        "mask m = q / z == 0 && kv % 0 == 0\n"
        "             ^\n"
        "t.mask:2:29: error: constant modulo by zero\n"
        "mask m = q / z == 0 && kv % 0 == 0\n"
        "                            ^\n");
  CHECK(diagnose("mask m = q / -0 == (0)").find("constant division by zero") != std::string::npos);
  CHECK(diagnose("const one: int = 1\nparam zero: int\nmask m = q / one % (kv - kv) == zero") ==
        "");
}

TEST_CASE("param and const declarations", "[dsl][checker]") {
  CHECK(diagnose("param f: float\n"
                 "mask m = q < f\n") ==
        "t.mask:1:10: error: unsupported type 'float' (expected 'int' or 'bool')\n"
        "param f: float\n"
        "         ^~~~~\n");
  CHECK(diagnose("const c: int = 1 + 2\n"
                 "mask m = q < c\n") ==
        "t.mask:1:16: error: the value of const 'c' must be a literal\n"
        "const c: int = 1 + 2\n"
        "               ^~~~~\n");
  CHECK(diagnose("const c: int = true\n"
                 "const d: bool = -1\n"
                 "mask m = q < c && d\n") ==
        "t.mask:1:16: error: expected 'int', found 'bool'\n"
        "const c: int = true\n"
        "               ^~~~\n"
        "t.mask:2:17: error: expected 'bool', found 'int'\n"
        "const d: bool = -1\n"
        "                ^~\n");
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(Source{"t", "const c: int = -5\nmask m = q < c\n"}, diagnostics);
  REQUIRE(diagnostics.empty());
  const Expr& c = *module.decls[1].value->args[1];
  CHECK(c.ref_kind == RefKind::Const);
  CHECK(c.ref_index == 0);
  CHECK(c.type == Type::Int);
}

TEST_CASE("syntax errors", "[dsl][checker]") {
  // Recovery skips to the next line that starts a declaration: `y = 2` is skipped as part of
  // the broken `mask m q`; the parameters that failed raise no "unused parameter" warnings.
  CHECK(diagnose("x = 1\nparam : int\nparam w int\nparam x:\nmask m q\ny = 2\n") ==
        "t.mask:1:1: error: expected a declaration ('param', 'const' or 'mask'), found 'x'\n"
        "x = 1\n"
        "^\n"
        "t.mask:2:7: error: expected a name, found ':'\n"
        "param : int\n"
        "      ^\n"
        "t.mask:3:9: error: expected ':', found 'int'\n"
        "param w int\n"
        "        ^~~\n"
        "t.mask:4:9: error: expected a type, found end of line\n"
        "param x:\n"
        "        ^\n"
        "t.mask:5:8: error: expected '=', found 'q'\n"
        "mask m q\n"
        "       ^\n");
  CHECK(diagnose("mask m = (q >= kv\nmask n = q +\n") ==
        "t.mask:2:1: error: expected ')', found 'mask'\n"
        "mask n = q +\n"
        "^~~~\n"
        "t.mask:2:13: error: expected an expression, found end of file\n"
        "mask n = q +\n"
        "            ^\n");
}

TEST_CASE("a byte the lexer rejects costs one error, not a cascade", "[dsl][checker]") {
  CHECK(diagnose("param w: int\nmask m = q & kv\nmask n = q @\nmask k = n && m && q - kv < w\n") ==
        "t.mask:2:12: error: unexpected character '&' (did you mean '&&'?)\n"
        "mask m = q & kv\n"
        "           ^\n"
        "t.mask:3:12: error: unexpected character '@'\n"
        "mask n = q @\n"
        "           ^\n");
}

TEST_CASE("one run reports every error", "[dsl][checker]") {
  CHECK(diagnose("param window: int\n"
                 "param unused: int\n"
                 "mask a = b2 && q - kv < window\n"
                 "mask b2 = a\n"
                 "mask broken = (q >= \n"
                 "mask m = q && windw\n"
                 "mask a = q / 0 > 0\n"
                 "const big: int = 4294967296\n") ==
        "t.mask:2:7: warning: unused parameter 'unused'\n"
        "param unused: int\n"
        "      ^~~~~~\n"
        "t.mask:3:6: error: cycle among masks: 'a' -> 'b2' -> 'a'\n"
        "mask a = b2 && q - kv < window\n"
        "     ^\n"
        "t.mask:6:1: error: expected an expression, found 'mask'\n"
        "mask m = q && windw\n"
        "^~~~\n"
        "t.mask:6:10: error: operator '&&' expects 'bool', found 'int'\n"
        "mask m = q && windw\n"
        "         ^\n"
        "t.mask:6:15: error: unknown name 'windw'\n"
        "mask m = q && windw\n"
        "              ^~~~~\n"
        "t.mask:7:6: error: duplicate declaration of 'a' (first declared on line 3)\n"
        "mask a = q / 0 > 0\n"
        "     ^\n"
        "t.mask:7:14: error: constant division by zero\n"
        "mask a = q / 0 > 0\n"
        "             ^\n"
        "t.mask:8:18: error: integer literal '4294967296' is out of range (the largest int is "
        "2147483647)\n"
        "const big: int = 4294967296\n"
        "                 ^~~~~~~~~~\n");
}
