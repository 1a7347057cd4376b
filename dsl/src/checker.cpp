// Name resolution, type checking and constant evaluation. Every error is reported once, at
// the expression that causes it: an expression whose type cannot be determined gets
// Type::Error, and nothing above it reports again.
//
// Work stays linear in the input: each body is walked once (expressions are at most 256
// levels deep, so the walk may recurse), the value of a const is computed once and looked up
// by its uses, and the references between declarations are searched for cycles with an
// explicit stack.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "flexjit/dsl/constant.h"
#include "flexjit/dsl/frontend.h"
#include "flexjit/dsl/operations.h"

namespace flexjit::dsl {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

// The operand types a builtin function accepts and the type it returns (docs/language.md).
enum class Signature : uint8_t {
  Common,   // numbers -> their common type (min, max, clamp)
  Same,     // a number -> its type (abs)
  Math,     // a number -> float (tanh, exp, ..., floor, ceil)
  Select,   // bool, then two values of one type after promotion -> that type (where)
  Convert,  // bool | int | float -> the function's type (int, float)
};

struct FunctionInfo {
  Function function;  // named by function_name()
  size_t arity;
  Signature signature;
};

// The checker's signature of an operation's typing rule (operations.h).
constexpr Signature signature_of(ops::Typing typing) {
  switch (typing) {
    case ops::Typing::Numeric:
      return Signature::Same;
    case ops::Typing::Math:
      return Signature::Math;
    case ops::Typing::ToInt:
    case ops::Typing::ToFloat:
      return Signature::Convert;
    case ops::Typing::Select:
      return Signature::Select;
    default:
      return Signature::Common;
  }
}

// The functions that are operations, from their rows, then those lowering writes with others.
// clang-format off
constexpr FunctionInfo kFunctions[] = {
#define FJ_FUNCTION_INFO(name, node, arity, typing, ...) \
  {Function::name, arity, signature_of(ops::Typing::typing)},
    FJ_FOR_EACH_SOURCE(CALL, FJ_FUNCTION_INFO)
#undef FJ_FUNCTION_INFO
    {Function::Clamp, 3, Signature::Common},
    {Function::Where, 3, Signature::Select},
};
// clang-format on

constexpr std::array<Builtin, 5> kBuiltins = {Builtin::B, Builtin::H, Builtin::Q, Builtin::KV,
                                              Builtin::Score};

const FunctionInfo* find_function(std::string_view name) {
  for (const FunctionInfo& function : kFunctions) {
    if (function_name(function.function) == name) return &function;
  }
  return nullptr;
}

std::optional<Builtin> find_builtin(std::string_view name) {
  for (Builtin builtin : kBuiltins) {
    if (name == builtin_name(builtin)) return builtin;
  }
  return std::nullopt;
}

// How an operator is typed: its row of the operations table.
#define FJ_UNARY_TYPING(name, node, arity, typing, ...) \
  case UnaryOp::name:                                   \
    return ops::Typing::typing;
#define FJ_BINARY_TYPING(name, node, arity, typing, ...) \
  case BinaryOp::name:                                   \
    return ops::Typing::typing;
ops::Typing typing_of(UnaryOp op) {
  switch (op) { FJ_FOR_EACH_SOURCE(UNARY, FJ_UNARY_TYPING) }
  return ops::Typing::Numeric;
}
ops::Typing typing_of(BinaryOp op) {
  switch (op) { FJ_FOR_EACH_SOURCE(BINARY, FJ_BINARY_TYPING) }
  return ops::Typing::Arithmetic;
}
#undef FJ_UNARY_TYPING
#undef FJ_BINARY_TYPING

// What an operator takes: `&&` bools, `&` ints, `+` (and the others but ==, !=) numbers.
enum class Operand : uint8_t { Bool, Number, Int };
Operand operand_of(ops::Typing typing) {
  return typing == ops::Typing::Logic     ? Operand::Bool
         : typing == ops::Typing::Bitwise ? Operand::Int
                                          : Operand::Number;
}

bool is_comparison(BinaryOp op) {
  const ops::Typing typing = typing_of(op);
  return typing == ops::Typing::Equality || typing == ops::Typing::Ordering;
}

// For a bool where a number was expected: when it is a comparison with `&` or `|` as an
// operand, `q > 0 & kv > 0` was probably meant as `&&` (the bitwise operators bind tighter than
// comparisons, as in Python, so that reads `(q > (0 & kv)) > 0`).
std::string precedence_hint(const Expr& operand) {
  if (operand.kind != Expr::Kind::Binary || !is_comparison(operand.binary_op)) return "";
  for (const ExprPtr& side : operand.args) {
    if (side->kind != Expr::Kind::Binary) continue;
    if (side->binary_op == BinaryOp::BitAnd || side->binary_op == BinaryOp::BitOr) {
      const char* op = op_spelling(side->binary_op);
      return fmt::format(" ('{}' binds tighter than comparisons: did you mean '{}{}'?)", op, op,
                         op);
    }
  }
  return "";
}

std::string quote_type(Type type) {
  return quote(type_name(type));
}

bool is_number(Type type) {
  return type == Type::Int || type == Type::Float;
}

// The type two operands meet at: equal types stay, int and float meet at float; anything
// else (a bool with a number) does not meet.
std::optional<Type> common_type(Type a, Type b) {
  if (a == b) return a;
  if (is_number(a) && is_number(b)) return Type::Float;
  return std::nullopt;
}

// "a mask", "a parameter", ...: what a name is, for messages about using it wrongly.
std::string what_is(const Decl& decl) {
  switch (decl.kind) {
    case DeclKind::Param:
      return decl.is_array() ? "an array parameter" : "a parameter";
    case DeclKind::Const:
      return "a const";
    case DeclKind::Mask:
      return "a mask";
    case DeclKind::Score:
      return "a score";
    case DeclKind::Variant:
      return "a variant";
  }
  return "a declaration";
}

// A value the checker computes at compile time, with the language's exact semantics
// (constant.h: the functions of templates/fj_ops.cuh).
using Value = Constant;

// What the checker knows about an expression's value.
struct Folded {
  enum class State : uint8_t {
    Known,    // `value` is the expression's value, the same for every b, h, q, kv
    Varies,   // it depends on a position, `score`, a param, a mask, or an any/all variable
    Unknown,  // an error below (already reported) or a cycle hides it: say nothing more
  };
  State state = State::Unknown;
  Value value;

  static Folded known(Value value) { return {State::Known, value}; }
  static Folded varies() { return {State::Varies, {}}; }
  static Folded unknown() { return {}; }
  bool is_known() const { return state == State::Known; }
};

// Combines the states of operands: Unknown wins over Varies, which wins over Known.
Folded::State combine(Folded::State a, Folded::State b) {
  return static_cast<Folded::State>(std::max(static_cast<int>(a), static_cast<int>(b)));
}

// An int literal truncated to int32 (only 2147483648, as `-2147483648`, needs it).
int32_t wrap(int64_t v) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
}

// `v` as type `to` (int to float; a value already of that type is unchanged).
Value promote(Value v, Type to) {
  if (to == Type::Float && v.type != Type::Float) return Value::of_float(v.as_float());
  return v;
}

// Longest cycle path printed in full; longer ones keep their ends (a chain of thousands of
// declarations must not make a message of thousands of names).
constexpr size_t kMaxCyclePathNames = 16;

class Checker {
 public:
  explicit Checker(Module& module) : module_(module) {}

  std::vector<Diagnostic> run();

 private:
  void declare_names();
  void declare_local(const Expr& reduce);
  std::vector<int> const_order();
  void collect_const_refs(const Expr& expr, std::vector<std::string_view>& locals,
                          std::vector<int>& refs) const;
  void check_declared_type(const Decl& decl);
  void check_decl(int index);
  void check_variant(Decl& decl);
  int resolve_variant_part(std::string_view name, Span span, DeclKind want);
  Folded check_expr(Expr& expr);
  Folded check_int_literal(Expr& literal, bool negated);
  Folded check_float_literal(Expr& literal);
  Folded check_name(Expr& expr);
  Folded check_unary(Expr& expr);
  Folded check_binary(Expr& expr);
  Folded check_conditional(Expr& expr);
  Folded check_call(Expr& expr);
  Folded check_function_call(Expr& expr, const FunctionInfo& function,
                             const std::vector<Folded>& args);
  Folded check_score_call(Expr& expr, int index, const std::vector<Folded>& args);
  Folded check_index(Expr& expr);
  std::string what_name_is(std::string_view name) const;
  Folded check_reduce(Expr& expr);
  bool expect_operand(const Expr& operand, Operand want, const char* op);
  Folded not_constant(const Expr& expr);
  const Expr* find_local(std::string_view name) const;
  int find_decl(std::string_view name) const;
  void mark_used(int index);
  void add_ref(int index);
  void check_cycles();
  void report_cycle(const std::vector<int>& path, int target);
  void warn_unused_params();

  std::string_view text_of(Span span) const {
    return std::string_view(module_.source.text).substr(span.offset, span.length);
  }
  uint32_t line_of(Span span);
  void error(Span span, std::string message) {
    diagnostics_.push_back({Severity::Error, span, std::move(message)});
  }
  DeclKind current_kind() const { return module_.decls[current_decl_].kind; }

  Module& module_;
  std::vector<Diagnostic> diagnostics_;
  std::unordered_map<std::string_view, int> decl_by_name_;  // the first declaration of a name
  std::vector<bool> redeclared_;                            // shadowed by an earlier one
  std::vector<std::vector<int>> refs_;  // per decl: masks, scores, consts its body uses
  std::vector<bool> param_used_;        // per decl: named by some body
  std::vector<bool> checked_;           // per decl: check_decl ran
  std::vector<Folded> const_values_;    // per const decl: its value, as the declared type
  std::vector<const Expr*> locals_;     // enclosing any/all, innermost last
  std::vector<uint32_t> line_starts_;   // offsets where lines start, built on first use
  int current_decl_ = -1;
};

std::vector<Diagnostic> Checker::run() {
  size_t count = module_.decls.size();
  redeclared_.assign(count, false);
  refs_.assign(count, {});
  param_used_.assign(count, false);
  checked_.assign(count, false);
  const_values_.assign(count, Folded::unknown());
  declare_names();
  // Consts first, each after the consts its value uses, so that every use finds the value
  // computed; then everything else.
  for (int index : const_order())
    check_decl(index);
  for (size_t i = 0; i < count; ++i) {
    if (!checked_[i]) check_decl(static_cast<int>(i));
  }
  check_cycles();
  warn_unused_params();
  std::stable_sort(
      diagnostics_.begin(), diagnostics_.end(),
      [](const Diagnostic& a, const Diagnostic& b) { return a.span.offset < b.span.offset; });
  return std::move(diagnostics_);
}

// Line of a span's start, for messages that point at another line: found by binary search,
// so that thousands of duplicate declarations do not rescan the source each.
uint32_t Checker::line_of(Span span) {
  std::string_view text = module_.source.text;
  if (line_starts_.empty()) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
    }
  }
  auto after = std::upper_bound(line_starts_.begin(), line_starts_.end(), span.offset);
  return static_cast<uint32_t>(after - line_starts_.begin());
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

// The variable of an any/all names nothing else in its scope: not a builtin, not a
// declaration, not an enclosing any/all's variable.
void Checker::declare_local(const Expr& reduce) {
  std::string_view name = reduce.name;
  if (find_builtin(name)) {
    error(reduce.name_span, quote(name) + " is a builtin name and cannot be declared");
  } else if (find_function(name)) {
    error(reduce.name_span, quote(name) + " is a builtin function and cannot be declared");
  } else if (int index = find_decl(name); index >= 0) {
    error(reduce.name_span, fmt::format("duplicate declaration of {} (first declared on line {})",
                                        quote(name), line_of(module_.decls[index].name_span)));
  } else if (const Expr* outer = find_local(name)) {
    error(reduce.name_span, fmt::format("duplicate declaration of {} (first declared on line {})",
                                        quote(name), line_of(outer->name_span)));
  }
}

// The consts in an order where each comes after the consts its value names (a depth-first
// post-order, with an explicit stack: a chain of thousands of consts must not exhaust the
// C++ stack). Consts on a cycle come in some order; the cycle is reported by check_cycles.
std::vector<int> Checker::const_order() {
  size_t count = module_.decls.size();
  std::vector<std::vector<int>> const_refs(count);
  for (size_t i = 0; i < count; ++i) {
    const Decl& decl = module_.decls[i];
    if (decl.kind != DeclKind::Const || !decl.value) continue;
    std::vector<std::string_view> locals;
    collect_const_refs(*decl.value, locals, const_refs[i]);
  }
  std::vector<int> order;
  std::vector<bool> visited(count, false);
  for (size_t root = 0; root < count; ++root) {
    if (module_.decls[root].kind != DeclKind::Const || visited[root]) continue;
    std::vector<int> path = {static_cast<int>(root)};
    std::vector<size_t> next_ref = {0};
    visited[root] = true;
    while (!path.empty()) {
      int node = path.back();
      if (next_ref.back() == const_refs[node].size()) {
        order.push_back(node);
        path.pop_back();
        next_ref.pop_back();
        continue;
      }
      int target = const_refs[node][next_ref.back()++];
      if (!visited[target]) {
        visited[target] = true;
        path.push_back(target);
        next_ref.push_back(0);
      }
    }
  }
  return order;
}

// The consts that `expr` names (as check_name will resolve them: an any/all variable hides
// nothing, but a use of it is not a const).
void Checker::collect_const_refs(const Expr& expr, std::vector<std::string_view>& locals,
                                 std::vector<int>& refs) const {
  if (expr.kind == Expr::Kind::Name &&
      std::find(locals.begin(), locals.end(), expr.name) == locals.end()) {
    int index = find_decl(expr.name);
    if (index >= 0 && module_.decls[index].kind == DeclKind::Const) refs.push_back(index);
  }
  if (expr.kind == Expr::Kind::Reduce) {
    collect_const_refs(*expr.args[0], locals, refs);
    locals.push_back(expr.name);
    collect_const_refs(*expr.args[1], locals, refs);
    locals.pop_back();
    return;
  }
  for (const ExprPtr& arg : expr.args)
    collect_const_refs(*arg, locals, refs);
}

// A written type that is not one of the language's (`param x: double`), or an array type the
// language lacks. A type the parser never reached (empty span) was a syntax error, already
// reported.
void Checker::check_declared_type(const Decl& decl) {
  if (decl.type_span.length == 0) return;
  if (decl.declared_type == Type::Error) {
    error(decl.type_span, fmt::format("unsupported type {} (expected 'int', 'bool' or 'float')",
                                      quote(text_of(decl.type_span))));
    return;
  }
  if (!decl.is_array()) return;
  if (decl.declared_type == Type::Bool) {
    error(decl.type_span, "arrays of 'bool' are not supported (use 'int')");
  }
  if (decl.dims.size() > 2) {
    Span dims = {decl.dims.front().span.offset, decl.dims.back().span.offset +
                                                    decl.dims.back().span.length -
                                                    decl.dims.front().span.offset};
    error(dims, fmt::format("an array has 1 or 2 dimensions, found {}", decl.dims.size()));
  }
}

void Checker::check_decl(int index) {
  checked_[index] = true;
  Decl& decl = module_.decls[index];
  current_decl_ = index;
  if (decl.kind == DeclKind::Param || decl.kind == DeclKind::Const) check_declared_type(decl);
  if (decl.kind == DeclKind::Variant) {
    check_variant(decl);
    return;
  }
  // A body that failed to parse has no value; its syntax error is already reported.
  if (!decl.value) return;
  Expr& value = *decl.value;
  Folded folded = check_expr(value);
  if (value.type == Type::Error || decl.declared_type == Type::Error) return;
  // A score's int body and a float const's int value are promoted.
  bool promoted = value.type == Type::Int && decl.declared_type == Type::Float &&
                  (decl.kind == DeclKind::Score || decl.kind == DeclKind::Const);
  if (value.type != decl.declared_type && !promoted) {
    // A score body may be a float or an int.
    std::string want = decl.kind == DeclKind::Score ? "a number" : quote_type(decl.declared_type);
    error(value.span, fmt::format("expected {}, found {}", want, quote_type(value.type)));
    return;
  }
  if (decl.kind == DeclKind::Const && folded.is_known()) {
    const_values_[index] = Folded::known(promote(folded.value, decl.declared_type));
  }
}

// variant NAME = MASK [with SCORE]: the names must be a mask and a score. A variant whose
// declaration did not parse has neither name and says nothing more.
void Checker::check_variant(Decl& decl) {
  if (decl.variant_mask.empty()) return;
  decl.variant_mask_index =
      resolve_variant_part(decl.variant_mask, decl.variant_mask_span, DeclKind::Mask);
  if (!decl.variant_score.empty()) {
    decl.variant_score_index =
        resolve_variant_part(decl.variant_score, decl.variant_score_span, DeclKind::Score);
  }
}

int Checker::resolve_variant_part(std::string_view name, Span span, DeclKind want) {
  const char* wanted = want == DeclKind::Mask ? "mask" : "score";
  int index = find_decl(name);
  if (index >= 0 && module_.decls[index].kind == want) return index;
  if (index >= 0) {
    error(span,
          fmt::format("{} is {}, not a {}", quote(name), what_is(module_.decls[index]), wanted));
  } else if (find_builtin(name)) {
    error(span, fmt::format("{} is a builtin name, not a {}", quote(name), wanted));
  } else if (find_function(name)) {
    error(span, fmt::format("{} is a builtin function, not a {}", quote(name), wanted));
  } else {
    error(span, fmt::format("unknown {} {}", wanted, quote(name)));
  }
  return -1;
}

Folded Checker::check_expr(Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::IntLit:
      return check_int_literal(expr, false);
    case Expr::Kind::FloatLit:
      return check_float_literal(expr);
    case Expr::Kind::BoolLit:
      expr.type = Type::Bool;
      return Folded::known(Value::of_bool(expr.int_value != 0));
    case Expr::Kind::Name:
      return check_name(expr);
    case Expr::Kind::Unary:
      return check_unary(expr);
    case Expr::Kind::Binary:
      return check_binary(expr);
    case Expr::Kind::Conditional:
      return check_conditional(expr);
    case Expr::Kind::Call:
      return check_call(expr);
    case Expr::Kind::Index:
      return check_index(expr);
    case Expr::Kind::Reduce:
      return check_reduce(expr);
  }
  return Folded::unknown();
}

// `2147483648` fits only negated: `-2147483648` is unary minus applied to it, and is INT_MIN
// (truncating the literal to int32 gives INT_MIN too, and negating that wraps to itself).
Folded Checker::check_int_literal(Expr& literal, bool negated) {
  literal.type = Type::Int;
  int64_t limit = negated ? kMaxInt + 1 : kMaxInt;
  if (literal.int_value > limit) {
    error(literal.span, fmt::format("integer literal {} is out of range (the largest int is {})",
                                    quote(text_of(literal.span)), kMaxInt));
    return Folded::unknown();
  }
  return Folded::known(Value::of_int(wrap(literal.int_value)));
}

// Float literals are float32: one that rounds to infinity is an error, one that underflows
// is 0.
Folded Checker::check_float_literal(Expr& literal) {
  literal.type = Type::Float;
  float value = static_cast<float>(literal.float_value);
  if (!std::isfinite(value)) {
    error(literal.span,
          fmt::format("float literal {} is out of range (the largest float is {})",
                      quote(text_of(literal.span)), std::numeric_limits<float>::max()));
    return Folded::unknown();
  }
  return Folded::known(Value::of_float(value));
}

const Expr* Checker::find_local(std::string_view name) const {
  for (auto it = locals_.rbegin(); it != locals_.rend(); ++it) {
    if ((*it)->name == name) return *it;
  }
  return nullptr;
}

int Checker::find_decl(std::string_view name) const {
  auto found = decl_by_name_.find(name);
  return found == decl_by_name_.end() ? -1 : found->second;
}

// A parameter named anywhere counts as used, even in an erroneous use: the mistake is the
// use, and one report of it is enough.
void Checker::mark_used(int index) {
  param_used_[index] = true;
}

void Checker::add_ref(int index) {
  refs_[current_decl_].push_back(index);
}

// A const's value may use only literals, other consts, operators and builtin functions.
// Reported at each use of something else.
Folded Checker::not_constant(const Expr& expr) {
  error(expr.name_span.length ? expr.name_span : expr.span,
        fmt::format("const {} must have a constant value, but {} is not constant",
                    quote(module_.decls[current_decl_].name), quote(expr.name)));
  return Folded::unknown();
}

Folded Checker::check_name(Expr& expr) {
  expr.type = Type::Error;
  DeclKind in = current_kind();
  if (const Expr* binder = find_local(expr.name)) {
    expr.ref_kind = RefKind::Local;
    expr.binder = binder;
    expr.type = Type::Int;
    return in == DeclKind::Const ? not_constant(expr) : Folded::varies();
  }
  if (std::optional<Builtin> builtin = find_builtin(expr.name)) {
    expr.ref_kind = RefKind::Builtin;
    expr.ref_index = static_cast<int>(*builtin);
    expr.type = *builtin == Builtin::Score ? Type::Float : Type::Int;
    if (in == DeclKind::Const) return not_constant(expr);
    if (*builtin == Builtin::Score && in == DeclKind::Mask) {
      error(expr.span, "a mask cannot use 'score'");
      expr.type = Type::Error;
      return Folded::unknown();
    }
    return Folded::varies();
  }
  if (find_function(expr.name)) {
    error(expr.span, fmt::format("{} is a function; call it as {}", quote(expr.name),
                                 quote(expr.name + "(...)")));
    return Folded::unknown();
  }
  int index = find_decl(expr.name);
  if (index < 0) {
    error(expr.span, "unknown name " + quote(expr.name));
    return Folded::unknown();
  }
  const Decl& decl = module_.decls[index];
  expr.ref_index = index;
  switch (decl.kind) {
    case DeclKind::Param:
      mark_used(index);
      // A parameter whose declaration failed (no type) is already reported.
      if (decl.declared_type == Type::Error) return Folded::unknown();
      if (decl.is_array()) {
        error(expr.span, fmt::format("{} is an array; index it as {}", quote(expr.name),
                                     quote(expr.name + "[...]")));
        return Folded::unknown();
      }
      expr.ref_kind = RefKind::Param;
      expr.type = decl.declared_type;
      return in == DeclKind::Const ? not_constant(expr) : Folded::varies();
    case DeclKind::Const:
      expr.ref_kind = RefKind::Const;
      expr.type = decl.declared_type;
      add_ref(index);
      // Unknown when the const's value had an error, or lies on a cycle.
      return expr.type == Type::Error ? Folded::unknown() : const_values_[index];
    case DeclKind::Mask:
      expr.ref_kind = RefKind::Mask;
      expr.type = Type::Bool;
      if (in == DeclKind::Const) return not_constant(expr);
      if (in == DeclKind::Mask) add_ref(index);
      return Folded::varies();
    case DeclKind::Score:
      error(expr.span, fmt::format("score {} must be called with one argument", quote(expr.name)));
      return Folded::unknown();
    case DeclKind::Variant:
      error(expr.span,
            fmt::format("{} is a variant and cannot be used in an expression", quote(expr.name)));
      return Folded::unknown();
  }
  return Folded::unknown();
}

// Reports `operand` unless it is what the operator takes. An operand of type Error was
// reported where it went wrong; it only makes the enclosing expression an Error too.
bool Checker::expect_operand(const Expr& operand, Operand want, const char* op) {
  switch (want) {
    case Operand::Bool:
      if (operand.type == Type::Bool) return true;
      break;
    case Operand::Number:
      if (is_number(operand.type)) return true;
      break;
    case Operand::Int:
      if (operand.type == Type::Int) return true;
      break;
  }
  if (operand.type == Type::Error) return false;
  const char* wanted = want == Operand::Bool  ? "'bool'"
                       : want == Operand::Int ? "'int'"
                                              : "a number";
  std::string hint;
  if (want == Operand::Int && operand.type == Type::Bool) {
    // The boolean counterparts of the bitwise operators.
    const std::string_view spelling = op;
    if (spelling == "&" || spelling == "|")
      hint = fmt::format(" (use '{}{}' for booleans)", op, op);
    if (spelling == "^") hint = " (use '!=' for booleans)";
    if (spelling == "~") hint = " (use '!' for booleans)";
  } else if (operand.type == Type::Bool) {
    hint = precedence_hint(operand);
  }
  error(operand.span, fmt::format("operator '{}' expects {}, found {}{}", op, wanted,
                                  quote_type(operand.type), hint));
  return false;
}

Folded Checker::check_unary(Expr& expr) {
  Expr& operand = *expr.args[0];
  bool negated_literal = expr.unary_op == UnaryOp::Neg && operand.kind == Expr::Kind::IntLit;
  Folded folded = negated_literal ? check_int_literal(operand, true) : check_expr(operand);
  expr.type = Type::Error;
  if (!expect_operand(operand, operand_of(typing_of(expr.unary_op)), op_spelling(expr.unary_op)))
    return Folded::unknown();
  expr.type = operand.type;
  if (!folded.is_known()) return folded;
  return Folded::known(fold_unary(expr.unary_op, folded.value));
}

Folded Checker::check_binary(Expr& expr) {
  Expr& lhs = *expr.args[0];
  Expr& rhs = *expr.args[1];
  Folded lhs_value = check_expr(lhs);
  Folded rhs_value = check_expr(rhs);
  const char* op = op_spelling(expr.binary_op);
  expr.type = Type::Error;
  const ops::Typing typing = typing_of(expr.binary_op);
  if (typing == ops::Typing::Equality) {
    // == and != compare two numbers or two bools.
    if (lhs.type == Type::Error || rhs.type == Type::Error) return Folded::unknown();
    if (!common_type(lhs.type, rhs.type)) {
      const Expr& boolean = lhs.type == Type::Bool ? lhs : rhs;
      error(expr.span,
            fmt::format("operator '{}' cannot compare {} with {}{}", op, quote_type(lhs.type),
                        quote_type(rhs.type), precedence_hint(boolean)));
      return Folded::unknown();
    }
  } else {
    const Operand want = operand_of(typing);
    bool lhs_ok = expect_operand(lhs, want, op);
    bool rhs_ok = expect_operand(rhs, want, op);
    if (!lhs_ok || !rhs_ok) return Folded::unknown();
  }
  switch (typing) {
    case ops::Typing::Bitwise:
      expr.type = Type::Int;
      break;
    case ops::Typing::Arithmetic:
      expr.type = *common_type(lhs.type, rhs.type);
      // Division and modulo by zero are defined (they yield 0), but a divisor that is
      // constant zero is surely a mistake.
      if ((expr.binary_op == BinaryOp::Div || expr.binary_op == BinaryOp::Mod) &&
          rhs_value.is_known() && rhs_value.value.is_zero()) {
        error(rhs.span, expr.binary_op == BinaryOp::Div ? "constant division by zero"
                                                        : "constant modulo by zero");
        return Folded::unknown();
      }
      break;
    default:
      expr.type = Type::Bool;
      break;
  }
  Folded::State state = combine(lhs_value.state, rhs_value.state);
  if (state != Folded::State::Known) return {state, {}};
  return Folded::known(fold_binary(expr.binary_op, lhs_value.value, rhs_value.value));
}

// c ? a : b: c is a bool, a and b meet at one type.
Folded Checker::check_conditional(Expr& expr) {
  Folded condition = check_expr(*expr.args[0]);
  Folded then_value = check_expr(*expr.args[1]);
  Folded else_value = check_expr(*expr.args[2]);
  expr.type = Type::Error;
  const Expr& c = *expr.args[0];
  const Expr& a = *expr.args[1];
  const Expr& b = *expr.args[2];
  bool ok = true;
  if (c.type != Type::Bool && c.type != Type::Error) {
    error(c.span,
          fmt::format("the condition of '?:' must be 'bool', found {}", quote_type(c.type)));
    ok = false;
  }
  if (a.type == Type::Error || b.type == Type::Error || c.type == Type::Error) return {};
  std::optional<Type> type = common_type(a.type, b.type);
  if (!type) {
    error(expr.span, fmt::format("the branches of '?:' have different types, {} and {}",
                                 quote_type(a.type), quote_type(b.type)));
    return Folded::unknown();
  }
  if (!ok) return Folded::unknown();
  expr.type = *type;
  Folded::State state = combine(condition.state, combine(then_value.state, else_value.state));
  if (state != Folded::State::Known) return {state, {}};
  return Folded::known(promote(condition.value.i ? then_value.value : else_value.value, *type));
}

Folded Checker::check_call(Expr& expr) {
  expr.type = Type::Error;
  std::vector<Folded> args;
  args.reserve(expr.args.size());
  for (ExprPtr& arg : expr.args)
    args.push_back(check_expr(*arg));
  if (const FunctionInfo* function = find_function(expr.name))
    return check_function_call(expr, *function, args);
  int index = find_local(expr.name) ? -1 : find_decl(expr.name);
  if (index >= 0 && module_.decls[index].kind == DeclKind::Score)
    return check_score_call(expr, index, args);
  std::string what = what_name_is(expr.name);
  if (what.empty()) {
    error(expr.name_span, "unknown function " + quote(expr.name));
    return Folded::unknown();
  }
  if (index >= 0 && module_.decls[index].kind == DeclKind::Param) {
    mark_used(index);
    if (module_.decls[index].declared_type == Type::Error) return Folded::unknown();
    if (module_.decls[index].is_array()) {
      error(expr.name_span, fmt::format("{} is an array; index it as {}", quote(expr.name),
                                        quote(expr.name + "[...]")));
      return Folded::unknown();
    }
  }
  error(expr.name_span, fmt::format("{} is {}, not a function", quote(expr.name), what));
  return Folded::unknown();
}

// "a mask", "a builtin name", ...: what `name` is where it is used, or "" for an unknown name.
std::string Checker::what_name_is(std::string_view name) const {
  if (find_local(name)) return "a variable";
  if (find_builtin(name)) return "a builtin name";
  if (find_function(name)) return "a builtin function";
  int index = find_decl(name);
  return index >= 0 ? what_is(module_.decls[index]) : "";
}

Folded Checker::check_function_call(Expr& expr, const FunctionInfo& function,
                                    const std::vector<Folded>& args) {
  expr.ref_kind = RefKind::Builtin;
  expr.ref_index = static_cast<int>(function.function);
  if (expr.args.size() != function.arity) {
    error(expr.span, fmt::format("{} expects {} argument{}, found {}", quote(expr.name),
                                 function.arity, function.arity == 1 ? "" : "s", expr.args.size()));
    return Folded::unknown();
  }
  bool ok = true;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    const Expr& arg = *expr.args[i];
    if (arg.type == Type::Error) {
      ok = false;
      continue;
    }
    bool condition = function.signature == Signature::Select && i == 0;
    if (condition && arg.type != Type::Bool) {
      error(arg.span, fmt::format("{} expects a 'bool' condition, found {}", quote(expr.name),
                                  quote_type(arg.type)));
      ok = false;
    }
    bool any_type = function.signature == Signature::Convert ||
                    (function.signature == Signature::Select && i > 0);
    if (!condition && !any_type && !is_number(arg.type)) {
      error(arg.span,
            fmt::format("{} expects a number, found {}", quote(expr.name), quote_type(arg.type)));
      ok = false;
    }
  }
  if (!ok) return Folded::unknown();
  switch (function.signature) {
    case Signature::Common: {
      Type type = expr.args[0]->type;
      for (const ExprPtr& arg : expr.args)
        type = *common_type(type, arg->type);
      expr.type = type;
      break;
    }
    case Signature::Same:
      expr.type = expr.args[0]->type;
      break;
    case Signature::Math:
      expr.type = Type::Float;
      break;
    case Signature::Select: {
      std::optional<Type> type = common_type(expr.args[1]->type, expr.args[2]->type);
      if (!type) {
        error(expr.span,
              fmt::format("the branches of 'where' have different types, {} and {}",
                          quote_type(expr.args[1]->type), quote_type(expr.args[2]->type)));
        return Folded::unknown();
      }
      expr.type = *type;
      break;
    }
    case Signature::Convert:
      expr.type = function.function == Function::Int ? Type::Int : Type::Float;
      break;
  }
  Folded::State state = Folded::State::Known;
  for (const Folded& arg : args)
    state = combine(state, arg.state);
  if (state != Folded::State::Known) return {state, {}};
  std::vector<Value> values;
  for (const Folded& arg : args)
    values.push_back(arg.value);
  return Folded::known(fold_function(function.function, values));
}

// A score applied to one number: the callee's `score` is the argument.
Folded Checker::check_score_call(Expr& expr, int index, const std::vector<Folded>& args) {
  DeclKind in = current_kind();
  if (in == DeclKind::Const) return not_constant(expr);
  if (in == DeclKind::Mask) {
    error(expr.name_span, fmt::format("a mask cannot call score {}", quote(expr.name)));
    return Folded::unknown();
  }
  expr.ref_kind = RefKind::Score;
  expr.ref_index = index;
  add_ref(index);
  if (expr.args.size() != 1) {
    error(expr.span,
          fmt::format("score {} expects 1 argument, found {}", quote(expr.name), expr.args.size()));
    return Folded::unknown();
  }
  const Expr& arg = *expr.args[0];
  if (arg.type == Type::Error) return Folded::unknown();
  if (!is_number(arg.type)) {
    error(arg.span, fmt::format("score {} expects a number, found {}", quote(expr.name),
                                quote_type(arg.type)));
    return Folded::unknown();
  }
  expr.type = Type::Float;
  return Folded::varies();
}

// name[i] or name[i, j]: an array parameter read with one int per dimension.
Folded Checker::check_index(Expr& expr) {
  expr.type = Type::Error;
  bool indices_ok = true;
  for (ExprPtr& arg : expr.args) {
    check_expr(*arg);
    if (arg->type == Type::Int) continue;
    indices_ok = false;
    if (arg->type != Type::Error) {
      error(arg->span,
            fmt::format("an array index must be 'int', found {}", quote_type(arg->type)));
    }
  }
  int index = find_local(expr.name) ? -1 : find_decl(expr.name);
  bool is_param = index >= 0 && module_.decls[index].kind == DeclKind::Param;
  if (is_param) mark_used(index);
  std::string what = what_name_is(expr.name);
  if (what.empty()) {
    error(expr.name_span, "unknown name " + quote(expr.name));
    return Folded::unknown();
  }
  if (is_param && module_.decls[index].declared_type == Type::Error) return Folded::unknown();
  if (!is_param || !module_.decls[index].is_array()) {
    error(expr.name_span, fmt::format("{} is {}, not an array", quote(expr.name), what));
    return Folded::unknown();
  }
  const Decl& decl = module_.decls[index];
  expr.ref_kind = RefKind::Param;
  expr.ref_index = index;
  if (expr.args.size() != decl.dims.size()) {
    error(expr.span,
          fmt::format("{} expects {} ind{}, found {}", quote(expr.name), decl.dims.size(),
                      decl.dims.size() == 1 ? "ex" : "ices", expr.args.size()));
    return Folded::unknown();
  }
  if (!indices_ok) return Folded::unknown();
  expr.type = decl.declared_type;
  return current_kind() == DeclKind::Const ? not_constant(expr) : Folded::varies();
}

// any(i < N: pred) / all(i < N: pred): N a constant int in [0, kMaxReduceCount], pred a bool
// over i (visible only there).
Folded Checker::check_reduce(Expr& expr) {
  const char* which = expr.reduce_all ? "all" : "any";
  Expr& count = *expr.args[0];
  Expr& predicate = *expr.args[1];
  Folded count_value = check_expr(count);
  declare_local(expr);
  locals_.push_back(&expr);
  Folded predicate_value = check_expr(predicate);
  locals_.pop_back();
  expr.type = Type::Error;
  bool ok = true;
  if (count.type != Type::Error && count.type != Type::Int) {
    error(count.span,
          fmt::format("the count of '{}' must be 'int', found {}", which, quote_type(count.type)));
    ok = false;
  } else if (count_value.state == Folded::State::Varies) {
    error(count.span, fmt::format("the count of '{}' must be a constant", which));
    ok = false;
  } else if (count_value.is_known() &&
             (count_value.value.i < 0 || count_value.value.i > kMaxReduceCount)) {
    error(count.span, fmt::format("the count of '{}' must be between 0 and {}, found {}", which,
                                  kMaxReduceCount, count_value.value.i));
    ok = false;
  }
  if (predicate.type != Type::Error && predicate.type != Type::Bool) {
    error(predicate.span, fmt::format("the predicate of '{}' must be 'bool', found {}", which,
                                      quote_type(predicate.type)));
    ok = false;
  }
  if (!ok || count.type == Type::Error || predicate.type == Type::Error) return {};
  expr.type = Type::Bool;
  // Constant only when the predicate does not use the variable; then it is the predicate,
  // or the empty case when N is 0.
  Folded::State state = combine(count_value.state, predicate_value.state);
  if (state != Folded::State::Known) return {state, {}};
  if (count_value.value.i == 0) return Folded::known(Value::of_bool(expr.reduce_all));
  return predicate_value;
}

// Depth-first search over the references between masks, scores and consts, with an explicit
// stack (a chain of thousands of declarations must not exhaust the C++ stack). Each back
// edge closes one cycle, reported once. A mask only refers to masks (and consts), a score to
// scores (masks, consts), a const to consts, so each cycle is of one kind.
void Checker::check_cycles() {
  enum class Mark : uint8_t { Unvisited, OnPath, Done };
  std::vector<Mark> marks(module_.decls.size(), Mark::Unvisited);
  for (std::vector<int>& refs : refs_) {
    std::sort(refs.begin(), refs.end());
    refs.erase(std::unique(refs.begin(), refs.end()), refs.end());
  }
  for (size_t root = 0; root < module_.decls.size(); ++root) {
    if (marks[root] != Mark::Unvisited || refs_[root].empty()) continue;
    std::vector<int> path = {static_cast<int>(root)};
    std::vector<size_t> next_ref = {0};
    marks[root] = Mark::OnPath;
    while (!path.empty()) {
      int node = path.back();
      if (next_ref.back() == refs_[node].size()) {
        marks[node] = Mark::Done;
        path.pop_back();
        next_ref.pop_back();
        continue;
      }
      int target = refs_[node][next_ref.back()++];
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
  const Decl& decl = module_.decls[target];
  const char* kind = decl.kind == DeclKind::Mask    ? "masks"
                     : decl.kind == DeclKind::Score ? "scores"
                                                    : "consts";
  std::vector<int> cycle(start, path.end());
  cycle.push_back(target);
  std::string message = fmt::format("cycle among {}: ", kind);
  size_t keep = kMaxCyclePathNames / 2;
  for (size_t i = 0; i < cycle.size(); ++i) {
    if (cycle.size() > kMaxCyclePathNames && i == keep) {
      message += fmt::format("... ({} more) -> ", cycle.size() - 2 * keep);
      i = cycle.size() - keep;
    }
    message += quote(module_.decls[cycle[i]].name);
    if (i + 1 < cycle.size()) message += " -> ";
  }
  error(decl.name_span, std::move(message));
}

void Checker::warn_unused_params() {
  // A body lost to a syntax error may have used any parameter: saying nothing beats a
  // false warning.
  for (const Decl& decl : module_.decls) {
    bool has_body =
        decl.kind == DeclKind::Const || decl.kind == DeclKind::Mask || decl.kind == DeclKind::Score;
    if (has_body && !decl.value) return;
  }
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
