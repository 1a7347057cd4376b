// Adversarial input: deep nesting, random bytes and random token soups must produce
// diagnostics, never a crash, a hang or an out-of-range span.
#include <array>
#include <chrono>
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

bool is_decl(const Module& module, int index, DeclKind kind) {
  return index >= 0 && static_cast<size_t>(index) < module.decls.size() &&
         module.decls[index].kind == kind;
}

bool is_number(Type type) {
  return type == Type::Int || type == Type::Float;
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
    switch (decl.kind) {
      case DeclKind::Param:
        REQUIRE(decl.declared_type != Type::Error);
        REQUIRE(decl.dims.size() <= 2);
        REQUIRE((!decl.is_array() || decl.declared_type != Type::Bool));
        break;
      case DeclKind::Const:
        REQUIRE(decl.value);
        REQUIRE((decl.value->type == decl.declared_type ||
                 (decl.declared_type == Type::Float && decl.value->type == Type::Int)));
        break;
      case DeclKind::Mask:
        REQUIRE(decl.value);
        REQUIRE(decl.value->type == Type::Bool);
        break;
      case DeclKind::Score:
        REQUIRE(decl.value);
        REQUIRE(is_number(decl.value->type));
        break;
      case DeclKind::Variant:
        REQUIRE(is_decl(module, decl.variant_mask_index, DeclKind::Mask));
        if (decl.variant_score.empty()) {
          REQUIRE(decl.variant_score_index == -1);
        } else {
          REQUIRE(is_decl(module, decl.variant_score_index, DeclKind::Score));
        }
        break;
    }
    if (decl.value) pending.push_back(decl.value.get());
  }
  while (!pending.empty()) {
    const Expr* expr = pending.back();
    pending.pop_back();
    REQUIRE(expr->type != Type::Error);
    REQUIRE(expr->span.offset + expr->span.length <= size);
    switch (expr->kind) {
      case Expr::Kind::Name:
        REQUIRE(expr->ref_kind != RefKind::Unresolved);
        REQUIRE(expr->ref_kind != RefKind::Score);
        if (expr->ref_kind == RefKind::Local) {
          REQUIRE(expr->binder);
          REQUIRE(expr->binder->name == expr->name);
        } else if (expr->ref_kind != RefKind::Builtin) {
          REQUIRE(expr->ref_index >= 0);
          REQUIRE(static_cast<size_t>(expr->ref_index) < module.decls.size());
          REQUIRE(module.decls[expr->ref_index].name == expr->name);
        }
        break;
      case Expr::Kind::IntLit:
        REQUIRE(expr->int_value <= 2147483648);
        break;
      case Expr::Kind::Call:
        if (expr->ref_kind == RefKind::Score) {
          REQUIRE(expr->args.size() == 1);
          REQUIRE(is_decl(module, expr->ref_index, DeclKind::Score));
        } else {
          REQUIRE(expr->ref_kind == RefKind::Builtin);
        }
        break;
      case Expr::Kind::Index:
        REQUIRE(expr->ref_kind == RefKind::Param);
        REQUIRE(is_decl(module, expr->ref_index, DeclKind::Param));
        REQUIRE(module.decls[expr->ref_index].dims.size() == expr->args.size());
        break;
      case Expr::Kind::Reduce:
        REQUIRE(expr->args.size() == 2);
        REQUIRE(expr->type == Type::Bool);
        break;
      default:
        break;
    }
    for (const ExprPtr& arg : expr->args)
      pending.push_back(arg.get());
  }
}

// Runs the front end and the formatters on `text`, checks the invariants, and returns the
// diagnostics. Fails if that takes more than a second: the work must stay near-linear.
std::vector<Diagnostic> run_bounded(std::string text) {
  auto start = std::chrono::steady_clock::now();
  std::vector<Diagnostic> diagnostics;
  Module module = parse_and_check(Source{"t", std::move(text)}, diagnostics);
  format_diagnostics(module.source, diagnostics);
  format_diagnostics_json(module.source, diagnostics);
  auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed < std::chrono::seconds(1));
  check_invariants(module, diagnostics);
  return diagnostics;
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
  // ?: nests to the right; each level is one.
  CHECK(diagnose("mask m = " + repeat("true ? true : ", 256) + "false").empty());
  CHECK(count_too_deep(diagnose("mask m = " + repeat("true ? true : ", 257) + "false")) == 1);
  CHECK(count_too_deep(diagnose("mask m = " + repeat("t[", 300) + "0" + repeat("]", 300))) == 1);
  CHECK(count_too_deep(
            diagnose("mask m = " + repeat("any(i < 1: ", 300) + "true" + repeat(")", 300))) == 1);
  CHECK(count_too_deep(diagnose("score s = " + repeat("int(", 300) + "1" + repeat(")", 300))) == 1);
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

TEST_CASE("empty and blank sources have no declarations and no diagnostics", "[dsl][robustness]") {
  for (const char* text : {"", "\n", "\n\n\n", "   \t\r\n", "# only a comment", "#\n#\n"}) {
    INFO(text);
    std::vector<Diagnostic> diagnostics;
    Module module = parse_and_check(Source{"t", text}, diagnostics);
    CHECK(diagnostics.empty());
    CHECK(module.decls.empty());
  }
}

TEST_CASE("huge literals and identifiers are one short error each", "[dsl][robustness]") {
  std::string digits(1000000, '7');
  std::vector<Diagnostic> diagnostics = run_bounded(
      "mask a = q < " + digits + "\nscore f = " + digits + ".5e3\nscore g = 0." + digits +
      "e-9999999999999999999999\nmask d = q < 1" + std::string(100000, 'x') + "\n");
  REQUIRE(diagnostics.size() == 3);
  CHECK(diagnostics[0].message.starts_with("integer literal '7777"));
  CHECK(diagnostics[1].message.starts_with("float literal '7777"));
  CHECK(diagnostics[2].message.starts_with("invalid integer literal '1xxx"));
  for (const Diagnostic& diagnostic : diagnostics)
    CHECK(diagnostic.message.size() < 200);

  std::string name(100000, 'n');
  diagnostics = run_bounded("param " + name + ": int[" + name + "]\nmask " + name + " = " + name +
                            "[" + name + "] > 0 && " + name + "(q)\n");
  // The mask's name clashes with the param's, the call is wrong and the read resolves to the
  // param, whose index is an unknown name; every message stays short.
  REQUIRE(diagnostics.size() == 3);
  for (const Diagnostic& diagnostic : diagnostics)
    CHECK(diagnostic.message.size() < 200);
}

TEST_CASE("NUL and non-UTF-8 bytes anywhere", "[dsl][robustness]") {
  std::string text("mask m = q >= kv\0\n\xff\xfe mask \x80 = true\nparam \xc3: int\n", 48);
  std::vector<Diagnostic> diagnostics = run_bounded(text);
  CHECK(has_errors(diagnostics));
  run_bounded(std::string(10000, '\0'));
  run_bounded(std::string(10000, '\xff'));
}

TEST_CASE("thousands of declarations, duplicates and cycles stay fast", "[dsl][robustness]") {
  std::string duplicates;
  for (int i = 0; i < 20000; ++i)
    duplicates += "mask m = q >= kv\n";
  CHECK(run_bounded(duplicates).size() == 19999);

  // Every mask refers to the first: thousands of cycles, each reported with a short path.
  std::string cycles;
  for (int i = 0; i < 5000; ++i)
    cycles += "mask m" + std::to_string(i) + " = m0 && m" + std::to_string(i + 1) + "\n";
  cycles += "mask m5000 = m0\n";
  std::vector<Diagnostic> diagnostics = run_bounded(cycles);
  CHECK(diagnostics.size() == 5001);
  for (const Diagnostic& diagnostic : diagnostics)
    CHECK(diagnostic.message.size() < 400);

  // Each const uses the next twice: a walk through references without memoization would
  // take 2^20000 steps.
  std::string consts;
  for (int i = 0; i < 20000; ++i)
    consts += "const c" + std::to_string(i) + ": int = c" + std::to_string(i + 1) + " + c" +
              std::to_string(i + 1) + "\n";
  consts += "const c20000: int = 1\nmask m = q % (c0 - c0 + 1) == 0\n";
  CHECK(run_bounded(consts).empty());

  std::string scores;
  for (int i = 0; i < 20000; ++i)
    scores += "score s" + std::to_string(i) + " = s" + std::to_string(i + 1) + "(score) + s" +
              std::to_string(i + 1) + "(score * 2)\n";
  scores += "score s20000 = s0(score)\nvariant v = s0 with s0\n";
  diagnostics = run_bounded(scores);
  REQUIRE(diagnostics.size() == 2);
  CHECK(diagnostics[0].message.starts_with("cycle among scores: 's0' -> 's1'"));
  CHECK(diagnostics[1].message == "'s0' is a score, not a mask");
}

TEST_CASE("any nested in any, and huge counts, are checked without unrolling",
          "[dsl][robustness]") {
  // 64^100 iterations if the checker unrolled it.
  std::string nested = "mask m = ";
  for (int i = 0; i < 100; ++i)
    nested += "any(i" + std::to_string(i) + " < 64: ";
  nested += "i0 + i99 == q" + repeat(")", 100);
  CHECK(run_bounded(nested).empty());
  std::vector<Diagnostic> diagnostics = run_bounded(
      "mask m = any(i < 99999999999999999999: true) || any(j < 2147483647: true) || "
      "all(k < 65536 * 65536 - 1: true)\n");
  REQUIRE(diagnostics.size() == 3);
  CHECK(diagnostics[0].message ==
        "integer literal '99999999999999999999' is out of range (the largest int is 2147483647)");
  CHECK(diagnostics[1].message == "the count of 'any' must be between 0 and 64, found 2147483647");
  CHECK(diagnostics[2].message == "the count of 'all' must be between 0 and 64, found -1");
}

TEST_CASE("random token soups of the whole language never crash", "[dsl][robustness]") {
  constexpr std::array<std::string_view, 47> kPieces = {
      "param", "const", "mask", "score", "variant", "with", "int", "bool", "float", "true",
      "false", "any",   "all",  "q",     "kv",      "b",    "h",   "w",    "t",     "s",
      "m",     "i",     "tanh", "where", "min",     "0",    "2",   "1.5",  "1e39",  "(",
      ")",     "[",     "]",    ",",     ":",       "=",    "?",   "+",    "/",     "%",
      "<",     "==",    "&&",   "||",    "!",       "\n",   "-"};
  std::mt19937 rng(11);
  std::uniform_int_distribution<size_t> piece(0, kPieces.size() - 1);
  std::uniform_int_distribution<int> length(0, 40);
  const char* heads[] = {
      "",
      "param w: int\nparam t: float[b, q]\nmask m = ",
      "param w: int\nparam t: int[h]\nscore s = score\nmask m = q > 0\nscore x = ",
      "const c: int = 4\nmask m = any(i < c: ",
  };
  int clean = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string text = heads[i % 4];
    int n = length(rng);
    for (int j = 0; j < n; ++j) {
      text += kPieces[piece(rng)];
      text += j % 3 ? " " : "";
    }
    std::vector<Diagnostic> diagnostics;
    Module module = parse_and_check(Source{"t", text}, diagnostics);
    check_invariants(module, diagnostics);
    format_diagnostics(module.source, diagnostics);
    format_diagnostics_json(module.source, diagnostics);
    clean += !has_errors(diagnostics);
  }
  CHECK(clean > 0);
}
