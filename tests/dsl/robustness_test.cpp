// Adversarial input: deep nesting, random bytes and random token soups must produce
// diagnostics, never a crash, a hang or an out-of-range span.
#include <array>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "flexjit/dsl/frontend.h"

using namespace flexjit::dsl;

namespace {

std::vector<Diagnostic> diagnose(std::string text) {
  std::vector<Diagnostic> diagnostics;
  parse_and_check(Source{"t", std::move(text)}, diagnostics);
  return diagnostics;
}

size_t count_too_deep(const std::vector<Diagnostic>& diagnostics) {
  size_t count = 0;
  for (const Diagnostic& diagnostic : diagnostics) {
    count += diagnostic.message == "expression nested too deeply (the limit is 256 levels)";
  }
  return count;
}

std::string repeat(std::string_view text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i)
    out += text;
  return out;
}

// Properties every result must have, whatever the input.
void check_invariants(const Module& module, const std::vector<Diagnostic>& diagnostics) {
  size_t size = module.source.text.size();
  for (const Diagnostic& diagnostic : diagnostics) {
    REQUIRE(diagnostic.span.offset + diagnostic.span.length <= size);
    REQUIRE(!diagnostic.message.empty());
  }
  if (has_errors(diagnostics)) return;
  // A module without errors is fully resolved and typed: the compiler lowers it as is.
  std::vector<const Expr*> pending;
  for (const Decl& decl : module.decls) {
    REQUIRE(decl.declared_type != Type::Error);
    if (decl.kind == DeclKind::Param) continue;
    REQUIRE(decl.value);
    REQUIRE(decl.value->type == decl.declared_type);
    pending.push_back(decl.value.get());
  }
  while (!pending.empty()) {
    const Expr* expr = pending.back();
    pending.pop_back();
    REQUIRE(expr->type != Type::Error);
    REQUIRE(expr->span.offset + expr->span.length <= size);
    if (expr->kind == Expr::Kind::Name) {
      REQUIRE(expr->ref_kind != RefKind::Unresolved);
      if (expr->ref_kind != RefKind::Builtin) {
        REQUIRE(expr->ref_index >= 0);
        REQUIRE(static_cast<size_t>(expr->ref_index) < module.decls.size());
        REQUIRE(module.decls[expr->ref_index].name == expr->name);
      }
    }
    if (expr->kind == Expr::Kind::IntLit) REQUIRE(expr->int_value <= 2147483648);
    for (const ExprPtr& arg : expr->args)
      pending.push_back(arg.get());
  }
}

}  // namespace

TEST_CASE("expressions nest up to 256 levels", "[dsl][robustness]") {
  CHECK(diagnose("mask m = " + repeat("(", 256) + "true" + repeat(")", 256)).empty());
  CHECK(count_too_deep(diagnose("mask m = " + repeat("(", 257) + "true" + repeat(")", 257))) == 1);
  // Parentheses around an operator count with it.
  CHECK(count_too_deep(diagnose("mask m = " + repeat("(", 256) + "q > kv" + repeat(")", 256))) ==
        1);
  CHECK(diagnose("mask m = " + repeat("!", 256) + "true").empty());
  CHECK(count_too_deep(diagnose("mask m = " + repeat("!", 257) + "true")) == 1);
  // A binary chain deepens the tree without deepening the parser's recursion.
  CHECK(diagnose("mask m = true" + repeat(" && true", 256)).empty());
  CHECK(count_too_deep(diagnose("mask m = true" + repeat(" && true", 257))) == 1);
  CHECK(count_too_deep(diagnose("mask m = " + repeat("abs(", 200) + "q" + repeat(")", 200) +
                                repeat(" + q", 56) + " > 0")) == 1);
  CHECK(diagnose("mask m = " + repeat("abs(", 200) + "q" + repeat(")", 200) + repeat(" + q", 55) +
                 " > 0")
            .empty());
}

TEST_CASE("adversarial nesting is one error, and the next declaration still parses",
          "[dsl][robustness]") {
  std::vector<Diagnostic> diagnostics =
      diagnose("mask m1 = " + repeat("(", 100000) + "\nmask m2 = " + repeat("-", 100000) +
               "q\nmask m3 = q" + repeat(" + q", 100000) + "\nmask m4 = nope\n");
  REQUIRE(diagnostics.size() == 4);
  CHECK(count_too_deep(diagnostics) == 3);
  CHECK(diagnostics[3].message == "unknown name 'nope'");
}

TEST_CASE("random bytes never crash the front end", "[dsl][robustness]") {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 200);
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    int n = length(rng);
    for (int j = 0; j < n; ++j)
      text += static_cast<char>(byte(rng));
    std::vector<Diagnostic> diagnostics;
    Module module = parse_and_check(Source{"t", text}, diagnostics);
    check_invariants(module, diagnostics);
    format_diagnostics(module.source, diagnostics);
  }
}

TEST_CASE("random token soups never crash the front end", "[dsl][robustness]") {
  constexpr std::array<std::string_view, 38> kPieces = {
      "param", "const", "mask", "int", "bool", "float", "true", "false", "q", "kv",
      "b",     "h",     "w",    "m",   "abs",  "min",   "max",  "0",     "1", "2147483648",
      "(",     ")",     ",",    ":",   "=",    "+",     "-",    "*",     "/", "%",
      "<",     ">=",    "==",   "&&",  "||",   "!",     "\n",   "#"};
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> piece(0, kPieces.size() - 1);
  std::uniform_int_distribution<int> length(0, 60);
  int clean = 0;
  for (int i = 0; i < 3000; ++i) {
    // Starting most soups with a declaration head makes many of them get far into the parser
    // and the checker.
    std::string text = i % 2 ? "param w: int\nmask m = " : "";
    int n = length(rng);
    for (int j = 0; j < n; ++j) {
      text += kPieces[piece(rng)];
      text += j % 3 ? " " : "";
    }
    std::vector<Diagnostic> diagnostics;
    Module module = parse_and_check(Source{"t", text}, diagnostics);
    check_invariants(module, diagnostics);
    format_diagnostics(module.source, diagnostics);
    clean += !has_errors(diagnostics);
  }
  // The soups reach past the first token: some of them are valid files.
  CHECK(clean > 0);
}
