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

// Errors only, formatted as diagnose() does, for sources that also leave parameters unused.
std::string diagnose_errors(std::string text) {
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(Source{"t.mask", std::move(text)}, diagnostics);
  std::erase_if(diagnostics, [](const Diagnostic& d) { return d.severity != Severity::Error; });
  return format_diagnostics(module.source, diagnostics);
}

// The messages only, one per line, for cases where the position is not the point.
std::string messages(std::string text) {
  std::vector<Diagnostic> diagnostics;
  parse_and_check(Source{"t.mask", std::move(text)}, diagnostics);
  std::string out;
  for (const Diagnostic& diagnostic : diagnostics)
    out += diagnostic.message + "\n";
  return out;
}

// A module that must check without diagnostics.
Module checked(std::string text) {
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(Source{"t.mask", std::move(text)}, diagnostics);
  INFO(format_diagnostics(module.source, diagnostics));
  REQUIRE(diagnostics.empty());
  return module;
}

const Expr& body(const Module& module, std::string_view name) {
  int index = module.find(name);
  REQUIRE(index >= 0);
  REQUIRE(module.decls[index].value);
  return *module.decls[index].value;
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

TEST_CASE("a parameter used by any body is used", "[dsl][checker]") {
  CHECK(diagnose("param w: int\n"
                 "mask unused = q - kv < w\n"
                 "mask m = q >= kv\n") == "");
  CHECK(diagnose("param slopes: float[h]\n"
                 "score alibi = score - slopes[h] * (q - kv)\n") == "");
  // A use that is itself an error counts: one report of the mistake is enough.
  CHECK(messages("param w: int\nconst c: int = w\n") ==
        "const 'c' must have a constant value, but 'w' is not constant\n");
}

TEST_CASE("no unused-parameter warning when a body was lost to a syntax error", "[dsl][checker]") {
  // The broken body may have been the parameter's use.
  CHECK(diagnose("param t: int[N]\n"
                 "mask m = (t[q > 0) == 1\n") ==
        "t.mask:2:18: error: expected ']', found ')'\n"
        "mask m = (t[q > 0) == 1\n"
        "                 ^\n");
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
        "t.mask:1:11: error: operator '-' expects a number, found 'bool'\n"
        "mask m = -(q < kv)\n"
        "          ^~~~~~~~\n");
  CHECK(diagnose("mask m = (q < kv) == 1") ==
        "t.mask:1:10: error: operator '==' cannot compare 'bool' with 'int'\n"
        "mask m = (q < kv) == 1\n"
        "         ^~~~~~~~~~~~~\n");
  CHECK(diagnose("mask m = 1.5 != (q < kv)") ==
        "t.mask:1:10: error: operator '!=' cannot compare 'float' with 'bool'\n"
        "mask m = 1.5 != (q < kv)\n"
        "         ^~~~~~~~~~~~~~~\n");
  CHECK(diagnose("mask m = true < 1.0") ==
        "t.mask:1:10: error: operator '<' expects a number, found 'bool'\n"
        "mask m = true < 1.0\n"
        "         ^~~~\n");
  CHECK(diagnose("mask m = (q < kv) == (q > 0) && true != false && q == 1.0") == "");
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
  // `score` in a mask is reported once, not again as a float body.
  CHECK(messages("mask m = score") == "a mask cannot use 'score'\n");
}

TEST_CASE("int promotes to float in arithmetic, comparisons and branches", "[dsl][checker]") {
  Module module = checked(
      "param f: float\n"
      "mask m = q < f && f * 2 >= kv / 2 && (q > 0 ? 1 : f) < 2 && min(q, f) == max(kv, 1.5)\n"
      "score s = score + q\n"
      "score i = q * 2\n"
      "const c: float = 1\n");
  const Expr& mask = body(module, "m");
  // ((((q < f) && ((f * 2) >= (kv / 2))) && (?: < 2)) && (min == max))
  const Expr& less = *mask.args[0]->args[0]->args[0];
  CHECK(less.type == Type::Bool);
  CHECK(less.args[0]->type == Type::Int);  // not converted in the AST: lowering does that
  CHECK(less.args[1]->type == Type::Float);
  const Expr& ge = *mask.args[0]->args[0]->args[1];
  CHECK(ge.args[0]->type == Type::Float);
  CHECK(ge.args[1]->type == Type::Int);
  const Expr& conditional = *mask.args[0]->args[1]->args[0];
  REQUIRE(conditional.kind == Expr::Kind::Conditional);
  CHECK(conditional.type == Type::Float);
  CHECK(conditional.args[1]->type == Type::Int);
  const Expr& min = *mask.args[1]->args[0];
  CHECK(min.type == Type::Float);
  CHECK(min.ref_kind == RefKind::Builtin);
  CHECK(min.ref_index == static_cast<int>(Function::Min));
  const Expr& score = body(module, "s");
  CHECK(score.type == Type::Float);
  CHECK(score.args[0]->ref_kind == RefKind::Builtin);
  CHECK(score.args[0]->ref_index == static_cast<int>(Builtin::Score));
  CHECK(score.args[0]->type == Type::Float);
  // An int score body and an int const value are accepted as they are; lowering promotes.
  CHECK(body(module, "i").type == Type::Int);
  CHECK(body(module, "c").type == Type::Int);
  CHECK(module.decls[module.find("c")].declared_type == Type::Float);
}

TEST_CASE("builtin function types", "[dsl][checker]") {
  Module module = checked(
      "score s = abs(q) + abs(score) + clamp(q, 0, 8) + clamp(q, 0.5, 8) + where(q > kv, 1, 2) +\n"
      "  where(q > kv, 1, 2.5) + tanh(1) + floor(score) + int(score) + int(true) +\n"
      "  float(q) + exp(1) + exp2(1) + log(2) + log2(2) + sqrt(4) + sigmoid(0) + ceil(1)\n"
      "mask m = where(q > 0, true, q < kv)\n");
  // Walk the left spine of the `+` chain, the last term first.
  std::vector<const Expr*> terms;
  const Expr* node = &body(module, "s");
  while (node->kind == Expr::Kind::Binary) {
    terms.insert(terms.begin(), node->args[1].get());
    node = node->args[0].get();
  }
  terms.insert(terms.begin(), node);
  std::vector<std::pair<Function, Type>> want = {
      {Function::Abs, Type::Int},       {Function::Abs, Type::Float},
      {Function::Clamp, Type::Int},     {Function::Clamp, Type::Float},
      {Function::Where, Type::Int},     {Function::Where, Type::Float},
      {Function::Tanh, Type::Float},    {Function::Floor, Type::Float},
      {Function::Int, Type::Int},       {Function::Int, Type::Int},
      {Function::Float, Type::Float},   {Function::Exp, Type::Float},
      {Function::Exp2, Type::Float},    {Function::Log, Type::Float},
      {Function::Log2, Type::Float},    {Function::Sqrt, Type::Float},
      {Function::Sigmoid, Type::Float}, {Function::Ceil, Type::Float},
  };
  REQUIRE(terms.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("term " << i << ": " << terms[i]->name);
    CHECK(terms[i]->kind == Expr::Kind::Call);
    CHECK(terms[i]->ref_kind == RefKind::Builtin);
    CHECK(terms[i]->ref_index == static_cast<int>(want[i].first));
    CHECK(terms[i]->type == want[i].second);
  }
  CHECK(body(module, "m").type == Type::Bool);
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
        "t.mask:1:14: error: 'abs' expects a number, found 'bool'\n"
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
  CHECK(diagnose("mask m = int(q, kv) == float()") ==
        "t.mask:1:10: error: 'int' expects 1 argument, found 2\n"
        "mask m = int(q, kv) == float()\n"
        "         ^~~~~~~~~~\n"
        "t.mask:1:24: error: 'float' expects 1 argument, found 0\n"
        "mask m = int(q, kv) == float()\n"
        "                       ^~~~~~~\n");
  CHECK(diagnose("mask m = where(q, 1, 2) > clamp(q, true, 3)") ==
        "t.mask:1:16: error: 'where' expects a 'bool' condition, found 'int'\n"
        "mask m = where(q, 1, 2) > clamp(q, true, 3)\n"
        "               ^\n"
        "t.mask:1:36: error: 'clamp' expects a number, found 'bool'\n"
        "mask m = where(q, 1, 2) > clamp(q, true, 3)\n"
        "                                   ^~~~\n");
  CHECK(diagnose("mask m = where(q > 0, 1, true)") ==
        "t.mask:1:10: error: the branches of 'where' have different types, 'int' and 'bool'\n"
        "mask m = where(q > 0, 1, true)\n"
        "         ^~~~~~~~~~~~~~~~~~~~~\n");
  CHECK(diagnose("score s = sqrt(score > 0)") ==
        "t.mask:1:16: error: 'sqrt' expects a number, found 'bool'\n"
        "score s = sqrt(score > 0)\n"
        "               ^~~~~~~~~\n");
}

TEST_CASE("conditionals", "[dsl][checker]") {
  CHECK(diagnose("mask m = (q ? 1 : 2) > 0") ==
        "t.mask:1:11: error: the condition of '?:' must be 'bool', found 'int'\n"
        "mask m = (q ? 1 : 2) > 0\n"
        "          ^\n");
  CHECK(diagnose("mask m = q > 0 ? 1 : true") ==
        "t.mask:1:10: error: the branches of '?:' have different types, 'int' and 'bool'\n"
        "mask m = q > 0 ? 1 : true\n"
        "         ^~~~~~~~~~~~~~~~\n");
  CHECK(diagnose("mask m = q > 0 ? kv > 0 : q < kv ? true : false") == "");
}

TEST_CASE("a name of the wrong kind", "[dsl][checker]") {
  // Calling a parameter is the mistake; the parameter is not also reported unused.
  CHECK(diagnose("param w: int\n"
                 "mask m = w(q) > 0\n") ==
        "t.mask:2:10: error: 'w' is a parameter, not a function\n"
        "mask m = w(q) > 0\n"
        "         ^\n");
  CHECK(diagnose("mask c = q >= kv\nmask m = c(q) || kv(1) > 0\n") ==
        "t.mask:2:10: error: 'c' is a mask, not a function\n"
        "mask m = c(q) || kv(1) > 0\n"
        "         ^\n"
        "t.mask:2:18: error: 'kv' is a builtin name, not a function\n"
        "mask m = c(q) || kv(1) > 0\n"
        "                 ^~\n");
  CHECK(diagnose("mask m = abs < 3") ==
        "t.mask:1:10: error: 'abs' is a function; call it as 'abs(...)'\n"
        "mask m = abs < 3\n"
        "         ^~~\n");
  CHECK(messages("mask m = score(1) > 0 || any(i < 2: i(0) > 0)") ==
        "'score' is a builtin name, not a function\n"
        "'i' is a variable, not a function\n");
  CHECK(messages("variant v = c\nmask c = v\n") ==
        "'v' is a variant and cannot be used in an expression\n");
}

TEST_CASE("arrays: indexing, dimensions, element types", "[dsl][checker]") {
  const char* params =
      "param prefix_len: int[b]\n"
      "param doc: int[b, kv]\n"
      "param slopes: float[h]\n"
      "param w: int\n";
  Module module = checked(std::string(params) +
                          "mask m = kv < prefix_len[b] && doc[b, q] == doc[b, kv] && q - kv < w\n"
                          "score s = score - slopes[h] * (q - kv)\n");
  const Expr& doc = *body(module, "m").args[0]->args[1]->args[0];
  REQUIRE(doc.kind == Expr::Kind::Index);
  CHECK(doc.ref_kind == RefKind::Param);
  CHECK(doc.ref_index == module.find("doc"));
  CHECK(doc.type == Type::Int);
  CHECK(doc.args.size() == 2);
  CHECK(module.decls[module.find("doc")].dims.size() == 2);
  CHECK(module.decls[module.find("slopes")].declared_type == Type::Float);
  CHECK(body(module, "s").args[1]->args[0]->type == Type::Float);

  CHECK(diagnose_errors(std::string(params) + "mask m = doc[b] == 0 && prefix_len[b, q, kv] > 0") ==
        "t.mask:5:10: error: 'doc' expects 2 indices, found 1\n"
        "mask m = doc[b] == 0 && prefix_len[b, q, kv] > 0\n"
        "         ^~~~~~\n"
        "t.mask:5:25: error: 'prefix_len' expects 1 index, found 3\n"
        "mask m = doc[b] == 0 && prefix_len[b, q, kv] > 0\n"
        "                        ^~~~~~~~~~~~~~~~~~~~\n");
  CHECK(
      diagnose_errors(std::string(params) + "mask m = kv < prefix_len[1.5] && doc[b, q > 0] > 0") ==
      "t.mask:5:26: error: an array index must be 'int', found 'float'\n"
      "mask m = kv < prefix_len[1.5] && doc[b, q > 0] > 0\n"
      "                         ^~~\n"
      "t.mask:5:41: error: an array index must be 'int', found 'bool'\n"
      "mask m = kv < prefix_len[1.5] && doc[b, q > 0] > 0\n"
      "                                        ^~~~~\n");
  CHECK(diagnose_errors(std::string(params) +
                        "mask m = kv < prefix_len && w[b] > 0 && doc(b, q) > 0") ==
        "t.mask:5:15: error: 'prefix_len' is an array; index it as 'prefix_len[...]'\n"
        "mask m = kv < prefix_len && w[b] > 0 && doc(b, q) > 0\n"
        "              ^~~~~~~~~~\n"
        "t.mask:5:29: error: 'w' is a parameter, not an array\n"
        "mask m = kv < prefix_len && w[b] > 0 && doc(b, q) > 0\n"
        "                            ^\n"
        "t.mask:5:41: error: 'doc' is an array; index it as 'doc[...]'\n"
        "mask m = kv < prefix_len && w[b] > 0 && doc(b, q) > 0\n"
        "                                        ^~~\n");
  CHECK(messages("mask c = true\nmask m = c[0] && q[1] > 0 && nope[2] > 0\n") ==
        "'c' is a mask, not an array\n"
        "'q' is a builtin name, not an array\n"
        "unknown name 'nope'\n");
  CHECK(diagnose("param flags: bool[b]\n"
                 "param cube: float[b, h, q]\n"
                 "param none: int[]\n"
                 "mask m = flags[b] && cube[b, h, q] > 0.0\n") ==
        "t.mask:1:14: error: arrays of 'bool' are not supported (use 'int')\n"
        "param flags: bool[b]\n"
        "             ^~~~\n"
        "t.mask:2:19: error: an array has 1 or 2 dimensions, found 3\n"
        "param cube: float[b, h, q]\n"
        "                  ^~~~~~~\n"
        "t.mask:3:16: error: an array has 1 or 2 dimensions, found 0\n"
        "param none: int[]\n"
        "               ^~\n");
}

TEST_CASE("scores: calls, bodies, and what masks may not do", "[dsl][checker]") {
  Module module = checked(
      "const cap: float = 50.0\n"
      "param slopes: float[h]\n"
      "mask causal = q >= kv\n"
      "score softcap = cap * tanh(score / cap)\n"
      "score alibi = score - slopes[h] * (q - kv)\n"
      "score both = softcap(alibi(score))\n"
      "score masked = where(causal, score, 0.0)\n");
  const Expr& both = body(module, "both");
  REQUIRE(both.kind == Expr::Kind::Call);
  CHECK(both.ref_kind == RefKind::Score);
  CHECK(both.ref_index == module.find("softcap"));
  CHECK(both.type == Type::Float);
  CHECK(both.args[0]->ref_kind == RefKind::Score);
  CHECK(both.args[0]->ref_index == module.find("alibi"));
  CHECK(body(module, "masked").args[0]->ref_kind == RefKind::Mask);

  CHECK(diagnose("score half = score / 2\n"
                 "score s = half + half(1, 2) + half(q > 0)\n") ==
        "t.mask:2:11: error: score 'half' must be called with one argument\n"
        "score s = half + half(1, 2) + half(q > 0)\n"
        "          ^~~~\n"
        "t.mask:2:18: error: score 'half' expects 1 argument, found 2\n"
        "score s = half + half(1, 2) + half(q > 0)\n"
        "                 ^~~~~~~~~~\n"
        "t.mask:2:36: error: score 'half' expects a number, found 'bool'\n"
        "score s = half + half(1, 2) + half(q > 0)\n"
        "                                   ^~~~~\n");
  CHECK(diagnose("score s = q > kv\n") ==
        "t.mask:1:11: error: expected a number, found 'bool'\n"
        "score s = q > kv\n"
        "          ^~~~~~\n");
  CHECK(diagnose("score half = score / 2\n"
                 "mask m = score > 0.0 || half(1) > 0.0\n") ==
        "t.mask:2:10: error: a mask cannot use 'score'\n"
        "mask m = score > 0.0 || half(1) > 0.0\n"
        "         ^~~~~\n"
        "t.mask:2:25: error: a mask cannot call score 'half'\n"
        "mask m = score > 0.0 || half(1) > 0.0\n"
        "                        ^~~~\n");
}

TEST_CASE("variants name a mask and at most one score", "[dsl][checker]") {
  Module module = checked(
      "mask causal = q >= kv\n"
      "score half = score / 2\n"
      "variant plain = causal\n"
      "variant halved = causal with half\n");
  const Decl& plain = module.decls[module.find("plain")];
  CHECK(plain.kind == DeclKind::Variant);
  CHECK(plain.variant_mask_index == module.find("causal"));
  CHECK(plain.variant_score_index == -1);
  const Decl& halved = module.decls[module.find("halved")];
  CHECK(halved.variant_mask_index == module.find("causal"));
  CHECK(halved.variant_score_index == module.find("half"));

  CHECK(diagnose("mask causal = q >= kv\n"
                 "score half = score / 2\n"
                 "param w: int\n"
                 "variant a = half with causal\n"
                 "variant b2 = caual with hafl\n"
                 "variant c = w with q\n") ==
        "t.mask:3:7: warning: unused parameter 'w'\n"
        "param w: int\n"
        "      ^\n"
        "t.mask:4:13: error: 'half' is a score, not a mask\n"
        "variant a = half with causal\n"
        "            ^~~~\n"
        "t.mask:4:23: error: 'causal' is a mask, not a score\n"
        "variant a = half with causal\n"
        "                      ^~~~~~\n"
        "t.mask:5:14: error: unknown mask 'caual'\n"
        "variant b2 = caual with hafl\n"
        "             ^~~~~\n"
        "t.mask:5:25: error: unknown score 'hafl'\n"
        "variant b2 = caual with hafl\n"
        "                        ^~~~\n"
        "t.mask:6:13: error: 'w' is a parameter, not a mask\n"
        "variant c = w with q\n"
        "            ^\n"
        "t.mask:6:20: error: 'q' is a builtin name, not a score\n"
        "variant c = w with q\n"
        "                   ^\n");
}

TEST_CASE("any and all: counts, predicates, variables", "[dsl][checker]") {
  Module module = checked(
      "const max_ranges: int = 8\n"
      "param ranges: int[b, r]\n"
      "mask causal = q >= kv\n"
      "mask prefix_ranges = causal || any(i < max_ranges:\n"
      "    ranges[b, 2 * i] <= min(q, kv) && max(q, kv) <= ranges[b, 2 * i + 1])\n"
      "mask nested = all(i < 2: any(j < 64: i + j == q)) && any(i < 0: true)\n");
  const Expr& any = *body(module, "prefix_ranges").args[1];
  REQUIRE(any.kind == Expr::Kind::Reduce);
  CHECK_FALSE(any.reduce_all);
  CHECK(any.type == Type::Bool);
  CHECK(any.name == "i");
  const Expr& i = *any.args[1]->args[0]->args[0]->args[1]->args[1];
  REQUIRE(i.kind == Expr::Kind::Name);
  CHECK(i.name == "i");
  CHECK(i.ref_kind == RefKind::Local);
  CHECK(i.binder == &any);
  CHECK(i.type == Type::Int);
  // Each name finds its own binder.
  const Expr& all = *body(module, "nested").args[0];
  CHECK(all.reduce_all);
  const Expr& inner = *all.args[1];
  const Expr& sum = *inner.args[1]->args[0];
  CHECK(sum.args[0]->binder == &all);
  CHECK(sum.args[1]->binder == &inner);

  CHECK(diagnose("param w: int\n"
                 "mask m = any(i < w: true) || all(j < 65: true) || any(k < 2.0: true)\n") ==
        "t.mask:2:18: error: the count of 'any' must be a constant\n"
        "mask m = any(i < w: true) || all(j < 65: true) || any(k < 2.0: true)\n"
        "                 ^\n"
        "t.mask:2:38: error: the count of 'all' must be between 0 and 64, found 65\n"
        "mask m = any(i < w: true) || all(j < 65: true) || any(k < 2.0: true)\n"
        "                                     ^~\n"
        "t.mask:2:59: error: the count of 'any' must be 'int', found 'float'\n"
        "mask m = any(i < w: true) || all(j < 65: true) || any(k < 2.0: true)\n"
        "                                                          ^~~\n");
  CHECK(messages("mask m = any(i < 0 - 1: true) || any(i < q: true)\n") ==
        "the count of 'any' must be between 0 and 64, found -1\n"
        "the count of 'any' must be a constant\n");
  // The variable is not visible in the count, nor outside the any.
  CHECK(messages("mask m = any(i < i: true) || i > 0\n") ==
        "unknown name 'i'\n"
        "unknown name 'i'\n");
  CHECK(diagnose("mask m = any(i < 4: kv + i)") ==
        "t.mask:1:21: error: the predicate of 'any' must be 'bool', found 'int'\n"
        "mask m = any(i < 4: kv + i)\n"
        "                    ^~~~~~\n");
  CHECK(diagnose("mask causal = q >= kv\n"
                 "mask m = any(kv < 4: true) && any(causal < 4: any(j < 2: any(j < 2: true)))\n") ==
        "t.mask:2:14: error: 'kv' is a builtin name and cannot be declared\n"
        "mask m = any(kv < 4: true) && any(causal < 4: any(j < 2: any(j < 2: true)))\n"
        "             ^~\n"
        "t.mask:2:35: error: duplicate declaration of 'causal' (first declared on line 1)\n"
        "mask m = any(kv < 4: true) && any(causal < 4: any(j < 2: any(j < 2: true)))\n"
        "                                  ^~~~~~\n"
        "t.mask:2:62: error: duplicate declaration of 'j' (first declared on line 2)\n"
        "mask m = any(kv < 4: true) && any(causal < 4: any(j < 2: any(j < 2: true)))\n"
        "                                                             ^\n");
  CHECK(messages("mask m = any(abs < 2: true)\n") ==
        "'abs' is a builtin function and cannot be declared\n");
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
  CHECK(diagnose("mask q = true\nmask min = true\nscore tanh = 1.0\n") ==
        "t.mask:1:6: error: 'q' is a builtin name and cannot be declared\n"
        "mask q = true\n"
        "     ^\n"
        "t.mask:2:6: error: 'min' is a builtin function and cannot be declared\n"
        "mask min = true\n"
        "     ^~~\n"
        "t.mask:3:7: error: 'tanh' is a builtin function and cannot be declared\n"
        "score tanh = 1.0\n"
        "      ^~~~\n");
  CHECK(messages("mask m = true\nvariant m = m\n") ==
        "duplicate declaration of 'm' (first declared on line 1)\n");
}

TEST_CASE("cycles among masks, scores and consts are reported once with their path",
          "[dsl][checker]") {
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
  CHECK(diagnose("score s = t(score) + 1\n"
                 "score t = s(score * 2)\n") ==
        "t.mask:1:7: error: cycle among scores: 's' -> 't' -> 's'\n"
        "score s = t(score) + 1\n"
        "      ^\n");
  // A cycle among consts hides their values: no further error for them.
  CHECK(diagnose("const a: int = c2 + 1\n"
                 "const c2: int = a * 2\n"
                 "mask m = q / a == q % c2\n") ==
        "t.mask:1:7: error: cycle among consts: 'a' -> 'c2' -> 'a'\n"
        "const a: int = c2 + 1\n"
        "      ^\n");
  // A score may use a mask that is not on a cycle with it; a mask may not call a score, so
  // no cycle runs through both.
  CHECK(messages("mask m = s(1.0) > 0.0\nscore s = where(m, score, 0.0)\n") ==
        "a mask cannot call score 's'\n");
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
  // A long path keeps its ends.
  CHECK(diagnostics[0].message ==
        "cycle among masks: 'm0' -> 'm1' -> 'm2' -> 'm3' -> 'm4' -> 'm5' -> 'm6' -> 'm7' -> "
        "... (19986 more) -> 'm19994' -> 'm19995' -> 'm19996' -> 'm19997' -> 'm19998' -> "
        "'m19999' -> 'm20000' -> 'm0'");
}

TEST_CASE("a long chain of consts is evaluated without deep recursion", "[dsl][checker]") {
  // Declared last to first, each doubling the next one's value: c0 is 2^20000, which wraps
  // to 0 (int32), and that is a constant zero divisor.
  std::string text = "mask m = q / c0 == 0\n";
  constexpr int kConsts = 20000;
  for (int i = 0; i < kConsts; ++i)
    text += "const c" + std::to_string(i) + ": int = c" + std::to_string(i + 1) + " * 2\n";
  text += "const c" + std::to_string(kConsts) + ": int = 1\n";
  CHECK(messages(text) == "constant division by zero\n");
}

TEST_CASE("literals must fit int32 and float32", "[dsl][checker]") {
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
  CHECK(diagnose("score s = score * 1e39 + 3.4028235e38 + 1e-50") ==
        "t.mask:1:19: error: float literal '1e39' is out of range (the largest float is "
        "3.4028235e+38)\n"
        "score s = score * 1e39 + 3.4028235e38 + 1e-50\n"
        "                  ^~~~\n");
  // Rounding to float32 decides: 3.40282356e38 rounds down to the largest float, 3.4028236e38
  // up to infinity.
  CHECK(messages("score s = 3.40282356e38 + 3.4028236e38") ==
        "float literal '3.4028236e38' is out of range (the largest float is 3.4028235e+38)\n");
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
  CHECK(diagnose("score s = score / 0.0 + score % (2 - 2)") ==
        "t.mask:1:19: error: constant division by zero\n"
        "score s = score / 0.0 + score % (2 - 2)\n"
        "                  ^~~\n"
        "t.mask:1:33: error: constant modulo by zero\n"
        "score s = score / 0.0 + score % (2 - 2)\n"
        "                                ^~~~~~~\n");
  CHECK(diagnose("mask m = q / -0 == (0)").find("constant division by zero") != std::string::npos);
  CHECK(diagnose("const one: int = 1\nparam zero: int\nmask m = q / one % (kv - kv) == zero") ==
        "");
  // In a const too; its value is then unknown, so its uses say nothing more.
  CHECK(messages("const c: int = 1 / 0\nmask m = q / c > 0\n") == "constant division by zero\n");
}

// Constant divisors fold with the language's semantics, so whether one is zero shows them.
TEST_CASE("constant evaluation follows the language's semantics", "[dsl][checker]") {
  struct Case {
    const char* divisor;
    bool zero;
  };
  const Case cases[] = {
      {"-7 / 2 + 4", true},  // floor division: -4
      {"-7 / 2 + 3", false},
      {"7 / -2 + 4", true},
      {"-7 % 2 - 1", true},                       // the result has the divisor's sign: 1
      {"7 % -2 + 1", true},                       // -1
      {"2147483647 + 1 + 2147483647 + 1", true},  // wraps: INT_MIN + INT_MIN
      {"abs(-2147483648) + -2147483648", true},   // abs(INT_MIN) == INT_MIN
      {"-2147483648 / -1 - -2147483648", true},   // INT_MIN / -1 == INT_MIN
      {"-2147483648 % -1", true},
      {"65536 * 65536", true},
      {"int(-2.7) + 2", true},  // toward zero
      {"int(2.7) - 2", true},
      {"int(1e10) - 2147483647", true},  // saturates
      {"int(-1e10) + -2147483647 - 1", true},
      {"int(sqrt(-1.0))", true},  // NaN -> 0
      {"int(0.1 + 0.2 - 0.3 == 0.0)", false},
      {"0.1 + 0.2 - 0.3", true},               // float32: 0.1f + 0.2f rounds to 0.3f
      {"float(16777217) - 16777216.0", true},  // rounds to nearest float
      {"max(sqrt(-1.0), 2.0) - 2.0", true},    // NaN ignored
      {"min(2.0, sqrt(-1.0)) - 2", true},
      {"-7.0 % 2.0 - 1.0", true},  // Python's float modulo
      {"7.5 % -2.0 + 0.5", true},
      {"floor(-2.5) + 3", true},
      {"ceil(2.1) - 3", true},
      {"clamp(10, 0, 8) - 8", true},
      {"clamp(1.5, 2, 8) - 2", true},
      {"where(true, 0, 1)", true},
      {"where(1 > 2, 0, 1)", false},
      {"true ? 0 : 1", true},
      {"int(3 > 2 && !(2.0 < 1) || false) - 1", true},
      {"int(1 == 1.0) - 1", true},
      {"int(any(i < 0: true))", true},  // any over nothing is false
      {"int(all(i < 0: false)) - 1", true},
      {"int(all(i < 3: false))", true},
      {"int(any(i < 3: q > 0))", false},  // varies
      {"tanh(0.0)", true},
      {"exp(0) - 1", true},
      {"exp2(3) - 8", true},
      {"log(1.0)", true},
      {"log2(8) - 3", true},
      {"sigmoid(0.0) - 0.5", true},
      {"float(true) - 1", true},
      {"-(-0.0)", true},
      {"b - b", false},  // not folded: depends on b
  };
  for (const Case& c : cases) {
    INFO(c.divisor);
    std::string text = std::string("mask m = float(q) / (") + c.divisor + ") > 0.0\n";
    std::string found = messages(text);
    CHECK(found == (c.zero ? "constant division by zero\n" : ""));
  }
}

TEST_CASE("param and const declarations", "[dsl][checker]") {
  CHECK(diagnose("param f: double\n"
                 "mask m = q < f\n") ==
        "t.mask:1:10: error: unsupported type 'double' (expected 'int', 'bool' or 'float')\n"
        "param f: double\n"
        "         ^~~~~~\n");
  Module module = checked(
      "const chunk: int = 64 * 128\n"
      "const cap: float = 50\n"
      "const on: bool = chunk > 100 && cap < 60.0\n"
      "const lo: int = -5\n"
      "const later: int = chunk / 2 + max(lo, 3)\n"
      "mask m = q / later > 0 && on\n");
  CHECK(body(module, "m").args[0]->args[0]->args[1]->ref_kind == RefKind::Const);
  CHECK(body(module, "m").args[0]->args[0]->args[1]->ref_index == module.find("later"));
  CHECK(diagnose("const c: int = true\n"
                 "const d: bool = -1\n"
                 "const e: int = 1.0\n"
                 "mask m = q < c && d && q < e\n") ==
        "t.mask:1:16: error: expected 'int', found 'bool'\n"
        "const c: int = true\n"
        "               ^~~~\n"
        "t.mask:2:17: error: expected 'bool', found 'int'\n"
        "const d: bool = -1\n"
        "                ^~\n"
        "t.mask:3:16: error: expected 'int', found 'float'\n"
        "const e: int = 1.0\n"
        "               ^~~\n");
  CHECK(diagnose("param window: int\n"
                 "mask causal = q >= kv\n"
                 "const c: int = q + window * 2\n"
                 "const d: bool = causal || any(i < 2: i == 1)\n") ==
        "t.mask:3:16: error: const 'c' must have a constant value, but 'q' is not constant\n"
        "const c: int = q + window * 2\n"
        "               ^\n"
        "t.mask:3:20: error: const 'c' must have a constant value, but 'window' is not constant\n"
        "const c: int = q + window * 2\n"
        "                   ^~~~~~\n"
        "t.mask:4:17: error: const 'd' must have a constant value, but 'causal' is not constant\n"
        "const d: bool = causal || any(i < 2: i == 1)\n"
        "                ^~~~~~\n"
        "t.mask:4:38: error: const 'd' must have a constant value, but 'i' is not constant\n"
        "const d: bool = causal || any(i < 2: i == 1)\n"
        "                                     ^\n");
  CHECK(messages("param a: float[h]\nscore s = score\nconst c: float = s(1.0) + a[0] + score\n") ==
        "const 'c' must have a constant value, but 's' is not constant\n"
        "const 'c' must have a constant value, but 'a' is not constant\n"
        "const 'c' must have a constant value, but 'score' is not constant\n");
}

TEST_CASE("syntax errors", "[dsl][checker]") {
  // Recovery skips to the next line that starts a declaration: `y = 2` is skipped as part of
  // the broken `mask m q`; the parameters that failed raise no "unused parameter" warnings.
  CHECK(diagnose("x = 1\nparam : int\nparam w int\nparam x:\nmask m q\ny = 2\n") ==
        "t.mask:1:1: error: expected a declaration ('param', 'const', 'mask', 'score' or "
        "'variant'), found 'x'\n"
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
  CHECK(diagnose("mask m = any q < 2: true)\n"
                 "mask n = all(2 < 3: true)\n"
                 "score s = int + 1\n"
                 "variant v = m with\n") ==
        "t.mask:1:14: error: expected '(' after 'any', found 'q'\n"
        "mask m = any q < 2: true)\n"
        "             ^\n"
        "t.mask:2:14: error: expected the name of the variable of 'all', found '2'\n"
        "mask n = all(2 < 3: true)\n"
        "             ^\n"
        "t.mask:3:15: error: expected '(' after 'int', found '+'\n"
        "score s = int + 1\n"
        "              ^\n"
        "t.mask:4:19: error: expected a name, found end of line\n"
        "variant v = m with\n"
        "                  ^\n");
}

TEST_CASE("a byte the lexer rejects costs one error, not a cascade", "[dsl][checker]") {
  CHECK(diagnose("param w: int\nmask m = q $ kv\nmask n = q @\nmask k = n && m && q - kv < w\n") ==
        "t.mask:2:12: error: unexpected character '$'\n"
        "mask m = q $ kv\n"
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
                 "score s = score > 0\n"
                 "mask m = q && windw\n"
                 "mask a = q / 0 > 0\n"
                 "const big: int = 4294967296\n"
                 "variant v = s\n") ==
        "t.mask:2:7: warning: unused parameter 'unused'\n"
        "param unused: int\n"
        "      ^~~~~~\n"
        "t.mask:3:6: error: cycle among masks: 'a' -> 'b2' -> 'a'\n"
        "mask a = b2 && q - kv < window\n"
        "     ^\n"
        "t.mask:5:11: error: expected a number, found 'bool'\n"
        "score s = score > 0\n"
        "          ^~~~~~~~~\n"
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
        "                 ^~~~~~~~~~\n"
        "t.mask:9:13: error: 's' is a score, not a mask\n"
        "variant v = s\n"
        "            ^\n");
}

TEST_CASE("the bitwise operators take ints and give an int", "[dsl][checker]") {
  const Module module = checked(
      "param w: int\n"
      "mask m = (q & w) + (q | 1) + (q ^ kv) + ~q + (1 << kv) + (q >> 3) > 0\n");
  CHECK(module.decls[1].value->type == Type::Bool);
  CHECK(messages("mask m = (q > 0) & (kv > 0)\n") ==
        "operator '&' expects 'int', found 'bool' (use '&&' for booleans)\n"
        "operator '&' expects 'int', found 'bool' (use '&&' for booleans)\n");
  CHECK(messages("mask m = ((q > 0) | true) == true\n") ==
        "operator '|' expects 'int', found 'bool' (use '||' for booleans)\n"
        "operator '|' expects 'int', found 'bool' (use '||' for booleans)\n");
  CHECK(messages("mask m = ((q > 0) ^ true) == true\n") ==
        "operator '^' expects 'int', found 'bool' (use '!=' for booleans)\n"
        "operator '^' expects 'int', found 'bool' (use '!=' for booleans)\n");
  CHECK(messages("mask m = ~(q > 0) == true\n") ==
        "operator '~' expects 'int', found 'bool' (use '!' for booleans)\n");
  // No promotion: a float is an error, not converted.
  CHECK(messages("mask m = (q & 1.0) > 0\n") == "operator '&' expects 'int', found 'float'\n");
  CHECK(messages("score s = float(q << 2.0) + score\n") ==
        "operator '<<' expects 'int', found 'float'\n");
  CHECK(messages("score s = float(~score)\n") == "operator '~' expects 'int', found 'float'\n");
}

TEST_CASE("& and | between comparisons get a hint about precedence", "[dsl][checker]") {
  CHECK(diagnose("mask m = q > 0 & kv > 0\n") ==
        "t.mask:1:10: error: operator '>' expects a number, found 'bool' ('&' binds tighter than "
        "comparisons: did you mean '&&'?)\n"
        "mask m = q > 0 & kv > 0\n"
        "         ^~~~~~~~~~\n");
  CHECK(messages("mask m = q == 0 | kv == 1\n") ==
        "operator '==' cannot compare 'bool' with 'int' ('|' binds tighter than comparisons: did "
        "you mean '||'?)\n");
  // Written as meant, the same masks check.
  checked("mask m = q > 0 && kv > 0 || (q & 1) == 0 && q & 1 == 0\n");
}

TEST_CASE("constant bitwise operations fold with the language's semantics", "[dsl][checker]") {
  // Consts are folded by the checker: a wrong value fails the division-by-zero check below
  // (a divisor that folds to 0 is an error), a right one leaves no diagnostic.
  const auto zero = [](const std::string& value) {
    return messages("const z: int = " + value + "\nmask m = q / z == 0\n") ==
           "constant division by zero\n";
  };
  CHECK(zero("(12 & 10) - 8"));
  CHECK(zero("(12 | 10) - 14"));
  CHECK(zero("(12 ^ 10) - 6"));
  CHECK(zero("~5 + 6"));
  CHECK(zero("(-7 >> 1) + 4"));              // arithmetic: floor(-7 / 2)
  CHECK(zero("(1 << 31) - (-2147483648)"));  // wraps to INT_MIN
  CHECK(zero("1 << 32"));                    // counts outside [0, 31]: 0 ...
  CHECK(zero("1 << -1"));
  CHECK(zero("(-5 >> 32) + 1"));  // ... or the sign
  CHECK(zero("(-5 >> -1) + 1"));
  CHECK(zero("5 >> 40"));
  CHECK(!zero("(12 & 10) - 9"));
}
