// Lowering a checked AST to IR: masks, scores and constants are inlined, params become slots,
// `any`/`all` are unrolled, and mixed Int/Float operands get explicit conversions.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "flexjit/compiler/mask.h"

namespace flexjit {

namespace {

std::optional<ir::Type> ir_type(dsl::Type type) {
  switch (type) {
    case dsl::Type::Bool:
      return ir::Type::Bool;
    case dsl::Type::Int:
      return ir::Type::Int;
    case dsl::Type::Float:
      return ir::Type::Float;
    case dsl::Type::Error:
      return std::nullopt;
  }
  return std::nullopt;
}

// The IR node of a binary operator (its row of FJ_FOR_EACH_OPERATION).
ir::ExprKind binary_kind(dsl::BinaryOp op) {
  switch (op) {
#define FJ_BINARY_KIND(name, node, arity, typing, syntax, spelling, ...) \
  case dsl::BinaryOp::name:                                              \
    return ir::ExprKind::node;
    FJ_FOR_EACH_SOURCE(BINARY, FJ_BINARY_KIND)
#undef FJ_BINARY_KIND
  }
  return ir::ExprKind::Add;
}

// The IR node of a unary operator (its row of FJ_FOR_EACH_OPERATION).
ir::ExprKind unary_kind(dsl::UnaryOp op) {
  switch (op) {
#define FJ_UNARY_KIND(name, node, arity, typing, syntax, spelling, ...) \
  case dsl::UnaryOp::name:                                              \
    return ir::ExprKind::node;
    FJ_FOR_EACH_SOURCE(UNARY, FJ_UNARY_KIND)
#undef FJ_UNARY_KIND
  }
  return ir::ExprKind::Neg;
}

// The IR node of a one-operand builtin that maps to a node of its own (a Math row).
std::optional<ir::ExprKind> math_kind(dsl::Function function) {
  switch (function) {
#define FJ_MATH_KIND(name, node, arity, typing, ...)                         \
  case dsl::Function::name:                                                  \
    if (ops::Typing::typing == ops::Typing::Math) return ir::ExprKind::node; \
    return std::nullopt;
    FJ_FOR_EACH_SOURCE(CALL, FJ_MATH_KIND)
#undef FJ_MATH_KIND
    default:
      return std::nullopt;
  }
}

bool is_number(ir::Type type) {
  return type == ir::Type::Int || type == ir::Type::Float;
}

// `e` as a Float: Int and Bool operands are converted, Floats pass through.
ir::Expr to_float(ir::Expr e) {
  return e.type() == ir::Type::Float ? e : ir::ToFloat::make(std::move(e));
}

// Converts both numbers to Float when either is one (the language's only implicit promotion).
void promote_pair(ir::Expr& a, ir::Expr& b) {
  if (!is_number(a.type()) || !is_number(b.type()) || a.type() == b.type()) return;
  a = to_float(std::move(a));
  b = to_float(std::move(b));
}

// Replaces Var(Score) by an argument: a score called as `softcap(x)` is its body with `x`
// for `score`.
class ScoreSubstitution : public ir::IRMutator {
 public:
  explicit ScoreSubstitution(ir::Expr argument) : argument_(std::move(argument)) {}
  using ir::IRMutator::mutate;

 protected:
  using ir::IRMutator::visit;
  ir::Expr visit(const ir::Var* op) override {
    if (op->variable == ir::Variable::Score) return argument_;
    return ir::Expr(op);
  }

 private:
  ir::Expr argument_;
};

class Lowerer {
 public:
  Lowerer(const dsl::Module& module, const VariantSelection& selection)
      : module_(module),
        selection_(selection),
        scalar_slots_(module.decls.size(), -1),
        array_slots_(module.decls.size(), -1),
        lowered_(module.decls.size()),
        in_progress_(module.decls.size(), false) {}

  // Assigns slots to the module's params in declaration order, scalars and arrays apart.
  std::optional<Error> number_params(Variant& variant) {
    for (size_t i = 0; i < module_.decls.size(); ++i) {
      const dsl::Decl& decl = module_.decls[i];
      if (decl.kind != dsl::DeclKind::Param) continue;
      if (!ir_type(decl.declared_type)) return error_at(decl.span, "the module has errors");
      std::vector<RuntimeParam>& list = decl.is_array() ? variant.arrays : variant.scalars;
      const int limit = decl.is_array() ? kMaxArrayParams : kMaxScalarParams;
      if (list.size() == static_cast<size_t>(limit)) {
        return error_at(decl.name_span,
                        fmt::format("too many runtime {} parameters: at most {} are supported",
                                    decl.is_array() ? "array" : "scalar", limit));
      }
      RuntimeParam param{decl.name, decl.declared_type, static_cast<int>(list.size()), {}};
      for (const dsl::ArrayDim& dim : decl.dims)
        param.dims.push_back(dim.name);
      (decl.is_array() ? array_slots_ : scalar_slots_)[i] = param.slot;
      list.push_back(std::move(param));
    }
    return std::nullopt;
  }

  // Checks every define names a const and parses as its type; records the constants.
  std::optional<Error> apply_defines(Variant& variant) {
    for (const auto& [name, text] : selection_.defines) {
      const int index = module_.find(name);
      if (index < 0 || module_.decls[index].kind != dsl::DeclKind::Const) {
        return Error{fmt::format("-D {}: the file declares no const named `{}`", name, name), ""};
      }
      Result<ir::Expr> value = parse_define(module_.decls[index], text);
      if (!value) return value.error();
      overrides_[index] = std::move(*value);
    }
    for (size_t i = 0; i < module_.decls.size(); ++i) {
      const dsl::Decl& decl = module_.decls[i];
      if (decl.kind != dsl::DeclKind::Const) continue;
      Result<ir::Expr> value = lower_decl(static_cast<int>(i), 0);
      if (!value) return value.error();
      variant.constants.push_back(
          {decl.name, decl.declared_type, ir::to_string(*value), overrides_.contains(i)});
    }
    return std::nullopt;
  }

  // The value of const, mask or score `index`, lowered once and shared by every use. A score's
  // value reads Var(Score) for its argument.
  Result<ir::Expr> lower_decl(int index, uint32_t depth) {
    if (!lowered_[index].defined()) {
      const dsl::Decl& decl = module_.decls[index];
      if (const auto found = overrides_.find(index); found != overrides_.end()) {
        lowered_[index] = found->second;
        return lowered_[index];
      }
      if (in_progress_[index]) return error_at(decl.name_span, "cycle among declarations");
      if (decl.value == nullptr) return error_at(decl.span, "the module has errors");
      in_progress_[index] = true;
      Result<ir::Expr> value = lower(*decl.value, depth);
      in_progress_[index] = false;
      if (!value) return value;
      ir::Expr result = std::move(*value);
      if (decl.kind == dsl::DeclKind::Score ||
          (decl.kind == dsl::DeclKind::Const && decl.declared_type == dsl::Type::Float)) {
        result = to_float(std::move(result));
      }
      if (decl.kind == dsl::DeclKind::Const) {
        result = ir::fold_constants(result);
        if (ir::operand_count(result.kind()) != 0) {
          return error_at(decl.span,
                          fmt::format("const `{}` does not fold to a constant", decl.name));
        }
      }
      const std::optional<ir::Type> declared = decl.kind == dsl::DeclKind::Mask ? ir::Type::Bool
                                               : decl.kind == dsl::DeclKind::Score
                                                   ? ir::Type::Float
                                                   : ir_type(decl.declared_type);
      if (declared != result.type()) {
        return error_at(decl.span, fmt::format("`{}` is declared {} but its value is {}", decl.name,
                                               dsl::type_name(decl.declared_type),
                                               ir::type_name(result.type())));
      }
      lowered_[index] = std::move(result);
    }
    return lowered_[index];
  }

 private:
  Result<ir::Expr> parse_define(const dsl::Decl& decl, const std::string& text) const {
    const auto bad = [&](std::string_view want) {
      return Error{fmt::format("-D {}={}: `{}` is a {} const; expected {}", decl.name, text,
                               decl.name, dsl::type_name(decl.declared_type), want),
                   ""};
    };
    const char* begin = text.data();
    const char* end = text.data() + text.size();
    switch (decl.declared_type) {
      case dsl::Type::Bool:
        if (text == "true" || text == "false") return ir::BoolImm::make(text == "true");
        return bad("true or false");
      case dsl::Type::Int: {
        int32_t value = 0;
        const auto [stop, status] = std::from_chars(begin, end, value);
        if (text.empty() || status != std::errc() || stop != end) {
          return bad("a decimal int32 such as 4096");
        }
        return ir::IntImm::make(value);
      }
      case dsl::Type::Float: {
        float value = 0.0f;
        const auto [stop, status] = std::from_chars(begin, end, value);
        if (text.empty() || status != std::errc() || stop != end || !std::isfinite(value)) {
          return bad("a finite number such as 30 or 0.5");
        }
        return ir::FloatImm::make(value);
      }
      case dsl::Type::Error:
        break;
    }
    return Error{"the module has errors", ""};
  }

  Result<ir::Expr> lower(const dsl::Expr& e, uint32_t depth) {
    // Bounds this recursion (which also follows references into other declarations) on
    // adversarial input.
    if (depth > ir::kMaxExprDepth) return too_large(e.span);
    if (e.type == dsl::Type::Error) return error_at(e.span, "the module has errors");

    Result<ir::Expr> result = lower_node(e, depth);
    if (!result) return result;
    const ir::Expr& lowered = *result;
    if (lowered->depth > ir::kMaxExprDepth || lowered->tree_size > ir::kMaxExprTreeSize) {
      return too_large(e.span);
    }
    if (ir_type(e.type) != lowered.type()) {
      return error_at(e.span, "the module has errors (checked type disagrees with the IR)");
    }
    return result;
  }

  Result<ir::Expr> lower_node(const dsl::Expr& e, uint32_t depth) {
    switch (e.kind) {
      case dsl::Expr::Kind::IntLit:
        if (e.int_value < std::numeric_limits<int32_t>::min() ||
            e.int_value > std::numeric_limits<int32_t>::max()) {
          return error_at(e.span, "integer literal out of the int32 range");
        }
        return ir::IntImm::make(static_cast<int32_t>(e.int_value));
      case dsl::Expr::Kind::FloatLit: {
        const float value = static_cast<float>(e.float_value);
        if (!std::isfinite(value))
          return error_at(e.span, "float literal out of the float32 range");
        return ir::FloatImm::make(value);
      }
      case dsl::Expr::Kind::BoolLit:
        return ir::BoolImm::make(e.int_value != 0);
      case dsl::Expr::Kind::Name:
        return lower_name(e, depth);
      case dsl::Expr::Kind::Unary: {
        Result<std::vector<ir::Expr>> operands = lower_args(e, 1, depth);
        if (!operands) return operands.error();
        return build(e, unary_kind(e.unary_op), dsl::op_spelling(e.unary_op), *operands);
      }
      case dsl::Expr::Kind::Binary: {
        Result<std::vector<ir::Expr>> operands = lower_args(e, 2, depth);
        if (!operands) return operands.error();
        promote_pair((*operands)[0], (*operands)[1]);
        if (auto error = check_divisor(e, (*operands)[1])) return *error;
        return build(e, binary_kind(e.binary_op), dsl::op_spelling(e.binary_op), *operands);
      }
      case dsl::Expr::Kind::Conditional: {
        Result<std::vector<ir::Expr>> operands = lower_args(e, 3, depth);
        if (!operands) return operands.error();
        promote_pair((*operands)[1], (*operands)[2]);
        return build(e, ir::ExprKind::Select, "?:", *operands);
      }
      case dsl::Expr::Kind::Call:
        if (e.ref_kind == dsl::RefKind::Score) return lower_score_call(e, depth);
        return lower_builtin_call(e, depth);
      case dsl::Expr::Kind::Index:
        return lower_index(e, depth);
      case dsl::Expr::Kind::Reduce:
        return lower_reduce(e, depth);
    }
    return error_at(e.span, "the module has errors");
  }

  // The checker rejects a divisor that is constant zero in the source; a -D override can make
  // one (`-D chunk=0` in `q / chunk`), which is rejected here alike.
  std::optional<Error> check_divisor(const dsl::Expr& e, const ir::Expr& divisor) const {
    if (overrides_.empty() ||
        (e.binary_op != dsl::BinaryOp::Div && e.binary_op != dsl::BinaryOp::Mod)) {
      return std::nullopt;
    }
    const ir::Expr folded = ir::fold_constants(divisor);
    const ir::IntImm* int_value = folded.as<ir::IntImm>();
    const ir::FloatImm* float_value = folded.as<ir::FloatImm>();
    if ((int_value != nullptr && int_value->value == 0) ||
        (float_value != nullptr && float_value->value == 0.0f)) {
      return error_at(e.args[1]->span,
                      fmt::format("constant {} by zero with the -D overrides given",
                                  e.binary_op == dsl::BinaryOp::Div ? "division" : "modulo"));
    }
    return std::nullopt;
  }

  Result<std::vector<ir::Expr>> lower_args(const dsl::Expr& e, size_t count, uint32_t depth) {
    if (e.args.size() != count) {
      return error_at(e.span, fmt::format("expected {} operand(s), got {}", count, e.args.size()));
    }
    std::vector<ir::Expr> operands;
    for (const dsl::ExprPtr& arg : e.args) {
      if (arg == nullptr) return error_at(e.span, "the module has errors");
      Result<ir::Expr> operand = lower(*arg, depth + 1);
      if (!operand) return operand.error();
      operands.push_back(std::move(*operand));
    }
    return operands;
  }

  Result<ir::Expr> lower_name(const dsl::Expr& e, uint32_t depth) {
    if (e.ref_kind == dsl::RefKind::Local) {
      const auto found = locals_.find(e.binder);
      if (found == locals_.end()) return error_at(e.span, "the module has errors (unbound name)");
      return found->second;
    }
    if (e.ref_kind == dsl::RefKind::Builtin) {
      switch (e.ref_index) {
        case static_cast<int>(dsl::Builtin::B):
          return ir::Var::make(ir::Variable::B);
        case static_cast<int>(dsl::Builtin::H):
          return ir::Var::make(ir::Variable::H);
        case static_cast<int>(dsl::Builtin::Q):
          return ir::Var::make(ir::Variable::Q);
        case static_cast<int>(dsl::Builtin::KV):
          return ir::Var::make(ir::Variable::KV);
        case static_cast<int>(dsl::Builtin::Score):
          return ir::Var::make(ir::Variable::Score);
      }
      return error_at(e.span, "the module has errors (unresolved name)");
    }
    const dsl::Decl* decl = referenced_decl(e);
    if (decl == nullptr) return error_at(e.span, "the module has errors (unresolved name)");
    switch (e.ref_kind) {
      case dsl::RefKind::Param: {
        const int slot = scalar_slots_[e.ref_index];
        if (slot < 0) break;
        return ir::Param::make(*ir_type(decl->declared_type), slot, decl->name);
      }
      case dsl::RefKind::Const:
        if (decl->kind != dsl::DeclKind::Const) break;
        return lower_decl(e.ref_index, depth + 1);
      case dsl::RefKind::Mask:
        if (decl->kind != dsl::DeclKind::Mask) break;
        return lower_decl(e.ref_index, depth + 1);
      default:
        break;
    }
    return error_at(e.span, "the module has errors (unresolved name)");
  }

  // The declaration a Name, Call or Index refers to, or null.
  const dsl::Decl* referenced_decl(const dsl::Expr& e) const {
    if (e.ref_index < 0 || static_cast<size_t>(e.ref_index) >= module_.decls.size()) {
      return nullptr;
    }
    return &module_.decls[e.ref_index];
  }

  Result<ir::Expr> lower_score_call(const dsl::Expr& e, uint32_t depth) {
    const dsl::Decl* decl = referenced_decl(e);
    if (decl == nullptr || decl->kind != dsl::DeclKind::Score) {
      return error_at(e.span, "the module has errors (unresolved score)");
    }
    Result<std::vector<ir::Expr>> operands = lower_args(e, 1, depth);
    if (!operands) return operands.error();
    if (!is_number((*operands)[0].type())) {
      return error_at(e.span, fmt::format("score `{}` takes a number", decl->name));
    }
    Result<ir::Expr> body = lower_decl(e.ref_index, depth + 1);
    if (!body) return body;
    ScoreSubstitution substitution(to_float(std::move((*operands)[0])));
    return substitution.mutate(*body);
  }

  Result<ir::Expr> lower_builtin_call(const dsl::Expr& e, uint32_t depth) {
    Result<std::vector<ir::Expr>> lowered = lower_args(e, e.args.size(), depth);
    if (!lowered) return lowered.error();
    std::vector<ir::Expr>& args = *lowered;
    const auto function = static_cast<dsl::Function>(e.ref_index);
    const char* spelling = dsl::function_name(function);
    const auto arity = [&](size_t count) -> std::optional<Error> {
      if (args.size() == count) return std::nullopt;
      return error_at(
          e.span, fmt::format("`{}` takes {} operand(s), got {}", spelling, count, args.size()));
    };
    if (const std::optional<ir::ExprKind> kind = math_kind(function)) {
      if (auto error = arity(1)) return *error;
      if (!is_number(args[0].type())) return error_at(e.span, "the module has errors");
      args[0] = to_float(std::move(args[0]));
      return build(e, *kind, spelling, args);
    }
    switch (function) {
      case dsl::Function::Min:
      case dsl::Function::Max:
        if (auto error = arity(2)) return *error;
        promote_pair(args[0], args[1]);
        return build(e, function == dsl::Function::Min ? ir::ExprKind::Min : ir::ExprKind::Max,
                     spelling, args);
      case dsl::Function::Abs:
        if (auto error = arity(1)) return *error;
        return build(e, ir::ExprKind::Abs, spelling, args);
      case dsl::Function::Clamp: {
        // clamp(x, lo, hi) == min(max(x, lo), hi), in the common type of the three.
        if (auto error = arity(3)) return *error;
        if (args[0].type() == ir::Type::Float || args[1].type() == ir::Type::Float ||
            args[2].type() == ir::Type::Float) {
          for (ir::Expr& arg : args) {
            if (!is_number(arg.type())) return error_at(e.span, "the module has errors");
            arg = to_float(std::move(arg));
          }
        }
        std::vector<ir::Expr> lower_bound = {args[0], args[1]};
        Result<ir::Expr> clamped_low = build(e, ir::ExprKind::Max, spelling, lower_bound);
        if (!clamped_low) return clamped_low;
        std::vector<ir::Expr> upper_bound = {*clamped_low, args[2]};
        return build(e, ir::ExprKind::Min, spelling, upper_bound);
      }
      case dsl::Function::Where:
        if (auto error = arity(3)) return *error;
        promote_pair(args[1], args[2]);
        return build(e, ir::ExprKind::Select, spelling, args);
      case dsl::Function::Int:
        if (auto error = arity(1)) return *error;
        if (args[0].type() == ir::Type::Int) return args[0];
        return build(e, ir::ExprKind::ToInt, spelling, args);
      case dsl::Function::Float:
        if (auto error = arity(1)) return *error;
        return to_float(std::move(args[0]));
      default:
        break;
    }
    return error_at(e.span, fmt::format("unknown function `{}`", e.name));
  }

  Result<ir::Expr> lower_index(const dsl::Expr& e, uint32_t depth) {
    const dsl::Decl* decl = referenced_decl(e);
    if (decl == nullptr || e.ref_kind != dsl::RefKind::Param || !decl->is_array() ||
        array_slots_[e.ref_index] < 0) {
      return error_at(e.span, "the module has errors (unresolved array)");
    }
    Result<std::vector<ir::Expr>> indices = lower_args(e, decl->dims.size(), depth);
    if (!indices) return indices.error();
    for (const ir::Expr& index : *indices) {
      if (index.type() != ir::Type::Int) return error_at(e.span, "the module has errors");
    }
    const int rank = static_cast<int>(decl->dims.size());
    if (rank != 1 && rank != 2) return error_at(e.span, "the module has errors");
    const std::optional<ir::Type> type = ir_type(decl->declared_type);
    if (type != ir::Type::Int && type != ir::Type::Float) {
      return error_at(e.span, "the module has errors");
    }
    ir::Expr col = rank == 2 ? (*indices)[1] : ir::IntImm::make(0);
    return ir::Load::make(*type, array_slots_[e.ref_index], decl->name, rank, (*indices)[0],
                          std::move(col));
  }

  // any(i < n: p) unrolls to p[0/i] || ... || p[n-1/i]; all(...) to the conjunction.
  Result<ir::Expr> lower_reduce(const dsl::Expr& e, uint32_t depth) {
    if (e.args.size() != 2 || e.args[0] == nullptr || e.args[1] == nullptr) {
      return error_at(e.span, "the module has errors");
    }
    Result<ir::Expr> count = lower(*e.args[0], depth + 1);
    if (!count) return count;
    const ir::Expr folded = ir::fold_constants(*count);  // keeps the node `constant` points to
    const ir::IntImm* constant = folded.as<ir::IntImm>();
    if (constant == nullptr || constant->value < 0 || constant->value > dsl::kMaxReduceCount) {
      return error_at(e.args[0]->span, "the module has errors (bad reduction count)");
    }
    ir::Expr result = ir::BoolImm::make(e.reduce_all);
    for (int32_t i = 0; i < constant->value; ++i) {
      locals_[&e] = ir::IntImm::make(i);
      Result<ir::Expr> term = lower(*e.args[1], depth + 1);
      if (!term) return term;
      if (term->type() != ir::Type::Bool) return error_at(e.span, "the module has errors");
      result = i == 0         ? *term
               : e.reduce_all ? ir::And::make(std::move(result), std::move(*term))
                              : ir::Or::make(std::move(result), std::move(*term));
      if (result->depth > ir::kMaxExprDepth || result->tree_size > ir::kMaxExprTreeSize) {
        return too_large(e.span);
      }
    }
    locals_.erase(&e);
    return result;
  }

  // The node of `kind` over `operands`, after checking the IR's typing rules.
  Result<ir::Expr> build(const dsl::Expr& e, ir::ExprKind kind, std::string_view spelling,
                         std::span<const ir::Expr> operands) {
    std::vector<ir::Type> types;
    for (const ir::Expr& operand : operands)
      types.push_back(operand.type());
    if (static_cast<int>(operands.size()) != ir::operand_count(kind) ||
        !ir::result_type(kind, types)) {
      std::string type_list;
      for (const ir::Type type : types) {
        type_list += fmt::format("{}{}", type_list.empty() ? "" : " and ", ir::type_name(type));
      }
      return error_at(e.span, fmt::format("`{}` does not apply to {}", spelling, type_list));
    }
    return ir::make_operation(kind, operands);
  }

  Error too_large(dsl::Span span) const {
    return error_at(span, fmt::format("expression too large after inlining (more than {} "
                                      "levels deep or {} nodes)",
                                      ir::kMaxExprDepth, ir::kMaxExprTreeSize));
  }

  Error error_at(dsl::Span span, std::string_view message) const {
    const dsl::LineCol position = dsl::line_col(module_.source.text, span.offset);
    return Error{
        fmt::format("{}:{}:{}: {}", module_.source.name, position.line, position.column, message),
        ""};
  }

  const dsl::Module& module_;
  const VariantSelection& selection_;
  std::vector<int> scalar_slots_;  // by declaration index; -1 for anything else
  std::vector<int> array_slots_;   // by declaration index; -1 for anything else
  std::vector<ir::Expr> lowered_;  // by declaration index: lowered consts, masks and scores
  std::vector<bool> in_progress_;  // by declaration index: being lowered (cycle guard)
  std::unordered_map<size_t, ir::Expr> overrides_;         // by declaration index: -D values
  std::unordered_map<const dsl::Expr*, ir::Expr> locals_;  // any/all variables being unrolled
};

}  // namespace

Result<Variant> lower_variant(const dsl::Module& module, const VariantSelection& selection) {
  const int index = module.find(selection.name);
  if (index < 0) return Error{fmt::format("no mask or variant named `{}`", selection.name), ""};
  const dsl::Decl& decl = module.decls[index];

  Variant variant;
  int mask_index = -1;
  int score_index = -1;
  if (decl.kind == dsl::DeclKind::Variant) {
    if (!selection.score.empty()) {
      return Error{fmt::format("`{}` is a variant, which names its own score; give a mask to "
                               "pair with score `{}`",
                               selection.name, selection.score),
                   ""};
    }
    mask_index = decl.variant_mask_index;
    score_index = decl.variant_score_index;
    if (mask_index < 0 || (!decl.variant_score.empty() && score_index < 0)) {
      return Error{"the module has errors (unresolved variant)", ""};
    }
    variant.name = decl.name;
  } else if (decl.kind == dsl::DeclKind::Mask) {
    mask_index = index;
    variant.name = decl.name;
    if (!selection.score.empty()) {
      score_index = module.find(selection.score);
      if (score_index < 0) return Error{fmt::format("no score named `{}`", selection.score), ""};
      if (module.decls[score_index].kind != dsl::DeclKind::Score) {
        return Error{fmt::format("`{}` is a {}, not a score", selection.score,
                                 dsl::decl_kind_name(module.decls[score_index].kind)),
                     ""};
      }
      variant.name += "_" + selection.score;
    }
  } else {
    return Error{fmt::format("`{}` is a {}, not a mask or a variant", selection.name,
                             dsl::decl_kind_name(decl.kind)),
                 ""};
  }
  const bool checked_kinds =
      module.decls[mask_index].kind == dsl::DeclKind::Mask &&
      (score_index < 0 || module.decls[score_index].kind == dsl::DeclKind::Score);
  if (!checked_kinds) return Error{"the module has errors (variant kinds)", ""};

  Lowerer lowerer(module, selection);
  if (std::optional<Error> error = lowerer.number_params(variant)) return *error;
  if (std::optional<Error> error = lowerer.apply_defines(variant)) return *error;

  variant.mask_name = module.decls[mask_index].name;
  Result<ir::Expr> mask = lowerer.lower_decl(mask_index, 0);
  if (!mask) return mask.error();
  variant.mask = selection.optimize ? ir::run_passes(*mask) : *mask;
  if (score_index >= 0) {
    variant.score_name = module.decls[score_index].name;
    Result<ir::Expr> score = lowerer.lower_decl(score_index, 0);
    if (!score) return score.error();
    variant.score = selection.optimize ? ir::run_passes(*score) : *score;
  }
  variant.uses_head = ir::uses_variable(variant.mask, ir::Variable::H);
  return variant;
}

Result<Variant> lower_mask(const dsl::Module& module, std::string_view name) {
  VariantSelection selection;
  selection.name = std::string(name);
  return lower_variant(module, selection);
}

}  // namespace flexjit
