#include "flexjit/compiler/ir.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "fj_ops.cuh"

namespace flexjit::ir {

namespace {

// A node built against make()'s contract is a bug in the compiler, not bad input: lowering
// checks every type with result_type() before building, so this cannot be reached from a
// mask file.
[[noreturn]] void contract_violation(const char* what, ExprKind kind) {
  std::fprintf(stderr, "flexjit internal error: %s (%s)\n", what, kind_name(kind));
  std::abort();
}

uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

// Type, depth and tree size of a new node of `kind` over `operands`, checked against
// result_type().
struct NodeShape {
  Type type;
  uint32_t depth;
  uint64_t tree_size;
};

NodeShape checked_shape(ExprKind kind, std::initializer_list<const Expr*> operands) {
  std::array<Type, 3> types{};
  size_t count = 0;
  uint32_t depth = 0;
  uint64_t tree_size = 1;
  for (const Expr* operand : operands) {
    if (!operand->defined() || count == types.size()) {
      contract_violation("undefined operand", kind);
    }
    types[count++] = operand->type();
    depth = std::max(depth, (*operand)->depth);
    tree_size = saturating_add(tree_size, (*operand)->tree_size);
  }
  const std::optional<Type> type = result_type(kind, std::span<const Type>(types.data(), count));
  if (!type) contract_violation("ill-typed operands", kind);
  return {*type, depth + 1, tree_size};
}

template <class Node>
Node* new_node(const NodeShape& shape) {
  auto* node = new Node(shape.type);
  node->depth = shape.depth;
  node->tree_size = shape.tree_size;
  return node;
}

}  // namespace

const char* type_name(Type type) {
  switch (type) {
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
    case Type::Float:
      return "float";
  }
  return "?";
}

const char* kind_name(ExprKind kind) {
  switch (kind) {
#define FJ_KIND_NAME(node) \
  case ExprKind::node:     \
    return #node;
    FJ_FOR_EACH_EXPR(FJ_KIND_NAME)
#undef FJ_KIND_NAME
  }
  return "?";
}

const char* variable_name(Variable variable) {
  switch (variable) {
    case Variable::B:
      return "b";
    case Variable::H:
      return "h";
    case Variable::Q:
      return "q";
    case Variable::KV:
      return "kv";
    case Variable::Score:
      return "score";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Handle

Expr::Expr(const ExprNode* node) : node_(node) {
  if (node_ != nullptr) node_->ref_count.fetch_add(1, std::memory_order_relaxed);
}

Expr::Expr(const Expr& other) : Expr(other.node_) {}

Expr::Expr(Expr&& other) noexcept : node_(std::exchange(other.node_, nullptr)) {}

Expr& Expr::operator=(Expr other) noexcept {
  std::swap(node_, other.node_);
  return *this;
}

Expr::~Expr() {
  if (node_ != nullptr && node_->ref_count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete node_;
  }
}

Type Expr::type() const {
  return node_->type;
}
ExprKind Expr::kind() const {
  return node_->kind;
}

// ---------------------------------------------------------------------------------------------
// Types

std::optional<Type> result_type(ExprKind kind, std::span<const Type> operand_types) {
  // Leaves and Load (typed by their make()) have no operands here.
  if (static_cast<int>(operand_types.size()) != operand_count(kind) || operand_types.empty() ||
      kind == ExprKind::Load) {
    return std::nullopt;
  }
  const Type a = operand_types[0];
  const bool numeric = a == Type::Int || a == Type::Float;
  const bool same = operand_types.size() < 2 || operand_types[1] == a;
  switch (operation_typing(kind)) {
    case ops::Typing::Arithmetic:
    case ops::Typing::Numeric:
      if (numeric && same) return a;
      return std::nullopt;
    case ops::Typing::Equality:
      if (same) return Type::Bool;
      return std::nullopt;
    case ops::Typing::Ordering:
      if (numeric && same) return Type::Bool;
      return std::nullopt;
    case ops::Typing::Logic:
      if (a == Type::Bool && same) return Type::Bool;
      return std::nullopt;
    case ops::Typing::Select:
      if (a == Type::Bool && operand_types[1] == operand_types[2]) return operand_types[1];
      return std::nullopt;
    case ops::Typing::ToInt:
      if (a == Type::Bool || a == Type::Float) return Type::Int;
      return std::nullopt;
    case ops::Typing::ToFloat:
      if (a == Type::Bool || a == Type::Int) return Type::Float;
      return std::nullopt;
    case ops::Typing::Math:
      if (a == Type::Float) return Type::Float;
      return std::nullopt;
    case ops::Typing::Bitwise:
      if (a == Type::Int && same) return Type::Int;
      return std::nullopt;
  }
  return std::nullopt;
}

const Expr& operand(const Expr& e, int index) {
  const int count = operand_count(e.kind());
  if (index < 0 || index >= count) contract_violation("operand index out of range", e.kind());
  if (const Load* load = e.as<Load>()) return index == 0 ? load->row : load->col;
  if (count == 1) return static_cast<const UnaryNode*>(e.get())->a;
  if (count == 2) {
    const auto* node = static_cast<const BinaryNode*>(e.get());
    return index == 0 ? node->a : node->b;
  }
  const auto* select = static_cast<const Select*>(e.get());
  return index == 0 ? select->condition : index == 1 ? select->true_value : select->false_value;
}

// ---------------------------------------------------------------------------------------------
// Constructors

Expr IntImm::make(int32_t value) {
  auto* node = new IntImm();
  node->value = value;
  return Expr(node);
}

Expr FloatImm::make(float value) {
  auto* node = new FloatImm();
  node->value = value;
  return Expr(node);
}

Expr BoolImm::make(bool value) {
  auto* node = new BoolImm();
  node->value = value;
  return Expr(node);
}

Expr Var::make(Variable variable) {
  auto* node = new Var(variable == Variable::Score ? Type::Float : Type::Int);
  node->variable = variable;
  return Expr(node);
}

Expr Param::make(Type type, int slot, std::string name) {
  if (slot < 0 || slot >= fj::kMaxScalarParams) {
    contract_violation("parameter slot out of range", ExprKind::Param);
  }
  auto* node = new Param(type);
  node->slot = slot;
  node->name = std::move(name);
  return Expr(node);
}

Expr Load::make(Type type, int slot, std::string name, int rank, Expr row, Expr col) {
  if (type != Type::Int && type != Type::Float) contract_violation("array of bools", kKind);
  if (slot < 0 || slot >= fj::kMaxArrayParams) contract_violation("array slot out of range", kKind);
  if (rank != 1 && rank != 2) contract_violation("array rank not 1 or 2", kKind);
  if (!row.defined() || !col.defined()) contract_violation("undefined operand", kKind);
  if (row.type() != Type::Int || col.type() != Type::Int)
    contract_violation("index not int", kKind);
  auto* node = new Load(type);
  node->depth = std::max(row->depth, col->depth) + 1;
  node->tree_size = saturating_add(saturating_add(1, row->tree_size), col->tree_size);
  node->slot = slot;
  node->rank = rank;
  node->name = std::move(name);
  node->row = std::move(row);
  node->col = std::move(col);
  return Expr(node);
}

#define FJ_DEFINE_UNARY_MAKE(node)                              \
  Expr node::make(Expr a) {                                     \
    auto* created = new_node<node>(checked_shape(kKind, {&a})); \
    created->a = std::move(a);                                  \
    return Expr(created);                                       \
  }
#define FJ_DEFINE_BINARY_MAKE(node)                                 \
  Expr node::make(Expr a, Expr b) {                                 \
    auto* created = new_node<node>(checked_shape(kKind, {&a, &b})); \
    created->a = std::move(a);                                      \
    created->b = std::move(b);                                      \
    return Expr(created);                                           \
  }
FJ_DEFINE_BINARY_MAKE(Add)
FJ_DEFINE_BINARY_MAKE(Sub)
FJ_DEFINE_BINARY_MAKE(Mul)
FJ_DEFINE_BINARY_MAKE(Div)
FJ_DEFINE_BINARY_MAKE(Mod)
FJ_DEFINE_BINARY_MAKE(Min)
FJ_DEFINE_BINARY_MAKE(Max)
FJ_DEFINE_UNARY_MAKE(Abs)
FJ_DEFINE_UNARY_MAKE(Neg)
FJ_DEFINE_BINARY_MAKE(EQ)
FJ_DEFINE_BINARY_MAKE(NE)
FJ_DEFINE_BINARY_MAKE(LT)
FJ_DEFINE_BINARY_MAKE(LE)
FJ_DEFINE_BINARY_MAKE(GT)
FJ_DEFINE_BINARY_MAKE(GE)
FJ_DEFINE_BINARY_MAKE(And)
FJ_DEFINE_BINARY_MAKE(Or)
FJ_DEFINE_UNARY_MAKE(Not)
FJ_DEFINE_UNARY_MAKE(ToInt)
FJ_DEFINE_UNARY_MAKE(ToFloat)
FJ_DEFINE_UNARY_MAKE(Tanh)
FJ_DEFINE_UNARY_MAKE(Exp)
FJ_DEFINE_UNARY_MAKE(Exp2)
FJ_DEFINE_UNARY_MAKE(Log)
FJ_DEFINE_UNARY_MAKE(Log2)
FJ_DEFINE_UNARY_MAKE(Sqrt)
FJ_DEFINE_UNARY_MAKE(Sigmoid)
FJ_DEFINE_UNARY_MAKE(Floor)
FJ_DEFINE_UNARY_MAKE(Ceil)
FJ_DEFINE_BINARY_MAKE(BitAnd)
FJ_DEFINE_BINARY_MAKE(BitOr)
FJ_DEFINE_BINARY_MAKE(BitXor)
FJ_DEFINE_UNARY_MAKE(BitNot)
FJ_DEFINE_BINARY_MAKE(Shl)
FJ_DEFINE_BINARY_MAKE(Shr)
#undef FJ_DEFINE_UNARY_MAKE
#undef FJ_DEFINE_BINARY_MAKE

Expr Select::make(Expr condition, Expr true_value, Expr false_value) {
  auto* created = new_node<Select>(checked_shape(kKind, {&condition, &true_value, &false_value}));
  created->condition = std::move(condition);
  created->true_value = std::move(true_value);
  created->false_value = std::move(false_value);
  return Expr(created);
}

namespace {

template <class Node>
Expr make_from_operands(std::span<const Expr> operands) {
  if constexpr (std::is_base_of_v<UnaryNode, Node>) {
    return Node::make(operands[0]);
  } else if constexpr (std::is_base_of_v<BinaryNode, Node>) {
    return Node::make(operands[0], operands[1]);
  } else if constexpr (std::is_same_v<Select, Node>) {
    return Select::make(operands[0], operands[1], operands[2]);
  } else {
    contract_violation("make_operation on a leaf or a Load", Node::kKind);
  }
}

}  // namespace

Expr make_operation(ExprKind kind, std::span<const Expr> operands) {
  if (static_cast<int>(operands.size()) != operand_count(kind)) {
    contract_violation("wrong number of operands", kind);
  }
  switch (kind) {
#define FJ_MAKE_OPERATION(node) \
  case ExprKind::node:          \
    return make_from_operands<node>(operands);
    FJ_FOR_EACH_EXPR(FJ_MAKE_OPERATION)
#undef FJ_MAKE_OPERATION
  }
  contract_violation("unknown kind", kind);
}

// ---------------------------------------------------------------------------------------------
// Visitor and mutator

void IRVisitor::visit(const Expr& e) {
  switch (e.kind()) {
#define FJ_DISPATCH(node)                     \
  case ExprKind::node:                        \
    visit(static_cast<const node*>(e.get())); \
    return;
    FJ_FOR_EACH_EXPR(FJ_DISPATCH)
#undef FJ_DISPATCH
  }
}

#define FJ_DEFAULT_VISIT(node)                             \
  void IRVisitor::visit(const node* op) {                  \
    const Expr self(op);                                   \
    for (int i = 0; i < operand_count(node::kKind); ++i) { \
      visit(operand(self, i));                             \
    }                                                      \
  }
FJ_FOR_EACH_EXPR(FJ_DEFAULT_VISIT)
#undef FJ_DEFAULT_VISIT

Expr IRMutator::mutate(const Expr& e) {
  if (!e.defined()) return e;
  switch (e.kind()) {
#define FJ_DISPATCH(node) \
  case ExprKind::node:    \
    return visit(static_cast<const node*>(e.get()));
    FJ_FOR_EACH_EXPR(FJ_DISPATCH)
#undef FJ_DISPATCH
  }
  return e;
}

namespace {

// Rebuilds `op` from mutated operands, or returns it when none changed.
template <class Node>
Expr mutate_operands(IRMutator& mutator, const Node* op) {
  Expr self(op);
  if constexpr (std::is_base_of_v<UnaryNode, Node>) {
    Expr a = mutator.mutate(op->a);
    if (a.same_as(op->a)) return self;
    return Node::make(std::move(a));
  } else if constexpr (std::is_base_of_v<BinaryNode, Node>) {
    Expr a = mutator.mutate(op->a);
    Expr b = mutator.mutate(op->b);
    if (a.same_as(op->a) && b.same_as(op->b)) return self;
    return Node::make(std::move(a), std::move(b));
  } else if constexpr (std::is_same_v<Select, Node>) {
    Expr condition = mutator.mutate(op->condition);
    Expr true_value = mutator.mutate(op->true_value);
    Expr false_value = mutator.mutate(op->false_value);
    if (condition.same_as(op->condition) && true_value.same_as(op->true_value) &&
        false_value.same_as(op->false_value)) {
      return self;
    }
    return Select::make(std::move(condition), std::move(true_value), std::move(false_value));
  } else if constexpr (std::is_same_v<Load, Node>) {
    Expr row = mutator.mutate(op->row);
    Expr col = mutator.mutate(op->col);
    if (row.same_as(op->row) && col.same_as(op->col)) return self;
    return Load::make(op->type, op->slot, op->name, op->rank, std::move(row), std::move(col));
  } else {
    return self;  // a leaf
  }
}

}  // namespace

#define FJ_DEFAULT_MUTATE(node)           \
  Expr IRMutator::visit(const node* op) { \
    return mutate_operands(*this, op);    \
  }
FJ_FOR_EACH_EXPR(FJ_DEFAULT_MUTATE)
#undef FJ_DEFAULT_MUTATE

namespace {

// Whether some node of `e` satisfies `matches`; stops at the first one.
template <class Predicate>
bool any_node(const Expr& e, const Predicate& matches) {
  if (matches(e)) return true;
  for (int i = 0; i < operand_count(e.kind()); ++i) {
    if (any_node(operand(e, i), matches)) return true;
  }
  return false;
}

}  // namespace

bool uses_variable(const Expr& e, Variable variable) {
  return any_node(e, [&](const Expr& node) {
    const Var* var = node.as<Var>();
    return var != nullptr && var->variable == variable;
  });
}

bool translation_invariant(const Expr& e) {
  const auto is_position = [](const Expr& node) {
    const Var* var = node.as<Var>();
    return var != nullptr && (var->variable == Variable::Q || var->variable == Variable::KV);
  };
  std::unordered_map<const ExprNode*, bool> memo;
  const std::function<bool(const Expr&)> invariant = [&](const Expr& node) -> bool {
    if (is_position(node)) return false;  // q or kv alone
    const auto found = memo.find(node.get());
    if (found != memo.end()) return found->second;
    bool result = true;
    const int count = operand_count(node.kind());
    if (count == 2 && is_position(operand(node, 0)) && is_position(operand(node, 1))) {
      const Var* a = operand(node, 0).as<Var>();
      const Var* b = operand(node, 1).as<Var>();
      switch (node.kind()) {
        case ExprKind::Sub:
        case ExprKind::EQ:
        case ExprKind::NE:
        case ExprKind::LT:
        case ExprKind::LE:
        case ExprKind::GT:
        case ExprKind::GE:
          result = a->variable != b->variable || node.kind() != ExprKind::Sub;
          break;
        default:
          result = false;
      }
    } else {
      for (int i = 0; i < count && result; ++i)
        result = invariant(operand(node, i));
    }
    memo.emplace(node.get(), result);
    return result;
  };
  return invariant(e);
}

bool uses_param(const Expr& e, int slot) {
  return any_node(e, [&](const Expr& node) {
    const Param* param = node.as<Param>();
    return param != nullptr && param->slot == slot;
  });
}

bool uses_array(const Expr& e, int slot) {
  return any_node(e, [&](const Expr& node) {
    const Load* load = node.as<Load>();
    return load != nullptr && load->slot == slot;
  });
}

bool reads_arrays(const Expr& e) {
  return any_node(e, [](const Expr& node) { return node.kind() == ExprKind::Load; });
}

// ---------------------------------------------------------------------------------------------
// Structural equality

namespace {

// Memoized on pairs of nodes, so shared subexpressions are compared once.
class EqualityChecker {
 public:
  bool equal(const Expr& a, const Expr& b) {
    if (a.same_as(b)) return true;
    if (!a.defined() || !b.defined()) return false;
    if (a.kind() != b.kind() || a.type() != b.type()) return false;
    if (!same_leaf(a, b)) return false;
    if (known_equal_.contains({a.get(), b.get()})) return true;
    for (int i = 0; i < operand_count(a.kind()); ++i) {
      if (!equal(operand(a, i), operand(b, i))) return false;
    }
    known_equal_.insert({a.get(), b.get()});
    return true;
  }

 private:
  // Leaf values, and a Load's array (its operands are compared as operands).
  static bool same_leaf(const Expr& a, const Expr& b) {
    switch (a.kind()) {
      case ExprKind::IntImm:
        return a.as<IntImm>()->value == b.as<IntImm>()->value;
      case ExprKind::FloatImm:  // by bits: 0.0 and -0.0 differ, a NaN equals its own bits
        return std::bit_cast<uint32_t>(a.as<FloatImm>()->value) ==
               std::bit_cast<uint32_t>(b.as<FloatImm>()->value);
      case ExprKind::BoolImm:
        return a.as<BoolImm>()->value == b.as<BoolImm>()->value;
      case ExprKind::Var:
        return a.as<Var>()->variable == b.as<Var>()->variable;
      case ExprKind::Param:
        return a.as<Param>()->slot == b.as<Param>()->slot &&
               a.as<Param>()->name == b.as<Param>()->name;
      case ExprKind::Load: {
        const Load* x = a.as<Load>();
        const Load* y = b.as<Load>();
        return x->slot == y->slot && x->rank == y->rank && x->name == y->name;
      }
      default:
        return true;
    }
  }

  std::set<std::pair<const ExprNode*, const ExprNode*>> known_equal_;
};

}  // namespace

bool equal(const Expr& a, const Expr& b) {
  EqualityChecker checker;
  return checker.equal(a, b);
}

// ---------------------------------------------------------------------------------------------
// Printer

namespace {

class Printer : public IRVisitor {
 public:
  explicit Printer(std::ostream& out) : out_(out) {}
  using IRVisitor::visit;

 protected:
#define FJ_PRINT_VISIT(node)            \
  void visit(const node* op) override { \
    print(op);                          \
  }
  FJ_FOR_EACH_EXPR(FJ_PRINT_VISIT)
#undef FJ_PRINT_VISIT

 private:
  void print(const IntImm* op) {
    out_ << op->value;
  }
  void print(const FloatImm* op) {
    out_ << float_text(op->value);
  }
  void print(const Load* op) {
    out_ << op->name << '[';
    visit(op->row);
    if (op->rank == 2) {
      out_ << ", ";
      visit(op->col);
    }
    out_ << ']';
  }
  void print(const BoolImm* op) {
    out_ << (op->value ? "true" : "false");
  }
  void print(const Var* op) {
    out_ << variable_name(op->variable);
  }
  void print(const Param* op) {
    out_ << op->name;
  }

  template <class Node>
  void print(const Node* op) {
    if constexpr (Node::kSyntax == Syntax::Call) {
      out_ << Node::kSpelling << '(';
      if constexpr (std::is_base_of_v<BinaryNode, Node>) {
        visit(op->a);
        out_ << ", ";
        visit(op->b);
      } else {
        visit(op->a);
      }
      out_ << ')';
    } else if constexpr (Node::kSyntax == Syntax::Prefix) {
      out_ << Node::kSpelling;
      print_operand(op->a);
    } else {
      print_operand(op->a);
      out_ << ' ' << Node::kSpelling << ' ';
      print_operand(op->b);
    }
  }

  void print(const Select* op) {
    print_operand(op->condition);
    out_ << " ? ";
    print_operand(op->true_value);
    out_ << " : ";
    print_operand(op->false_value);
  }

  // Operands that are themselves operators (or negative numbers) go in parentheses, so the
  // text reads the same whatever precedence the reader assumes.
  void print_operand(const Expr& e) {
    bool bare = operand_count(e.kind()) == 0 || is_call(e.kind()) || e.kind() == ExprKind::Load;
    if (const IntImm* number = e.as<IntImm>()) bare = number->value >= 0;
    if (const FloatImm* number = e.as<FloatImm>()) bare = !std::signbit(number->value);
    if (!bare) out_ << '(';
    visit(e);
    if (!bare) out_ << ')';
  }

  static bool is_call(ExprKind kind) {
    switch (kind) {
#define FJ_IS_CALL(node) \
  case ExprKind::node:   \
    return syntax_of<node>() == Syntax::Call;
      FJ_FOR_EACH_EXPR(FJ_IS_CALL)
#undef FJ_IS_CALL
    }
    return false;
  }

  template <class Node>
  static constexpr Syntax syntax_of() {
    if constexpr (requires { Node::kSyntax; }) {
      return Node::kSyntax;
    } else {
      return Syntax::Infix;  // leaves, Load and Select have no kSyntax; none is a call
    }
  }

  std::ostream& out_;
};

}  // namespace

std::string float_text(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  std::array<char, 64> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  std::string text(buffer.data(), end);
  // Shortest round trip gives `50`, `1e+20`: add the `.0` that makes it a float literal.
  if (text.find_first_of(".e") == std::string::npos) return text + ".0";
  if (text.find('.') == std::string::npos) text.insert(text.find('e'), ".0");
  return text;
}

std::ostream& operator<<(std::ostream& out, const Expr& e) {
  if (!e.defined()) return out << "<undefined>";
  Printer printer(out);
  printer.visit(e);
  return out;
}

std::string to_string(const Expr& e) {
  std::ostringstream out;
  out << e;
  return out.str();
}

}  // namespace flexjit::ir
