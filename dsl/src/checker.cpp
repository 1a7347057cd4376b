// Name resolution and type checking. Every error is reported once, at the expression that
// causes it: an expression whose type cannot be determined gets Type::Error, and nothing
// above it reports again.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "flexjit/dsl/frontend.h"

namespace flexjit::dsl {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

// Builtin functions: every argument and the result are `int`.
struct BuiltinFunction {
  std::string_view name;
  size_t arity;
};

constexpr std::array<BuiltinFunction, 3> kBuiltinFunctions = {{
    {"abs", 1},
    {"min", 2},
    {"max", 2},
}};

constexpr std::array<Builtin, 4> kBuiltins = {Builtin::B, Builtin::H, Builtin::Q, Builtin::KV};

const BuiltinFunction* find_function(std::string_view name) {
  for (const BuiltinFunction& function : kBuiltinFunctions) {
    if (function.name == name) return &function;
  }
  return nullptr;
}

std::optional<Builtin> find_builtin(std::string_view name) {
  for (Builtin builtin : kBuiltins) {
    if (name == builtin_name(builtin)) return builtin;
  }
  return std::nullopt;
}

std::string quote_type(Type type) {
  return quote(type_name(type));
}

// The forms a const value may take for now: an int literal, optionally negated, or
// true/false.
bool is_literal(const Expr& expr) {
  if (expr.kind == Expr::Kind::IntLit || expr.kind == Expr::Kind::BoolLit) return true;
  return expr.kind == Expr::Kind::Unary && expr.unary_op == UnaryOp::Neg &&
         expr.args[0]->kind == Expr::Kind::IntLit;
}

class Checker {
 public:
  explicit Checker(Module& module) : module_(module) {}

  std::vector<Diagnostic> run();

 private:
  void declare_names();
  void check_declared_type(const Decl& decl);
  void check_decl(int index);
  void check_expr(Expr& expr);
  void check_int_literal(Expr& literal, bool negated);
  void resolve_name(Expr& expr);
  void check_unary(Expr& expr);
  void check_binary(Expr& expr);
  void check_call(Expr& expr);
  bool expect_operand(const Expr& operand, Type want, const char* op);
  std::optional<int64_t> constant_int(const Expr& expr) const;
  void check_cycles();
  void report_cycle(const std::vector<int>& path, int target);
  void warn_unused_params();

  std::string_view text_of(Span span) const {
    return std::string_view(module_.source.text).substr(span.offset, span.length);
  }
  uint32_t line_of(Span span) const { return line_col(module_.source.text, span.offset).line; }
  void error(Span span, std::string message) {
    diagnostics_.push_back({Severity::Error, span, std::move(message)});
  }

  Module& module_;
  std::vector<Diagnostic> diagnostics_;
  std::unordered_map<std::string_view, int> decl_by_name_;  // the first declaration of a name
  std::vector<bool> redeclared_;                            // shadowed by an earlier one
  std::vector<std::vector<int>> mask_refs_;                 // per decl: masks its body names
  std::vector<bool> param_used_;                            // per decl: named by a mask body
  int current_decl_ = -1;
};

std::vector<Diagnostic> Checker::run() {
  size_t count = module_.decls.size();
  redeclared_.assign(count, false);
  mask_refs_.assign(count, {});
  param_used_.assign(count, false);
  declare_names();
  for (size_t i = 0; i < count; ++i)
    check_decl(static_cast<int>(i));
  check_cycles();
  warn_unused_params();
  std::stable_sort(
      diagnostics_.begin(), diagnostics_.end(),
      [](const Diagnostic& a, const Diagnostic& b) { return a.span.offset < b.span.offset; });
  return std::move(diagnostics_);
}

void Checker::declare_names() {
  for (size_t i = 0; i < module_.decls.size(); ++i) {
    const Decl& decl = module_.decls[i];
    if (find_builtin(decl.name)) {
      error(decl.name_span, quote(decl.name) + " is a builtin name and cannot be declared");
      redeclared_[i] = true;
      continue;
    }
    if (find_function(decl.name)) {
      error(decl.name_span, quote(decl.name) + " is a builtin function and cannot be declared");
      redeclared_[i] = true;
      continue;
    }
    auto [first, inserted] = decl_by_name_.emplace(decl.name, static_cast<int>(i));
    if (!inserted) {
      error(decl.name_span,
            fmt::format("duplicate declaration of {} (first declared on line {})", quote(decl.name),
                        line_of(module_.decls[first->second].name_span)));
      redeclared_[i] = true;
    }
  }
}

// A written type that is not one of the language's (`param x: float` in this subset). A
// type the parser never reached (empty span) was a syntax error, already reported.
void Checker::check_declared_type(const Decl& decl) {
  if (decl.declared_type != Type::Error || decl.type_span.length == 0) return;
  error(decl.type_span, fmt::format("unsupported type {} (expected 'int' or 'bool')",
                                    quote(text_of(decl.type_span))));
}

void Checker::check_decl(int index) {
  Decl& decl = module_.decls[index];
  current_decl_ = index;
  if (decl.kind != DeclKind::Mask) check_declared_type(decl);
  // A body that failed to parse has no value; its syntax error is already reported.
  if (!decl.value) return;
  Expr& value = *decl.value;
  check_expr(value);
  if (decl.kind == DeclKind::Const && !is_literal(value)) {
    error(value.span, fmt::format("the value of const {} must be a literal", quote(decl.name)));
    return;
  }
  if (value.type != Type::Error && decl.declared_type != Type::Error &&
      value.type != decl.declared_type) {
    error(value.span, fmt::format("expected {}, found {}", quote_type(decl.declared_type),
                                  quote_type(value.type)));
  }
}

void Checker::check_expr(Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::IntLit:
      check_int_literal(expr, false);
      return;
    case Expr::Kind::BoolLit:
      expr.type = Type::Bool;
      return;
    case Expr::Kind::Name:
      resolve_name(expr);
      return;
    case Expr::Kind::Unary:
      check_unary(expr);
      return;
    case Expr::Kind::Binary:
      check_binary(expr);
      return;
    case Expr::Kind::Call:
      check_call(expr);
      return;
  }
}

// `2147483648` fits only negated: `-2147483648` is unary minus applied to it, and is INT_MIN
// (truncating the literal to int32 gives INT_MIN too, and negating that wraps to itself).
void Checker::check_int_literal(Expr& literal, bool negated) {
  literal.type = Type::Int;
  int64_t limit = negated ? kMaxInt + 1 : kMaxInt;
  if (literal.int_value > limit) {
    error(literal.span, fmt::format("integer literal {} is out of range (the largest int is {})",
                                    quote(text_of(literal.span)), kMaxInt));
  }
}

void Checker::resolve_name(Expr& expr) {
  expr.type = Type::Error;
  if (std::optional<Builtin> builtin = find_builtin(expr.name)) {
    expr.ref_kind = RefKind::Builtin;
    expr.ref_index = static_cast<int>(*builtin);
    expr.type = Type::Int;
    return;
  }
  if (find_function(expr.name)) {
    error(expr.span,
          fmt::format("{} is a function; call it as '{}(...)'", quote(expr.name), expr.name));
    return;
  }
  auto found = decl_by_name_.find(expr.name);
  if (found == decl_by_name_.end()) {
    error(expr.span, "unknown name " + quote(expr.name));
    return;
  }
  int index = found->second;
  const Decl& decl = module_.decls[index];
  bool in_mask = module_.decls[current_decl_].kind == DeclKind::Mask;
  expr.ref_index = index;
  switch (decl.kind) {
    case DeclKind::Param:
      expr.ref_kind = RefKind::Param;
      expr.type = decl.declared_type;
      if (in_mask) param_used_[index] = true;
      return;
    case DeclKind::Const:
      expr.ref_kind = RefKind::Const;
      expr.type = decl.declared_type;
      return;
    case DeclKind::Mask:
      expr.ref_kind = RefKind::Mask;
      expr.type = Type::Bool;
      if (in_mask) mask_refs_[current_decl_].push_back(index);
      return;
  }
}

// Reports `operand` unless it has type `want`. An operand of type Error was reported where
// it went wrong; it only makes the enclosing expression an Error too.
bool Checker::expect_operand(const Expr& operand, Type want, const char* op) {
  if (operand.type == want) return true;
  if (operand.type != Type::Error) {
    error(operand.span, fmt::format("operator '{}' expects {}, found {}", op, quote_type(want),
                                    quote_type(operand.type)));
  }
  return false;
}

void Checker::check_unary(Expr& expr) {
  Expr& operand = *expr.args[0];
  bool negated_literal = expr.unary_op == UnaryOp::Neg && operand.kind == Expr::Kind::IntLit;
  if (negated_literal) {
    check_int_literal(operand, true);
  } else {
    check_expr(operand);
  }
  Type want = expr.unary_op == UnaryOp::Neg ? Type::Int : Type::Bool;
  expr.type = expect_operand(operand, want, op_spelling(expr.unary_op)) ? want : Type::Error;
}

void Checker::check_binary(Expr& expr) {
  Expr& lhs = *expr.args[0];
  Expr& rhs = *expr.args[1];
  check_expr(lhs);
  check_expr(rhs);
  const char* op = op_spelling(expr.binary_op);
  auto both = [&](Type want) {
    bool lhs_ok = expect_operand(lhs, want, op);
    bool rhs_ok = expect_operand(rhs, want, op);
    return lhs_ok && rhs_ok;
  };
  switch (expr.binary_op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
      expr.type = both(Type::Int) ? Type::Int : Type::Error;
      return;
    case BinaryOp::Div:
    case BinaryOp::Mod:
      expr.type = both(Type::Int) ? Type::Int : Type::Error;
      // Division by zero is defined (it yields 0), but a constant zero divisor is surely a
      // mistake.
      if (constant_int(rhs) == 0) {
        error(rhs.span, expr.binary_op == BinaryOp::Div ? "constant division by zero"
                                                        : "constant modulo by zero");
      }
      return;
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
      expr.type = both(Type::Int) ? Type::Bool : Type::Error;
      return;
    case BinaryOp::Eq:
    case BinaryOp::Ne:
      expr.type = Type::Error;
      if (lhs.type == Type::Error || rhs.type == Type::Error) return;
      if (lhs.type != rhs.type) {
        error(expr.span, fmt::format("operator '{}' cannot compare {} with {}", op,
                                     quote_type(lhs.type), quote_type(rhs.type)));
        return;
      }
      expr.type = Type::Bool;
      return;
    case BinaryOp::And:
    case BinaryOp::Or:
      expr.type = both(Type::Bool) ? Type::Bool : Type::Error;
      return;
  }
}

void Checker::check_call(Expr& expr) {
  expr.type = Type::Error;
  for (ExprPtr& arg : expr.args)
    check_expr(*arg);
  Span name_span = {expr.span.offset, static_cast<uint32_t>(expr.name.size())};
  const BuiltinFunction* function = find_function(expr.name);
  if (!function) {
    auto found = decl_by_name_.find(expr.name);
    if (found == decl_by_name_.end() && !find_builtin(expr.name)) {
      error(name_span, "unknown function " + quote(expr.name));
      return;
    }
    error(name_span, quote(expr.name) + " is not a function");
    // The mistake is the call, not the parameter: it should not also be reported unused.
    if (found != decl_by_name_.end() && module_.decls[current_decl_].kind == DeclKind::Mask) {
      param_used_[found->second] = true;
    }
    return;
  }
  if (expr.args.size() != function->arity) {
    error(expr.span,
          fmt::format("{} expects {} argument{}, found {}", quote(expr.name), function->arity,
                      function->arity == 1 ? "" : "s", expr.args.size()));
    return;
  }
  bool args_ok = true;
  for (const ExprPtr& arg : expr.args) {
    if (arg->type == Type::Int) continue;
    args_ok = false;
    if (arg->type != Type::Error) {
      error(arg->span, fmt::format("{} expects 'int' arguments, found {}", quote(expr.name),
                                   quote_type(arg->type)));
    }
  }
  if (args_ok) expr.type = Type::Int;
}

// The value of a divisor known without running anything: a literal, a negated literal, or a
// const (whose value is a literal).
std::optional<int64_t> Checker::constant_int(const Expr& expr) const {
  if (expr.kind == Expr::Kind::IntLit) return expr.int_value;
  if (expr.kind == Expr::Kind::Unary && expr.unary_op == UnaryOp::Neg &&
      expr.args[0]->kind == Expr::Kind::IntLit) {
    return -expr.args[0]->int_value;
  }
  if (expr.kind == Expr::Kind::Name && expr.ref_kind == RefKind::Const) {
    const Decl& decl = module_.decls[expr.ref_index];
    if (decl.declared_type == Type::Int && decl.value && is_literal(*decl.value) &&
        decl.value->kind != Expr::Kind::BoolLit) {
      return constant_int(*decl.value);
    }
  }
  return std::nullopt;
}

// Depth-first search over mask references with an explicit stack (a chain of thousands of
// masks must not exhaust the C++ stack). Each back edge closes one cycle, reported once.
void Checker::check_cycles() {
  enum class Mark : uint8_t { Unvisited, OnPath, Done };
  std::vector<Mark> marks(module_.decls.size(), Mark::Unvisited);
  for (std::vector<int>& refs : mask_refs_) {
    std::sort(refs.begin(), refs.end());
    refs.erase(std::unique(refs.begin(), refs.end()), refs.end());
  }
  for (size_t root = 0; root < module_.decls.size(); ++root) {
    if (module_.decls[root].kind != DeclKind::Mask || marks[root] != Mark::Unvisited) continue;
    std::vector<int> path = {static_cast<int>(root)};
    std::vector<size_t> next_ref = {0};
    marks[root] = Mark::OnPath;
    while (!path.empty()) {
      int node = path.back();
      if (next_ref.back() == mask_refs_[node].size()) {
        marks[node] = Mark::Done;
        path.pop_back();
        next_ref.pop_back();
        continue;
      }
      int target = mask_refs_[node][next_ref.back()++];
      if (marks[target] == Mark::OnPath) {
        report_cycle(path, target);
      } else if (marks[target] == Mark::Unvisited) {
        marks[target] = Mark::OnPath;
        path.push_back(target);
        next_ref.push_back(0);
      }
    }
  }
}

void Checker::report_cycle(const std::vector<int>& path, int target) {
  auto start = std::find(path.begin(), path.end(), target);
  std::string message = "cycle among masks: ";
  for (auto it = start; it != path.end(); ++it)
    message += quote(module_.decls[*it].name) + " -> ";
  message += quote(module_.decls[target].name);
  error(module_.decls[target].name_span, std::move(message));
}

void Checker::warn_unused_params() {
  for (size_t i = 0; i < module_.decls.size(); ++i) {
    const Decl& decl = module_.decls[i];
    // A parameter whose declaration did not parse (it has no type) already has an error on
    // its line.
    bool broken = decl.type_span.length == 0;
    if (decl.kind != DeclKind::Param || redeclared_[i] || broken || param_used_[i]) continue;
    diagnostics_.push_back(
        {Severity::Warning, decl.name_span, "unused parameter " + quote(decl.name)});
  }
}

}  // namespace

void check(Module& module, std::vector<Diagnostic>& diagnostics) {
  std::vector<Diagnostic> found = Checker(module).run();
  diagnostics.insert(diagnostics.end(), std::make_move_iterator(found.begin()),
                     std::make_move_iterator(found.end()));
}

Module parse_and_check(Source source, std::vector<Diagnostic>& diagnostics) {
  size_t first = diagnostics.size();
  Module module = parse(std::move(source), diagnostics);
  check(module, diagnostics);
  // Syntax and semantic diagnostics interleave in source order, as a reader goes.
  std::stable_sort(
      diagnostics.begin() + first, diagnostics.end(),
      [](const Diagnostic& a, const Diagnostic& b) { return a.span.offset < b.span.offset; });
  return module;
}

}  // namespace flexjit::dsl
