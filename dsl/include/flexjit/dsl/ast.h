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
enum class Type : uint8_t { Error, Bool, Int };

const char* type_name(Type type);

enum class UnaryOp : uint8_t { Neg, Not };

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Mod, Lt, Le, Gt, Ge, Eq, Ne, And, Or };

// The spelling of an operator in source ("+", "&&", ...).
const char* op_spelling(UnaryOp op);
const char* op_spelling(BinaryOp op);

// Position variables every mask body sees (DESIGN.md §2).
enum class Builtin : uint8_t { B, H, Q, KV };

const char* builtin_name(Builtin builtin);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// What a `Name` expression refers to, filled in by the checker.
enum class RefKind : uint8_t { Unresolved, Builtin, Param, Const, Mask };

struct Expr {
  enum class Kind : uint8_t {
    IntLit,   // int_value
    BoolLit,  // int_value is 0 or 1
    Name,     // name; resolved through ref_kind / ref_index
    Unary,    // unary_op, args[0]
    Binary,   // binary_op, args[0], args[1]
    Call,     // name (a builtin function: abs, min, max), args
  };

  Kind kind = Kind::IntLit;
  Span span;                // the whole expression
  Type type = Type::Error;  // set by the checker

  // Literal value as written. The checker rejects values outside int32 but one: 2147483648
  // as the operand of unary minus (`-2147483648` is INT_MIN). Truncated to int32 it is
  // INT_MIN, which wrap-around negation maps to itself, so lowering needs no special case.
  int64_t int_value = 0;
  std::string name;
  UnaryOp unary_op = UnaryOp::Neg;
  BinaryOp binary_op = BinaryOp::Add;
  std::vector<ExprPtr> args;

  RefKind ref_kind = RefKind::Unresolved;
  // Builtin: static_cast<int>(Builtin); Param/Const/Mask: index into Module::decls.
  int ref_index = -1;
};

enum class DeclKind : uint8_t { Param, Const, Mask };

// One top-level declaration:
//   param NAME: TYPE             runtime scalar, passed at launch
//   const NAME: TYPE = expr      compile-time constant (value must fold to a literal)
//   mask NAME = expr             boolean mask over b, h, q, kv
struct Decl {
  DeclKind kind = DeclKind::Mask;
  std::string name;
  Span span;                         // the whole declaration
  Span name_span;                    // the declared name
  Type declared_type = Type::Error;  // Param and Const: the written type; Mask: Bool
  Span type_span;                    // Param and Const: the written type
  // Const and Mask: the body; Param: null. Also null when the declaration had a syntax error
  // (the parser keeps its name so uses of it resolve; the module then has errors).
  ExprPtr value;
};

struct Module {
  Source source;
  std::vector<Decl> decls;

  // Index of the declaration named `name`, or -1.
  int find(std::string_view name) const;
};

}  // namespace flexjit::dsl
