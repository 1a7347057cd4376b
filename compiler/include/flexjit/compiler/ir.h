// The typed expression IR that masks lower to, after Halide's IR.h: small immutable nodes
// behind a cheap reference-counted handle, a visitor, a mutator that preserves sharing, and a
// printer. The exact semantics of every operation are those of templates/fj_ops.cuh, which
// the evaluator, the interval analysis and the emitted CUDA all call.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>

namespace flexjit::ir {

// Value types. A new type (Float) is one enumerator here plus its rules in result_type().
enum class Type : uint8_t { Bool, Int };

const char* type_name(Type type);

// Every node kind, written once; adding a node is one line here plus its struct below.
#define FJ_FOR_EACH_EXPR(X) \
  X(IntImm)                 \
  X(BoolImm)                \
  X(Var)                    \
  X(Param)                  \
  X(Add)                    \
  X(Sub)                    \
  X(Mul)                    \
  X(Div)                    \
  X(Mod)                    \
  X(Min)                    \
  X(Max)                    \
  X(Abs)                    \
  X(Neg)                    \
  X(EQ)                     \
  X(NE)                     \
  X(LT)                     \
  X(LE)                     \
  X(GT)                     \
  X(GE)                     \
  X(And)                    \
  X(Or)                     \
  X(Not)                    \
  X(Select)

enum class ExprKind : uint8_t {
#define FJ_DECLARE_KIND(node) node,
  FJ_FOR_EACH_EXPR(FJ_DECLARE_KIND)
#undef FJ_DECLARE_KIND
};

const char* kind_name(ExprKind kind);

// Nesting limit of IR built from user input: lowering refuses deeper expressions, so every
// recursive walk over lowered IR (passes, evaluation, analysis, emission) is bounded.
inline constexpr uint32_t kMaxExprDepth = 256;
// Limit on an expression's size counted as a tree (each use of a shared node counted again):
// inlining masks that use each other can grow a tree exponentially, and the evaluator and
// the interval analysis walk trees.
inline constexpr uint64_t kMaxExprTreeSize = 1u << 16;

struct ExprNode;

// A handle to an immutable node; copying it copies a pointer and bumps a count.
class Expr {
 public:
  Expr() = default;
  explicit Expr(const ExprNode* node);
  Expr(const Expr& other);
  Expr(Expr&& other) noexcept;
  Expr& operator=(Expr other) noexcept;
  ~Expr();

  bool defined() const { return node_ != nullptr; }
  const ExprNode* get() const { return node_; }
  const ExprNode* operator->() const { return node_; }
  // Whether both handles name the same node (not structural equality).
  bool same_as(const Expr& other) const { return node_ == other.node_; }

  Type type() const;
  ExprKind kind() const;

  // The node as `T` if it is one, else null.
  template <class T>
  const T* as() const;

 private:
  const ExprNode* node_ = nullptr;
};

struct ExprNode {
  ExprNode(ExprKind kind, Type type) : kind(kind), type(type) {}
  ExprNode(const ExprNode&) = delete;
  ExprNode& operator=(const ExprNode&) = delete;
  virtual ~ExprNode() = default;

  const ExprKind kind;
  const Type type;
  // Longest path from this node to a leaf, counting both (a leaf has depth 1).
  uint32_t depth = 1;
  // Number of nodes when shared subexpressions are counted once per use; saturates at
  // UINT64_MAX. Kept in the node so that limits are checked in O(1) as IR is built.
  uint64_t tree_size = 1;
  mutable std::atomic<uint32_t> ref_count{0};
};

template <class T>
const T* Expr::as() const {
  return node_ != nullptr && node_->kind == T::kKind ? static_cast<const T*>(node_) : nullptr;
}

// The result type of `kind` applied to operands of `operand_types`, or nullopt when the
// operation is ill-typed or has the wrong number of operands. Leaves (immediates, Var,
// Param) take no operands and are typed by their make(). make() requires a result here.
std::optional<Type> result_type(ExprKind kind, std::span<const Type> operand_types);

// ---------------------------------------------------------------------------------------------
// Leaves

// `IntImm`: an int32 constant.
struct IntImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::IntImm;
  IntImm() : ExprNode(kKind, Type::Int) {}
  int32_t value = 0;
  static Expr make(int32_t value);
};

// `BoolImm`: `true` or `false`.
struct BoolImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::BoolImm;
  BoolImm() : ExprNode(kKind, Type::Bool) {}
  bool value = false;
  static Expr make(bool value);
};

// The positions every mask sees (DESIGN.md §2, §3): request, query head, query and key
// positions.
enum class Variable : uint8_t { B, H, Q, KV };

const char* variable_name(Variable variable);

// `Var`: one of the int32 position variables.
struct Var final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Var;
  Var() : ExprNode(kKind, Type::Int) {}
  Variable variable = Variable::Q;
  static Expr make(Variable variable);
};

// `Param`: a runtime scalar read from slot `slot` of the kernel's parameter block
// (fj::MaskParams::scalar). An Int param is the int32 in the slot; a Bool param is true
// when the slot is nonzero. `name` is the declared name, for printing only.
struct Param final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Param;
  explicit Param(Type type) : ExprNode(kKind, type) {}
  int slot = 0;
  std::string name;
  // Requires 0 <= slot < fj::kMaxScalarParams.
  static Expr make(Type type, int slot, std::string name);
};

// ---------------------------------------------------------------------------------------------
// Operations. Int operands are int32 and wrap around modulo 2^32 (never undefined).

struct UnaryNode : ExprNode {
  using ExprNode::ExprNode;
  Expr a;
};

struct BinaryNode : ExprNode {
  using ExprNode::ExprNode;
  Expr a, b;
};

// How the printer writes a node: `a + b`, `min(a, b)`, `-a`.
enum class Syntax : uint8_t { Infix, Call, Prefix };

#define FJ_DECLARE_UNARY(node, syntax, spelling)         \
  struct node final : UnaryNode {                        \
    static constexpr ExprKind kKind = ExprKind::node;    \
    static constexpr Syntax kSyntax = Syntax::syntax;    \
    static constexpr const char* kSpelling = spelling;   \
    explicit node(Type type) : UnaryNode(kKind, type) {} \
    static Expr make(Expr a);                            \
  }
#define FJ_DECLARE_BINARY(node, syntax, spelling)         \
  struct node final : BinaryNode {                        \
    static constexpr ExprKind kKind = ExprKind::node;     \
    static constexpr Syntax kSyntax = Syntax::syntax;     \
    static constexpr const char* kSpelling = spelling;    \
    explicit node(Type type) : BinaryNode(kKind, type) {} \
    static Expr make(Expr a, Expr b);                     \
  }

// `Add`: a + b, Int, wrapping.
FJ_DECLARE_BINARY(Add, Infix, "+");
// `Sub`: a - b, Int, wrapping.
FJ_DECLARE_BINARY(Sub, Infix, "-");
// `Mul`: a * b, Int, wrapping (the low 32 bits of the product).
FJ_DECLARE_BINARY(Mul, Infix, "*");
// `Div`: floor division like Python's `//` (rounds toward negative infinity); a / 0 == 0;
// INT_MIN / -1 == INT_MIN.
FJ_DECLARE_BINARY(Div, Infix, "/");
// `Mod`: floor modulo like Python's `%`: the result has the divisor's sign and
// a == (a / b) * b + a % b; a % 0 == 0.
FJ_DECLARE_BINARY(Mod, Infix, "%");
// `Min`: the smaller of two Ints.
FJ_DECLARE_BINARY(Min, Call, "min");
// `Max`: the larger of two Ints.
FJ_DECLARE_BINARY(Max, Call, "max");
// `Abs`: |a|, wrapping: abs(INT_MIN) == INT_MIN.
FJ_DECLARE_UNARY(Abs, Call, "abs");
// `Neg`: -a, wrapping: -INT_MIN == INT_MIN.
FJ_DECLARE_UNARY(Neg, Prefix, "-");
// `EQ`: a == b, on two Ints or two Bools; Bool.
FJ_DECLARE_BINARY(EQ, Infix, "==");
// `NE`: a != b, on two Ints or two Bools; Bool.
FJ_DECLARE_BINARY(NE, Infix, "!=");
// `LT`: a < b on Ints (signed); Bool.
FJ_DECLARE_BINARY(LT, Infix, "<");
// `LE`: a <= b on Ints (signed); Bool.
FJ_DECLARE_BINARY(LE, Infix, "<=");
// `GT`: a > b on Ints (signed); Bool.
FJ_DECLARE_BINARY(GT, Infix, ">");
// `GE`: a >= b on Ints (signed); Bool.
FJ_DECLARE_BINARY(GE, Infix, ">=");
// `And`: logical and of two Bools. Both sides are pure, so evaluation order is irrelevant.
FJ_DECLARE_BINARY(And, Infix, "&&");
// `Or`: logical or of two Bools.
FJ_DECLARE_BINARY(Or, Infix, "||");
// `Not`: logical negation of a Bool.
FJ_DECLARE_UNARY(Not, Prefix, "!");

#undef FJ_DECLARE_UNARY
#undef FJ_DECLARE_BINARY

// `Select`: condition ? true_value : false_value; the condition is Bool, both values have
// the same type, which is the result type.
struct Select final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Select;
  explicit Select(Type type) : ExprNode(kKind, type) {}
  Expr condition, true_value, false_value;
  static Expr make(Expr condition, Expr true_value, Expr false_value);
};

// The node of operation `kind` over `operands` (for code that picks the kind at run time).
// Requires operand_count(kind) > 0 and result_type(kind, operand types) to have a value.
Expr make_operation(ExprKind kind, std::span<const Expr> operands);

// ---------------------------------------------------------------------------------------------
// Walking the IR

// Operands of a node in order: none for a leaf, `a` for a unary node, `a, b` for a binary
// one, `condition, true_value, false_value` for a Select.
int operand_count(ExprKind kind);
// Requires 0 <= index < operand_count(e.kind()).
const Expr& operand(const Expr& e, int index);

// Visits every node reachable from an expression (shared nodes once per use). Override the
// visit() of the kinds of interest (with `using IRVisitor::visit;`); the defaults visit the
// children.
class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  // Calls the visit() of e's kind.
  void visit(const Expr& e);

 protected:
#define FJ_DECLARE_VISIT(node) virtual void visit(const node* op);
  FJ_FOR_EACH_EXPR(FJ_DECLARE_VISIT)
#undef FJ_DECLARE_VISIT
};

// Rewrites an expression bottom-up. The defaults mutate the children and rebuild the node
// only when a child changed, otherwise they return the original node, so sharing survives.
class IRMutator {
 public:
  virtual ~IRMutator() = default;
  // Calls the visit() of e's kind; an undefined expression stays undefined.
  virtual Expr mutate(const Expr& e);

 protected:
#define FJ_DECLARE_VISIT(node) virtual Expr visit(const node* op);
  FJ_FOR_EACH_EXPR(FJ_DECLARE_VISIT)
#undef FJ_DECLARE_VISIT
};

// Whether `variable` occurs in e.
bool uses_variable(const Expr& e, Variable variable);
// Whether `e` reads the runtime parameter in `slot`.
bool uses_param(const Expr& e, int slot);

// Readable text, every compound operand in parentheses:
// `(q >= kv) && ((q - kv) < window)`.
std::string to_string(const Expr& e);
std::ostream& operator<<(std::ostream& out, const Expr& e);

// Passes

// Folds every operation whose operands are constants, with the exact semantics of the
// language, and the boolean identities that hold for every value (`x && true` -> `x`,
// `x || true` -> `true`, `!!x` -> `x`, a select with a constant condition). Shared nodes are
// rewritten once and stay shared.
Expr fold_constants(const Expr& e);

}  // namespace flexjit::ir
