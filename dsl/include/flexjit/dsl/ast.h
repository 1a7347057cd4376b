// The abstract syntax tree of a mask file, as the parser builds it and the checker
// annotates it (types, what each name refers to).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flexjit/dsl/diagnostic.h"

namespace flexjit::dsl {

// Value types of the language. `Error` marks an expression whose type could not be
// determined; the checker reports the cause once and suppresses follow-on errors.
// `Float` is float32; `Int` promotes to `Float` in mixed arithmetic.
enum class Type : uint8_t { Error, Bool, Int, Float };

const char* type_name(Type type);

enum class UnaryOp : uint8_t { Neg, Not, BitNot };

enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Mod,
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  And,
  Or,
  BitAnd,
  BitOr,
  BitXor,
  Shl,
  Shr,
};

// The spelling of an operator in source ("+", "&&", ...).
const char* op_spelling(UnaryOp op);
const char* op_spelling(BinaryOp op);

// Variables a body sees (docs/language.md): positions in every body, `score` (Float) only in
// score bodies.
enum class Builtin : uint8_t { B, H, Q, KV, Score };

const char* builtin_name(Builtin builtin);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// What a `Name`, `Index` or `Call` expression refers to, filled in by the checker.
//   Builtin   a variable of Builtin (Name), or a builtin function of Function (Call)
//   Param     a runtime parameter: a scalar (Name) or an array (Index)
//   Const     a compile-time constant (Name)
//   Mask      another mask (Name, used as a Bool)
//   Score     another score, applied to the single argument (Call)
//   Local     the bound variable of the innermost enclosing `any`/`all` of that name (Name)
enum class RefKind : uint8_t { Unresolved, Builtin, Param, Const, Mask, Score, Local };

// Builtin functions (docs/language.md). `where(c, a, b)` is `c ? a : b`; `clamp(x, lo, hi)` is
// `min(max(x, lo), hi)`; `int(x)` / `float(x)` convert.
enum class Function : uint8_t {
  Min,
  Max,
  Abs,
  Clamp,
  Where,
  Tanh,
  Exp,
  Exp2,
  Log,
  Log2,
  Sqrt,
  Sigmoid,
  Floor,
  Ceil,
  Int,
  Float,
};

const char* function_name(Function function);

struct Expr {
  enum class Kind : uint8_t {
    IntLit,       // int_value
    FloatLit,     // float_value (the literal as written, rounded to double)
    BoolLit,      // int_value is 0 or 1
    Name,         // name; resolved through ref_kind / ref_index
    Unary,        // unary_op, args[0]
    Binary,       // binary_op, args[0], args[1]
    Conditional,  // args[0] ? args[1] : args[2]
    Call,         // name(args): a builtin function (ref_kind Builtin) or a score (Score)
    Index,        // name[args]: an array parameter read, one index per dimension
    Reduce,       // any(name < args[0]: args[1]) or all(...); `reduce_all` says which
  };

  Kind kind = Kind::IntLit;
  Span span;                // the whole expression
  Type type = Type::Error;  // set by the checker

  // Literal value as written. The checker rejects values outside int32 but one: 2147483648
  // as the operand of unary minus (`-2147483648` is INT_MIN). Truncated to int32 it is
  // INT_MIN, which wrap-around negation maps to itself, so lowering needs no special case.
  int64_t int_value = 0;
  double float_value = 0.0;
  std::string name;
  Span name_span;  // Call, Index, Reduce: the name (function, array, bound variable)
  UnaryOp unary_op = UnaryOp::Neg;
  BinaryOp binary_op = BinaryOp::Add;
  std::vector<ExprPtr> args;

  bool reduce_all = false;  // Reduce: `all` rather than `any`

  RefKind ref_kind = RefKind::Unresolved;
  // Builtin Name: static_cast<int>(Builtin); Builtin Call: static_cast<int>(Function);
  // Param/Const/Mask/Score: index into Module::decls; Local: unused (see binder).
  int ref_index = -1;
  // Local: the Reduce expression that binds the name.
  const Expr* binder = nullptr;
};

// Bound on the count of an `any`/`all` (lowering unrolls it).
inline constexpr int kMaxReduceCount = 64;

enum class DeclKind : uint8_t { Param, Const, Mask, Score, Variant };

const char* decl_kind_name(DeclKind kind);

// One dimension of an array parameter: `b` (requests), `h` (query heads), `q` / `kv`
// (positions), or any other name (an extent given at launch, e.g. `N`).
struct ArrayDim {
  std::string name;
  Span span;
};

// One top-level declaration:
//   param NAME: TYPE             runtime scalar, passed at launch
//   param NAME: TYPE[d0, d1]     runtime array (1 or 2 dims), Int or Float elements
//   const NAME: TYPE = expr      compile-time constant (value must fold to a literal)
//   mask NAME = expr             Bool over b, h, q, kv
//   score NAME = expr            Float over score, b, h, q, kv
//   variant NAME = MASK [with SCORE]
struct Decl {
  DeclKind kind = DeclKind::Mask;
  std::string name;
  Span span;                         // the whole declaration
  Span name_span;                    // the declared name
  Type declared_type = Type::Error;  // Param/Const: the written (element) type; Mask: Bool;
                                     // Score: Float; Variant: Error
  Span type_span;                    // Param and Const: the written type
  std::vector<ArrayDim> dims;        // Param: empty for a scalar, else the array's dimensions
  // Const, Mask and Score: the body; Param and Variant: null. Also null when the declaration
  // had a syntax error (the parser keeps its name so uses of it resolve; the module then has
  // errors).
  ExprPtr value;
  // Variant: the mask and the optional score it names (score empty when absent), and the
  // declarations they resolve to (set by the checker; -1 when unresolved or absent).
  std::string variant_mask;
  Span variant_mask_span;
  std::string variant_score;
  Span variant_score_span;
  int variant_mask_index = -1;
  int variant_score_index = -1;

  bool is_array() const { return !dims.empty(); }
};

struct Module {
  Source source;
  std::vector<Decl> decls;

  // Index of the declaration named `name`, or -1.
  int find(std::string_view name) const;
};

}  // namespace flexjit::dsl
