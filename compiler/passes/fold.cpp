// Constant folding. Only rewrites that hold for every value of the non-constant operands, so
// the folded expression means exactly what the original did.
#include <array>
#include <unordered_map>

#include "passes.h"

namespace flexjit::ir {

namespace detail {

std::optional<Value> constant_value(const Expr& e) {
  if (const IntImm* number = e.as<IntImm>()) return Value::of_int(number->value);
  if (const FloatImm* number = e.as<FloatImm>()) return Value::of_float(number->value);
  if (const BoolImm* truth = e.as<BoolImm>()) return Value::of_bool(truth->value);
  return std::nullopt;
}

Expr make_constant(Type type, const Value& value) {
  switch (type) {
    case Type::Bool:
      return BoolImm::make(value.i != 0);
    case Type::Int:
      return IntImm::make(value.i);
    case Type::Float:
      return FloatImm::make(value.f);
  }
  return Expr();
}

Expr fold_node(const Expr& e) {
  const int count = operand_count(e.kind());
  // A Load reads runtime memory: never a constant, whatever its indices.
  if (count == 0 || e.kind() == ExprKind::Load) return e;

  std::array<Value, 3> values{};
  std::array<Type, 3> types{};
  bool all_constant = true;
  for (int i = 0; i < count; ++i) {
    const std::optional<Value> value = constant_value(operand(e, i));
    all_constant = all_constant && value.has_value();
    if (value) values[i] = *value;
    types[i] = operand(e, i).type();
  }
  if (all_constant) {
    return make_constant(e.type(),
                         apply_operation(e.kind(), std::span<const Type>(types.data(), count),
                                         std::span<const Value>(values.data(), count)));
  }

  switch (e.kind()) {
    case ExprKind::And:
    case ExprKind::Or: {
      const auto* node = static_cast<const BinaryNode*>(e.get());
      // The constant that decides the result on its own: false for &&, true for ||.
      const int32_t absorbing = e.kind() == ExprKind::Or ? 1 : 0;
      for (const Expr* side : {&node->a, &node->b}) {
        const std::optional<Value> value = constant_value(*side);
        if (!value) continue;
        if (value->i == absorbing) return *side;
        return side == &node->a ? node->b : node->a;  // the neutral constant drops out
      }
      return e;
    }
    case ExprKind::Not:
      if (const Not* inner = e.as<Not>()->a.as<Not>()) return inner->a;
      return e;
    case ExprKind::Select: {
      const Select* select = e.as<Select>();
      if (const std::optional<Value> condition = constant_value(select->condition)) {
        return condition->i != 0 ? select->true_value : select->false_value;
      }
      return e;
    }
    default:
      return e;
  }
}

}  // namespace detail

namespace {

class ConstantFolder : public IRMutator {
 public:
  // Memoized by node, so that a node shared by several parents is folded once and the
  // results stay shared (lowering shares every inlined mask).
  Expr mutate(const Expr& e) override {
    if (!e.defined()) return e;
    const auto found = folded_.find(e.get());
    if (found != folded_.end()) return found->second;
    Expr result = detail::fold_node(IRMutator::mutate(e));
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
