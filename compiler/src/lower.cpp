// Lowering a checked AST to IR: masks and constants are inlined, params become slots.
#include <fmt/format.h>

#include <limits>
#include <optional>
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
    case dsl::Type::Error:
      return std::nullopt;
  }
  return std::nullopt;
}

ir::ExprKind binary_kind(dsl::BinaryOp op) {
  switch (op) {
    case dsl::BinaryOp::Add:
      return ir::ExprKind::Add;
    case dsl::BinaryOp::Sub:
      return ir::ExprKind::Sub;
    case dsl::BinaryOp::Mul:
      return ir::ExprKind::Mul;
    case dsl::BinaryOp::Div:
      return ir::ExprKind::Div;
    case dsl::BinaryOp::Mod:
      return ir::ExprKind::Mod;
    case dsl::BinaryOp::Lt:
      return ir::ExprKind::LT;
    case dsl::BinaryOp::Le:
      return ir::ExprKind::LE;
    case dsl::BinaryOp::Gt:
      return ir::ExprKind::GT;
    case dsl::BinaryOp::Ge:
      return ir::ExprKind::GE;
    case dsl::BinaryOp::Eq:
      return ir::ExprKind::EQ;
    case dsl::BinaryOp::Ne:
      return ir::ExprKind::NE;
    case dsl::BinaryOp::And:
      return ir::ExprKind::And;
    case dsl::BinaryOp::Or:
      return ir::ExprKind::Or;
  }
  return ir::ExprKind::Add;
}

class Lowerer {
 public:
  explicit Lowerer(const dsl::Module& module)
      : module_(module),
        param_slots_(module.decls.size(), -1),
        lowered_(module.decls.size()),
        in_progress_(module.decls.size(), false) {}

  // Assigns slots to the module's params in declaration order.
  std::optional<Error> number_params(std::vector<RuntimeParam>& params) {
    for (size_t i = 0; i < module_.decls.size(); ++i) {
      const dsl::Decl& decl = module_.decls[i];
      if (decl.kind != dsl::DeclKind::Param) continue;
      if (!ir_type(decl.declared_type)) return error_at(decl.span, "the module has errors");
      if (params.size() == static_cast<size_t>(kMaxScalarParams)) {
        return error_at(
            decl.name_span,
            fmt::format("too many runtime parameters: at most {} are supported", kMaxScalarParams));
      }
      param_slots_[i] = static_cast<int>(params.size());
      params.push_back({decl.name, decl.declared_type, static_cast<int>(params.size())});
    }
    return std::nullopt;
  }

  // The value of const or mask `index`, lowered once and shared by every use.
  Result<ir::Expr> lower_decl(int index, uint32_t depth) {
    if (!lowered_[index].defined()) {
      const dsl::Decl& decl = module_.decls[index];
      if (in_progress_[index]) return error_at(decl.name_span, "cycle among declarations");
      if (decl.value == nullptr) return error_at(decl.span, "the module has errors");
      in_progress_[index] = true;
      Result<ir::Expr> value = lower(*decl.value, depth);
      in_progress_[index] = false;
      if (!value) return value;
      // A mask is boolean whatever its declared_type says.
      const std::optional<ir::Type> declared =
          decl.kind == dsl::DeclKind::Mask ? ir::Type::Bool : ir_type(decl.declared_type);
      if (declared != value->type()) {
        return error_at(decl.span, fmt::format("`{}` is declared {} but its value is {}", decl.name,
                                               dsl::type_name(decl.declared_type),
                                               ir::type_name(value->type())));
      }
      lowered_[index] = std::move(*value);
    }
    return lowered_[index];
  }

 private:
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
      case dsl::Expr::Kind::BoolLit:
        return ir::BoolImm::make(e.int_value != 0);
      case dsl::Expr::Kind::Name:
        return lower_name(e, depth);
      case dsl::Expr::Kind::Unary:
        return lower_operation(
            e, e.unary_op == dsl::UnaryOp::Neg ? ir::ExprKind::Neg : ir::ExprKind::Not,
            dsl::op_spelling(e.unary_op), depth);
      case dsl::Expr::Kind::Binary:
        return lower_operation(e, binary_kind(e.binary_op), dsl::op_spelling(e.binary_op), depth);
      case dsl::Expr::Kind::Call:
        if (e.name == "abs") return lower_operation(e, ir::ExprKind::Abs, "abs", depth);
        if (e.name == "min") return lower_operation(e, ir::ExprKind::Min, "min", depth);
        if (e.name == "max") return lower_operation(e, ir::ExprKind::Max, "max", depth);
        return error_at(e.span, fmt::format("unknown function `{}`", e.name));
    }
    return error_at(e.span, "the module has errors");
  }

  Result<ir::Expr> lower_name(const dsl::Expr& e, uint32_t depth) {
    const bool is_decl = e.ref_kind == dsl::RefKind::Param || e.ref_kind == dsl::RefKind::Const ||
                         e.ref_kind == dsl::RefKind::Mask;
    if (is_decl && (e.ref_index < 0 || static_cast<size_t>(e.ref_index) >= module_.decls.size())) {
      return error_at(e.span, "the module has errors (unresolved name)");
    }
    switch (e.ref_kind) {
      case dsl::RefKind::Builtin:
        switch (e.ref_index) {
          case static_cast<int>(dsl::Builtin::B):
            return ir::Var::make(ir::Variable::B);
          case static_cast<int>(dsl::Builtin::H):
            return ir::Var::make(ir::Variable::H);
          case static_cast<int>(dsl::Builtin::Q):
            return ir::Var::make(ir::Variable::Q);
          case static_cast<int>(dsl::Builtin::KV):
            return ir::Var::make(ir::Variable::KV);
        }
        break;
      case dsl::RefKind::Param: {
        const int slot = param_slots_[e.ref_index];
        if (slot < 0) break;
        const dsl::Decl& decl = module_.decls[e.ref_index];
        return ir::Param::make(*ir_type(decl.declared_type), slot, decl.name);
      }
      case dsl::RefKind::Const:
      case dsl::RefKind::Mask: {
        const dsl::DeclKind expected =
            e.ref_kind == dsl::RefKind::Const ? dsl::DeclKind::Const : dsl::DeclKind::Mask;
        if (module_.decls[e.ref_index].kind != expected) break;
        return lower_decl(e.ref_index, depth + 1);
      }
      case dsl::RefKind::Unresolved:
        break;
    }
    return error_at(e.span, "the module has errors (unresolved name)");
  }

  Result<ir::Expr> lower_operation(const dsl::Expr& e, ir::ExprKind kind, std::string_view spelling,
                                   uint32_t depth) {
    if (static_cast<int>(e.args.size()) != ir::operand_count(kind)) {
      return error_at(e.span, fmt::format("`{}` takes {} operand(s), got {}", spelling,
                                          ir::operand_count(kind), e.args.size()));
    }
    std::vector<ir::Expr> operands;
    std::vector<ir::Type> types;
    for (const dsl::ExprPtr& arg : e.args) {
      if (arg == nullptr) return error_at(e.span, "the module has errors");
      Result<ir::Expr> operand = lower(*arg, depth + 1);
      if (!operand) return operand;
      types.push_back(operand->type());
      operands.push_back(std::move(*operand));
    }
    if (!ir::result_type(kind, types)) {
      std::string type_list;
      for (const ir::Type type : types) {
        type_list += fmt::format("{}{}", type_list.empty() ? "" : " and ", ir::type_name(type));
      }
      return error_at(e.span, fmt::format("`{}` does not apply to {}", spelling, type_list));
    }
    return ir::make_operation(kind, operands);
  }

  Error too_large(dsl::Span span) const {
    return error_at(span, fmt::format("expression too large after inlining masks (more than {} "
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
  std::vector<int> param_slots_;   // by declaration index; -1 for non-params
  std::vector<ir::Expr> lowered_;  // by declaration index: lowered consts and masks
  std::vector<bool> in_progress_;  // by declaration index: being lowered (cycle guard)
};

}  // namespace

Result<MaskFunction> lower_mask(const dsl::Module& module, std::string_view name) {
  const int index = module.find(name);
  if (index < 0) return Error{fmt::format("no mask named `{}`", name), ""};
  const dsl::Decl& decl = module.decls[index];
  if (decl.kind != dsl::DeclKind::Mask) {
    return Error{fmt::format("`{}` is a {}, not a mask", name,
                             decl.kind == dsl::DeclKind::Param ? "param" : "const"),
                 ""};
  }

  MaskFunction mask;
  mask.name = decl.name;
  Lowerer lowerer(module);
  if (std::optional<Error> error = lowerer.number_params(mask.params)) return *error;
  Result<ir::Expr> body = lowerer.lower_decl(index, 0);
  if (!body) return body.error();
  mask.body = ir::fold_constants(*body);

  mask.uses_head = ir::uses_variable(mask.body, ir::Variable::H);
  return mask;
}

}  // namespace flexjit
