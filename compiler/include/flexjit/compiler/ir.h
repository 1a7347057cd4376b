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
#include <vector>

#include "flexjit/dsl/operations.h"

namespace flexjit::ir {

// Value types: Bool, Int (int32, wrapping) and Float (IEEE float32, the device's rounding).
// A new type is one enumerator here plus its rules in result_type().
enum class Type : uint8_t { Bool, Int, Float };

const char* type_name(Type type);

// Every node kind, written once: the leaves and Load here, the operations as the rows of
// FJ_FOR_EACH_OPERATION (flexjit/dsl/operations.h), which also give their arity, typing,
// spellings and meaning. Adding a leaf is one line here plus its struct below; adding an
// operation is one row there plus its struct below.
#define FJ_EXPR_KIND_OF_OPERATION(X, node, ...) X(node)
// clang-format off
#define FJ_FOR_EACH_EXPR(X)                                \
  X(IntImm) X(FloatImm) X(BoolImm) X(Var) X(Param) X(Load) \
  FJ_FOR_EACH_OPERATION(FJ_EXPR_KIND_OF_OPERATION, X)
// clang-format on

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

// `FloatImm`: a float32 constant (finite; the language has no literal for inf or NaN, but
// folding may produce them, e.g. exp(100.0), and they print as `inf`, `-inf`, `nan`).
struct FloatImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::FloatImm;
  FloatImm() : ExprNode(kKind, Type::Float) {}
  float value = 0.0f;
  static Expr make(float value);
};

// `BoolImm`: `true` or `false`.
struct BoolImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::BoolImm;
  BoolImm() : ExprNode(kKind, Type::Bool) {}
  bool value = false;
  static Expr make(bool value);
};

// The variables a body sees (docs/language.md, docs/architecture.md#call-contract): request, query
// head, query and key positions (Int), and, in score bodies only, the score (Float, already
// scaled).
enum class Variable : uint8_t { B, H, Q, KV, Score };

const char* variable_name(Variable variable);

// `Var`: one of the variables: Int for b, h, q, kv; Float for score.
struct Var final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Var;
  explicit Var(Type type) : ExprNode(kKind, type) {}
  Variable variable = Variable::Q;
  static Expr make(Variable variable);
};

// `Param`: a runtime scalar read from slot `slot` of the kernel's parameter block
// (fj::MaskParams::scalar). An Int param is the int32 in the slot; a Bool param is true
// when the slot is nonzero; a Float param is the float32 whose bits the slot holds.
// `name` is the declared name, for printing only.
struct Param final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Param;
  explicit Param(Type type) : ExprNode(kKind, type) {}
  int slot = 0;
  std::string name;
  // Requires 0 <= slot < fj::kMaxScalarParams.
  static Expr make(Type type, int slot, std::string name);
};

// `Load`: element [row, col] of runtime array `slot` (fj::MaskParams::array), an Int or a
// Float array. A 1-D array has one column and is read at col 0 (`rank` 1 prints `a[i]`).
// Any index outside the array's extents reads 0 (0.0 for Float): a read never leaves the
// array (docs/language.md). Operands: row, col (both Int). Built only by make(), never by
// make_operation(); a mutator rebuilds it with the same slot, name, rank and type.
struct Load final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Load;
  explicit Load(Type type) : ExprNode(kKind, type) {}
  int slot = 0;
  int rank = 1;
  std::string name;
  Expr row, col;
  // Requires type Int or Float, 0 <= slot < fj::kMaxArrayParams, rank 1 or 2, Int indices.
  static Expr make(Type type, int slot, std::string name, int rank, Expr row, Expr col);
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

// How the printer writes a node: `a + b`, `min(a, b)`, `-a` (the table's column).
using Syntax = ops::Syntax;

// The operand count of every node kind: the table's arity for operations, 2 for a Load (row,
// col), 0 for a leaf.
constexpr int operand_count(ExprKind kind) {
  switch (kind) {
#define FJ_OPERATION_ARITY(C, node, arity, ...) \
  case ExprKind::node:                          \
    return arity;
    FJ_FOR_EACH_OPERATION(FJ_OPERATION_ARITY, _)
#undef FJ_OPERATION_ARITY
    case ExprKind::Load:
      return 2;
    default:
      return 0;
  }
}

// An operation's row in the table: its typing, how it prints, its spelling.
constexpr ops::Typing operation_typing(ExprKind kind) {
  switch (kind) {
#define FJ_OPERATION_TYPING(C, node, arity, typing, ...) \
  case ExprKind::node:                                   \
    return ops::Typing::typing;
    FJ_FOR_EACH_OPERATION(FJ_OPERATION_TYPING, _)
#undef FJ_OPERATION_TYPING
    default:
      return ops::Typing::Arithmetic;  // leaves and Load have no row
  }
}
constexpr Syntax operation_syntax(ExprKind kind) {
  switch (kind) {
#define FJ_OPERATION_SYNTAX(C, node, arity, typing, syntax, ...) \
  case ExprKind::node:                                           \
    return Syntax::syntax;
    FJ_FOR_EACH_OPERATION(FJ_OPERATION_SYNTAX, _)
#undef FJ_OPERATION_SYNTAX
    default:
      return Syntax::Infix;  // leaves, Load: not calls
  }
}
constexpr const char* operation_spelling(ExprKind kind) {
  switch (kind) {
#define FJ_OPERATION_SPELLING(C, node, arity, typing, syntax, spelling, ...) \
  case ExprKind::node:                                                       \
    return spelling;
    FJ_FOR_EACH_OPERATION(FJ_OPERATION_SPELLING, _)
#undef FJ_OPERATION_SPELLING
    default:
      return "";
  }
}

#define FJ_DECLARE_UNARY(node)                                          \
  struct node final : UnaryNode {                                       \
    static constexpr ExprKind kKind = ExprKind::node;                   \
    static constexpr Syntax kSyntax = operation_syntax(kKind);          \
    static constexpr const char* kSpelling = operation_spelling(kKind); \
    explicit node(Type type) : UnaryNode(kKind, type) {}                \
    static Expr make(Expr a);                                           \
  };                                                                    \
  static_assert(operand_count(ExprKind::node) == 1)
#define FJ_DECLARE_BINARY(node)                                         \
  struct node final : BinaryNode {                                      \
    static constexpr ExprKind kKind = ExprKind::node;                   \
    static constexpr Syntax kSyntax = operation_syntax(kKind);          \
    static constexpr const char* kSpelling = operation_spelling(kKind); \
    explicit node(Type type) : BinaryNode(kKind, type) {}               \
    static Expr make(Expr a, Expr b);                                   \
  };                                                                    \
  static_assert(operand_count(ExprKind::node) == 2)

// Arithmetic takes two operands of one numeric type (lowering inserts ToFloat for mixed
// Int/Float) and has that type. On Float it is IEEE float32 arithmetic with round to
// nearest, except where a comment says otherwise.

// `Add`: a + b; Int wraps.
FJ_DECLARE_BINARY(Add);
// `Sub`: a - b; Int wraps.
FJ_DECLARE_BINARY(Sub);
// `Mul`: a * b; Int wraps (the low 32 bits of the product).
FJ_DECLARE_BINARY(Mul);
// `Div`: Int: floor division like Python's `//` (rounds toward negative infinity),
// INT_MIN / -1 == INT_MIN. Float: a / b. Both: a / 0 == 0 (0.0 for Float, whatever a is).
FJ_DECLARE_BINARY(Div);
// `Mod`: floor modulo like Python's `%`: the result has the divisor's sign and
// a == (a / b) * b + a % b; Float: a - floor(a / b) * b computed as Python's math does
// (fmod, then moved into the divisor's sign). Both: a % 0 == 0.
FJ_DECLARE_BINARY(Mod);
// `Min`: the smaller operand (Float: if either is NaN, the other, like fminf).
FJ_DECLARE_BINARY(Min);
// `Max`: the larger operand (Float: if either is NaN, the other, like fmaxf).
FJ_DECLARE_BINARY(Max);
// `Abs`: |a|; Int wraps: abs(INT_MIN) == INT_MIN.
FJ_DECLARE_UNARY(Abs);
// `Neg`: -a; Int wraps: -INT_MIN == INT_MIN.
FJ_DECLARE_UNARY(Neg);
// Comparisons take two operands of one type and give Bool. Ints compare signed; Floats by
// IEEE rules (any comparison with NaN is false, except != which is true).
// `EQ`: a == b, on Ints, Floats or Bools.
FJ_DECLARE_BINARY(EQ);
// `NE`: a != b, on Ints, Floats or Bools.
FJ_DECLARE_BINARY(NE);
// `LT`: a < b on Ints or Floats.
FJ_DECLARE_BINARY(LT);
// `LE`: a <= b on Ints or Floats.
FJ_DECLARE_BINARY(LE);
// `GT`: a > b on Ints or Floats.
FJ_DECLARE_BINARY(GT);
// `GE`: a >= b on Ints or Floats.
FJ_DECLARE_BINARY(GE);
// `And`: logical and of two Bools. Both sides are pure, so evaluation order is irrelevant.
FJ_DECLARE_BINARY(And);
// `Or`: logical or of two Bools.
FJ_DECLARE_BINARY(Or);
// `Not`: logical negation of a Bool.
FJ_DECLARE_UNARY(Not);
// `ToInt`: `int(a)`. From Bool: 0 or 1. From Float: truncation toward zero like Python's
// int(); NaN gives 0 and values beyond the int32 range saturate to INT_MIN / INT_MAX.
// From Int: not built (lowering drops the conversion).
FJ_DECLARE_UNARY(ToInt);
// `ToFloat`: `float(a)`. From Int: the nearest float32 (ties to even). From Bool: 0.0 or 1.0.
FJ_DECLARE_UNARY(ToFloat);
// Float -> Float functions, with the accuracy of the CUDA math library on the device and of
// the C library on the host (within a few ulp of each other; the IR never relies on them
// being bit-identical).
// `Tanh`: hyperbolic tangent.
FJ_DECLARE_UNARY(Tanh);
// `Exp`: e^a.
FJ_DECLARE_UNARY(Exp);
// `Exp2`: 2^a.
FJ_DECLARE_UNARY(Exp2);
// `Log`: natural logarithm; log(0) == -inf, log of a negative number is NaN.
FJ_DECLARE_UNARY(Log);
// `Log2`: base-2 logarithm, same edge cases as Log.
FJ_DECLARE_UNARY(Log2);
// `Sqrt`: square root; NaN for negative numbers.
FJ_DECLARE_UNARY(Sqrt);
// `Sigmoid`: 1 / (1 + e^-a).
FJ_DECLARE_UNARY(Sigmoid);
// `Floor`: the largest integral float <= a (stays Float, like torch.floor).
FJ_DECLARE_UNARY(Floor);
// `Ceil`: the smallest integral float >= a (stays Float).
FJ_DECLARE_UNARY(Ceil);
// Bitwise operations take Int operands and give an Int, on the 32 bits of two's complement.
// `BitAnd`: a & b.
FJ_DECLARE_BINARY(BitAnd);
// `BitOr`: a | b.
FJ_DECLARE_BINARY(BitOr);
// `BitXor`: a ^ b.
FJ_DECLARE_BINARY(BitXor);
// `BitNot`: ~a, which is -a - 1.
FJ_DECLARE_UNARY(BitNot);
// `Shl`: a << b: for b in [0, 31] the low 32 bits of a * 2^b; any other b (negative ones too)
// gives 0.
FJ_DECLARE_BINARY(Shl);
// `Shr`: a >> b, arithmetic: for b in [0, 31] floor(a / 2^b); any other b gives a's sign, 0 or
// -1 (as b == 31 does).
FJ_DECLARE_BINARY(Shr);

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
static_assert(operand_count(ExprKind::Select) == 3);

// The node of operation `kind` over `operands` (for code that picks the kind at run time).
// Requires operand_count(kind) > 0 and result_type(kind, operand types) to have a value.
Expr make_operation(ExprKind kind, std::span<const Expr> operands);

// ---------------------------------------------------------------------------------------------
// Walking the IR

// Operands of a node in order (operand_count() above): none for a leaf, `a` for a unary node,
// `a, b` for a binary one, `row, col` for a Load, `condition, true_value, false_value` for a
// Select.
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
// Whether e reads q and kv only through their difference: every q and kv occurs as an operand
// of `q - kv`, `kv - q` or a comparison of the two. Then, for positions q, kv >= 0 (the
// difference does not wrap), e(q, kv) == e(q - kv, 0): the value is constant along each
// diagonal of the score matrix (causal, windows, dilations, modular patterns).
bool translation_invariant(const Expr& e);
// Whether `e` reads the runtime parameter in `slot`.
bool uses_param(const Expr& e, int slot);
// Whether `e` reads the runtime array in `slot`.
bool uses_array(const Expr& e, int slot);
// Whether `e` reads any runtime array (has a Load).
bool reads_arrays(const Expr& e);

// Readable text, every compound operand in parentheses:
// `(q >= kv) && ((q - kv) < window)`.
std::string to_string(const Expr& e);
std::ostream& operator<<(std::ostream& out, const Expr& e);
// A float as the printer writes it, reading back as the same float32: the shortest decimal
// that round trips, always with a `.` (`50.0`, `0.1`, `1.0e+20`), or `inf`, `-inf`, `nan`.
std::string float_text(float value);

// Passes

// Folds every operation whose operands are constants, with the exact semantics of the
// language, and the boolean identities that hold for every value (`x && true` -> `x`,
// `x || true` -> `true`, `!!x` -> `x`, a select with a constant condition). Shared nodes are
// rewritten once and stay shared. Float operations whose host result may differ from the
// device's by an ulp (tanh, exp, exp2, log, log2, sigmoid) are folded too: a constant is
// then the host's value, which is within the documented accuracy.
Expr fold_constants(const Expr& e);

// Common-subexpression elimination by hash-consing: structurally equal subtrees (same kind,
// type, leaf value and operands) become one node, so `(q - kv) < w && (q - kv) >= 0`
// computes `q - kv` once in the emitted code.
Expr eliminate_common_subexpressions(const Expr& e);

// Algebraic simplification: rewrites that hold for every value of every variable under the
// language's exact semantics (wrap-around Int, IEEE Float), each commented in simplify.cpp
// with why it is sound. Folds constants as it goes.
Expr simplify(const Expr& e);

// One pass of the standard pipeline, for printing the IR between passes.
struct PassResult {
  const char* name;  // "fold", "simplify", "cse"
  Expr result;
};

// The standard pipeline (fold, simplify, cse) with the IR after each pass; the last result
// is what run_passes() returns.
std::vector<PassResult> run_passes_traced(const Expr& e);
Expr run_passes(const Expr& e);

// Structural equality (same shape, kinds, types and leaf values; shared or not).
bool equal(const Expr& a, const Expr& b);

}  // namespace flexjit::ir
