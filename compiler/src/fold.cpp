// Constant folding. Only rewrites that hold for every value of the non-constant operands, so
// the folded expression means exactly what the original did.
#include <array>
#include <unordered_map>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/semantics.h"

namespace flexjit::ir {

namespace {

// The value of a constant (Bool as 0 or 1), or nullopt.
std::optional<int32_t> constant_value(const Expr& e) {
  if (const IntImm* number = e.as<IntImm>()) return number->value;
  if (const BoolImm* truth = e.as<BoolImm>()) return truth->value ? 1 : 0;
  return std::nullopt;
}

Expr make_constant(Type type, int32_t value) {
  return type == Type::Bool ? BoolImm::make(value != 0) : IntImm::make(value);
}

// `e` with its operands already folded, folded once more at the top.
Expr fold_node(const Expr& e) {
  const int count = operand_count(e.kind());
  if (count == 0) return e;

  std::array<int32_t, 3> values{};
  bool all_constant = true;
  for (int i = 0; i < count; ++i) {
    const std::optional<int32_t> value = constant_value(operand(e, i));
    all_constant = all_constant && value.has_value();
    if (value) values[i] = *value;
  }
  if (all_constant) {
    return make_constant(e.type(),
                         apply_operation(e.kind(), std::span<const int32_t>(values.data(), count)));
  }

  switch (e.kind()) {
    case ExprKind::And:
    case ExprKind::Or: {
      const auto* node = static_cast<const BinaryNode*>(e.get());
      // The constant that decides the result on its own: false for &&, true for ||.
      const int32_t absorbing = e.kind() == ExprKind::Or ? 1 : 0;
      for (const Expr* side : {&node->a, &node->b}) {
        const std::optional<int32_t> value = constant_value(*side);
        if (!value) continue;
        if (*value == absorbing) return *side;
        return side == &node->a ? node->b : node->a;  // the neutral constant drops out
      }
      return e;
    }
    case ExprKind::Not:
      if (const Not* inner = e.as<Not>()->a.as<Not>()) return inner->a;
      return e;
    case ExprKind::Select: {
      const Select* select = e.as<Select>();
      if (const std::optional<int32_t> condition = constant_value(select->condition)) {
        return *condition != 0 ? select->true_value : select->false_value;
      }
      return e;
    }
    default:
      return e;
  }
}

class ConstantFolder : public IRMutator {
 public:
  // Memoized by node, so that a node shared by several parents is folded once and the
  // results stay shared (lowering shares every inlined mask).
  Expr mutate(const Expr& e) override {
    if (!e.defined()) return e;
    const auto found = folded_.find(e.get());
    if (found != folded_.end()) return found->second;
    Expr result = fold_node(IRMutator::mutate(e));
    folded_.emplace(e.get(), result);
    return result;
  }

 private:
  // Keys point into the expression being folded, which the caller keeps alive.
  std::unordered_map<const ExprNode*, Expr> folded_;
};

}  // namespace

Expr fold_constants(const Expr& e) {
  ConstantFolder folder;
  return folder.mutate(e);
}

}  // namespace flexjit::ir
