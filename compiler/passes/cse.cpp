// Common-subexpression elimination by hash-consing: every node is looked up in a table keyed
// by its kind, type, leaf value and the identities of its (already canonical) operands, so
// structurally equal subtrees end up as one node.
#include <array>
#include <string_view>
#include <unordered_map>

#include "passes.h"

namespace flexjit::ir {

namespace {

// What makes two nodes with canonical operands the same node.
struct NodeKey {
  ExprKind kind = ExprKind::IntImm;
  Type type = Type::Int;
  uint64_t leaf = 0;      // an immediate's value (a float's bits), a variable, a slot and rank
  std::string_view name;  // a Param's or Load's name, pointing into the canonical node
  std::array<const ExprNode*, 3> operands{};

  bool operator==(const NodeKey&) const = default;
};

struct NodeKeyHash {
  size_t operator()(const NodeKey& key) const {
    size_t hash = std::hash<std::string_view>()(key.name);
    const auto mix = [&hash](uint64_t value) {
      hash ^= std::hash<uint64_t>()(value) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
    };
    mix(static_cast<uint64_t>(key.kind) << 8 | static_cast<uint64_t>(key.type));
    mix(key.leaf);
    for (const ExprNode* operand : key.operands)
      mix(reinterpret_cast<uintptr_t>(operand));
    return hash;
  }
};

class HashConser {
 public:
  Expr canonical(const Expr& e) {
    if (!e.defined()) return e;
    const auto found = canonical_.find(e.get());
    if (found != canonical_.end()) return found->second;

    const int count = operand_count(e.kind());
    std::array<Expr, 3> operands;
    bool operands_changed = false;
    for (int i = 0; i < count; ++i) {
      operands[i] = canonical(operand(e, i));
      operands_changed = operands_changed || !operands[i].same_as(operand(e, i));
    }
    Expr node = operands_changed ? rebuild(e, operands) : e;
    NodeKey key = key_of(node);
    const auto [entry, inserted] = table_.try_emplace(key, node);
    canonical_.emplace(e.get(), entry->second);
    return entry->second;
  }

 private:
  static NodeKey key_of(const Expr& e) {
    NodeKey key;
    key.kind = e.kind();
    key.type = e.type();
    switch (e.kind()) {
      case ExprKind::IntImm:
        key.leaf = static_cast<uint32_t>(e.as<IntImm>()->value);
        break;
      case ExprKind::FloatImm:
        key.leaf = static_cast<uint32_t>(fj::float_to_bits(e.as<FloatImm>()->value));
        break;
      case ExprKind::BoolImm:
        key.leaf = e.as<BoolImm>()->value;
        break;
      case ExprKind::Var:
        key.leaf = static_cast<uint64_t>(e.as<Var>()->variable);
        break;
      case ExprKind::Param:
        key.leaf = static_cast<uint64_t>(e.as<Param>()->slot);
        key.name = e.as<Param>()->name;
        break;
      case ExprKind::Load:
        key.leaf = static_cast<uint64_t>(e.as<Load>()->slot) << 8 |
                   static_cast<uint64_t>(e.as<Load>()->rank);
        key.name = e.as<Load>()->name;
        break;
      default:
        break;
    }
    for (int i = 0; i < operand_count(e.kind()); ++i)
      key.operands[i] = operand(e, i).get();
    return key;
  }

  static Expr rebuild(const Expr& e, const std::array<Expr, 3>& operands) {
    if (const Load* load = e.as<Load>()) {
      return Load::make(load->type, load->slot, load->name, load->rank, operands[0], operands[1]);
    }
    return make_operation(e.kind(),
                          std::span<const Expr>(operands.data(), operand_count(e.kind())));
  }

  // Keys name canonical nodes, which table_ keeps alive; canonical_ is keyed by nodes of the
  // input, which the caller keeps alive.
  std::unordered_map<NodeKey, Expr, NodeKeyHash> table_;
  std::unordered_map<const ExprNode*, Expr> canonical_;
};

}  // namespace

Expr eliminate_common_subexpressions(const Expr& e) {
  HashConser conser;
  return conser.canonical(e);
}

}  // namespace flexjit::ir
