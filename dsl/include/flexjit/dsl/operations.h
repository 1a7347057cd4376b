// The language's operations, one row each: every fact about an operation that a switch needs
// is written here once, and the switches are generated from these rows:
//   - the IR's node kinds (ir::ExprKind, FJ_FOR_EACH_EXPR in flexjit/compiler/ir.h) and their
//     operand counts, result types (ir::result_type) and printed form (ir::to_string);
//   - the source spellings the parser matches and diagnostics print (dsl::op_spelling,
//     dsl::function_name), and lowering from the dsl's operators and functions to IR nodes;
//   - the meaning: the host scalar functions of templates/fj_ops.cuh that the checker's and
//     the IR's constant folding and the evaluator call (dsl::fold_*, ir::apply_operation), and
//     the fj::ival / fj::fival interval functions of the analysis;
//   - the CUDA the emitter writes: the same fj_ops functions by name.
// Adding an operation is one row here, its IR node struct (ir.h), and its LLVM forms
// (compiler/codegen/llvm/), which a static check asks for.
//
// This header holds the table, not the functions it names: a user includes
// templates/fj_ops.cuh (and <functional>) where it calls them.
#pragma once

#include <cstdint>

namespace flexjit::ops {

// How an operation is typed (the IR's rules; the checker adds int-to-float promotion).
enum class Typing : uint8_t {
  Arithmetic,  // two operands of one numeric type -> that type
  Numeric,     // one numeric operand -> its type
  Equality,    // two operands of one type -> Bool
  Ordering,    // two operands of one numeric type -> Bool
  Logic,       // Bool operands -> Bool
  Select,      // Bool, then two values of one type -> that type
  ToInt,       // Bool or Float -> Int
  ToFloat,     // Bool or Int -> Float
  Math,        // Float -> Float
  Bitwise,     // Int operands -> Int (no promotion: a Bool or a Float is an error)
};

// How an operation is printed (and written in source): `a + b`, `min(a, b)`, `-a`.
enum class Syntax : uint8_t { Infix, Call, Prefix };

// How the emitted CUDA writes it on values: a call of the row's fj_ops function, or the
// operator of the row's spelling (`(a < b)`, `(!a)`, `(c ? a : b)`).
enum class Emit : uint8_t { Call, Operator };

// Stands in a row for a function that the operation does not have (an int form of tanh): the
// generated code never calls it, because typing rules the operand type out.
struct Undefined {
  template <class... Args>
  int32_t operator()(Args...) const {
    __builtin_trap();
  }
};

}  // namespace flexjit::ops

// X(C, node, arity, typing, syntax, spelling, source, emit, int_fn, float_fn, ival_fn, fival_fn)
//   C          passed through from the caller (FJ_FOR_EACH_EXPR passes its own X)
//   node       the IR node kind (ir::ExprKind::node, struct ir::node)
//   arity      operand count
//   typing     ops::Typing
//   syntax     ops::Syntax of the printer and the source
//   spelling   the operator or function name, in source, in printed IR and, for
//              emit == Operator, in CUDA
//   source     what the dsl writes: Binary(dsl::BinaryOp), Unary(dsl::UnaryOp),
//              Call(dsl::Function), or Internal() (built by lowering only)
//   emit       ops::Emit
//   int_fn     the host scalar function on Int (and Bool, as 0 or 1) operands
//   float_fn   the host scalar function on Float operands
//   ival_fn    the interval function on Int (and Bool) operands
//   fival_fn   the interval function on Float operands
// The Call-emitted functions are named as CUDA writes them (the emitter stringizes them).
// Rows are in ExprKind order, which the host code's IR serialization writes (host_code.h): a new
// row goes at the end, so that the bytes of existing IR stay the same. Select's host scalar form is
// a choice, written by hand where it is used; its interval function is picked by the branches'
// type.
#define FJ_FOR_EACH_OPERATION(X, C)                                                               \
  X(C, Add, 2, Arithmetic, Infix, "+", Binary(Add), Call, fj::wrap_add, fj::fadd, fj::ival::add,  \
    fj::fival::add)                                                                               \
  X(C, Sub, 2, Arithmetic, Infix, "-", Binary(Sub), Call, fj::wrap_sub, fj::fsub, fj::ival::sub,  \
    fj::fival::sub)                                                                               \
  X(C, Mul, 2, Arithmetic, Infix, "*", Binary(Mul), Call, fj::wrap_mul, fj::fmul, fj::ival::mul,  \
    fj::fival::mul)                                                                               \
  X(C, Div, 2, Arithmetic, Infix, "/", Binary(Div), Call, fj::floordiv, fj::fdiv, fj::ival::div,  \
    fj::fival::div)                                                                               \
  X(C, Mod, 2, Arithmetic, Infix, "%", Binary(Mod), Call, fj::floormod, fj::fmod_floor,           \
    fj::ival::mod, fj::fival::mod)                                                                \
  X(C, Min, 2, Arithmetic, Call, "min", Call(Min), Call, fj::min, fj::fmin, fj::ival::min,        \
    fj::fival::min)                                                                               \
  X(C, Max, 2, Arithmetic, Call, "max", Call(Max), Call, fj::max, fj::fmax, fj::ival::max,        \
    fj::fival::max)                                                                               \
  X(C, Abs, 1, Numeric, Call, "abs", Call(Abs), Call, fj::wrap_abs, fj::fabs, fj::ival::abs,      \
    fj::fival::abs)                                                                               \
  X(C, Neg, 1, Numeric, Prefix, "-", Unary(Neg), Call, fj::wrap_neg, fj::fneg, fj::ival::neg,     \
    fj::fival::neg)                                                                               \
  X(C, EQ, 2, Equality, Infix, "==", Binary(Eq), Operator, std::equal_to<>(), std::equal_to<>(),  \
    fj::ival::eq, fj::fival::eq)                                                                  \
  X(C, NE, 2, Equality, Infix, "!=", Binary(Ne), Operator, std::not_equal_to<>(),                 \
    std::not_equal_to<>(), fj::ival::ne, fj::fival::ne)                                           \
  X(C, LT, 2, Ordering, Infix, "<", Binary(Lt), Operator, std::less<>(), std::less<>(),           \
    fj::ival::lt, fj::fival::lt)                                                                  \
  X(C, LE, 2, Ordering, Infix, "<=", Binary(Le), Operator, std::less_equal<>(),                   \
    std::less_equal<>(), fj::ival::le, fj::fival::le)                                             \
  X(C, GT, 2, Ordering, Infix, ">", Binary(Gt), Operator, std::greater<>(), std::greater<>(),     \
    fj::ival::gt, fj::fival::gt)                                                                  \
  X(C, GE, 2, Ordering, Infix, ">=", Binary(Ge), Operator, std::greater_equal<>(),                \
    std::greater_equal<>(), fj::ival::ge, fj::fival::ge)                                          \
  X(C, And, 2, Logic, Infix, "&&", Binary(And), Operator, std::logical_and<>(),                   \
    ::flexjit::ops::Undefined(), fj::ival::logical_and, ::flexjit::ops::Undefined())              \
  X(C, Or, 2, Logic, Infix, "||", Binary(Or), Operator, std::logical_or<>(),                      \
    ::flexjit::ops::Undefined(), fj::ival::logical_or, ::flexjit::ops::Undefined())               \
  X(C, Not, 1, Logic, Prefix, "!", Unary(Not), Operator, std::logical_not<>(),                    \
    ::flexjit::ops::Undefined(), fj::ival::logical_not, ::flexjit::ops::Undefined())              \
  X(C, Select, 3, Select, Infix, "?", Internal(), Operator, ::flexjit::ops::Undefined(),          \
    ::flexjit::ops::Undefined(), fj::ival::select, fj::fival::select)                             \
  X(C, ToInt, 1, ToInt, Call, "int", Call(Int), Call, std::identity(), fj::float_to_int,          \
    std::identity(), fj::fival::to_int)                                                           \
  X(C, ToFloat, 1, ToFloat, Call, "float", Call(Float), Call, fj::int_to_float, std::identity(),  \
    fj::fival::from_int, ::flexjit::ops::Undefined())                                             \
  X(C, Tanh, 1, Math, Call, "tanh", Call(Tanh), Call, ::flexjit::ops::Undefined(), fj::ftanh,     \
    ::flexjit::ops::Undefined(), fj::fival::tanh)                                                 \
  X(C, Exp, 1, Math, Call, "exp", Call(Exp), Call, ::flexjit::ops::Undefined(), fj::fexp,         \
    ::flexjit::ops::Undefined(), fj::fival::exp)                                                  \
  X(C, Exp2, 1, Math, Call, "exp2", Call(Exp2), Call, ::flexjit::ops::Undefined(), fj::fexp2,     \
    ::flexjit::ops::Undefined(), fj::fival::exp2)                                                 \
  X(C, Log, 1, Math, Call, "log", Call(Log), Call, ::flexjit::ops::Undefined(), fj::flog,         \
    ::flexjit::ops::Undefined(), fj::fival::log)                                                  \
  X(C, Log2, 1, Math, Call, "log2", Call(Log2), Call, ::flexjit::ops::Undefined(), fj::flog2,     \
    ::flexjit::ops::Undefined(), fj::fival::log2)                                                 \
  X(C, Sqrt, 1, Math, Call, "sqrt", Call(Sqrt), Call, ::flexjit::ops::Undefined(), fj::fsqrt,     \
    ::flexjit::ops::Undefined(), fj::fival::sqrt)                                                 \
  X(C, Sigmoid, 1, Math, Call, "sigmoid", Call(Sigmoid), Call, ::flexjit::ops::Undefined(),       \
    fj::fsigmoid, ::flexjit::ops::Undefined(), fj::fival::sigmoid)                                \
  X(C, Floor, 1, Math, Call, "floor", Call(Floor), Call, ::flexjit::ops::Undefined(), fj::ffloor, \
    ::flexjit::ops::Undefined(), fj::fival::floor)                                                \
  X(C, Ceil, 1, Math, Call, "ceil", Call(Ceil), Call, ::flexjit::ops::Undefined(), fj::fceil,     \
    ::flexjit::ops::Undefined(), fj::fival::ceil)                                                 \
  X(C, BitAnd, 2, Bitwise, Infix, "&", Binary(BitAnd), Operator, std::bit_and<>(),                \
    ::flexjit::ops::Undefined(), fj::ival::bit_and, ::flexjit::ops::Undefined())                  \
  X(C, BitOr, 2, Bitwise, Infix, "|", Binary(BitOr), Operator, std::bit_or<>(),                   \
    ::flexjit::ops::Undefined(), fj::ival::bit_or, ::flexjit::ops::Undefined())                   \
  X(C, BitXor, 2, Bitwise, Infix, "^", Binary(BitXor), Operator, std::bit_xor<>(),                \
    ::flexjit::ops::Undefined(), fj::ival::bit_xor, ::flexjit::ops::Undefined())                  \
  X(C, BitNot, 1, Bitwise, Prefix, "~", Unary(BitNot), Operator, std::bit_not<>(),                \
    ::flexjit::ops::Undefined(), fj::ival::bit_not, ::flexjit::ops::Undefined())                  \
  X(C, Shl, 2, Bitwise, Infix, "<<", Binary(Shl), Call, fj::shl, ::flexjit::ops::Undefined(),     \
    fj::ival::shl, ::flexjit::ops::Undefined())                                                   \
  X(C, Shr, 2, Bitwise, Infix, ">>", Binary(Shr), Call, fj::shr, ::flexjit::ops::Undefined(),     \
    fj::ival::shr, ::flexjit::ops::Undefined())

// The host function of a row's `fn` as a generic lambda: fj_ops functions are overloaded (int
// and interval forms share names), so they are called, not taken by address.
#define FJ_OPERATION_FUNCTION(fn) [](auto... operands) { return fn(operands...); }

// The rows of one source form, for the dsl's switches: FJ_FOR_EACH_SOURCE(BINARY, M) expands
// M(name, <the row from node on>) for each row whose source is Binary(name), and likewise
// UNARY for Unary(name) and CALL for Call(name) (dsl::Function::name). Rows of other forms
// expand to nothing.
#define FJ_FOR_EACH_SOURCE(FORM, M) FJ_FOR_EACH_OPERATION(FJ_SOURCE_ROW_##FORM, M)
#define FJ_SOURCE_ROW_BINARY(M, node, arity, typing, syntax, spelling, source, ...)             \
  FJ_SOURCE_SELECT(FJ_SOURCE_BINARY_##source, M, node, arity, typing, syntax, spelling, source, \
                   __VA_ARGS__)
#define FJ_SOURCE_ROW_UNARY(M, node, arity, typing, syntax, spelling, source, ...)             \
  FJ_SOURCE_SELECT(FJ_SOURCE_UNARY_##source, M, node, arity, typing, syntax, spelling, source, \
                   __VA_ARGS__)
#define FJ_SOURCE_ROW_CALL(M, node, arity, typing, syntax, spelling, source, ...)             \
  FJ_SOURCE_SELECT(FJ_SOURCE_CALL_##source, M, node, arity, typing, syntax, spelling, source, \
                   __VA_ARGS__)
// The source (`Binary(Add)`) pasted onto FJ_SOURCE_<FORM>_ expands to `KEEP, Add` when the
// form is the one wanted, else to `DROP, Add`.
#define FJ_SOURCE_SELECT(selected, M, ...) FJ_SOURCE_SELECT_(selected, M, __VA_ARGS__)
#define FJ_SOURCE_SELECT_(action, name, M, ...) FJ_SOURCE_##action(name, M, __VA_ARGS__)
#define FJ_SOURCE_KEEP(name, M, ...) M(name, __VA_ARGS__)
#define FJ_SOURCE_DROP(...)
#define FJ_SOURCE_BINARY_Binary(name) KEEP, name
#define FJ_SOURCE_BINARY_Unary(name) DROP, name
#define FJ_SOURCE_BINARY_Call(name) DROP, name
#define FJ_SOURCE_BINARY_Internal() DROP, _
#define FJ_SOURCE_UNARY_Binary(name) DROP, name
#define FJ_SOURCE_UNARY_Unary(name) KEEP, name
#define FJ_SOURCE_UNARY_Call(name) DROP, name
#define FJ_SOURCE_UNARY_Internal() DROP, _
#define FJ_SOURCE_CALL_Binary(name) DROP, name
#define FJ_SOURCE_CALL_Unary(name) DROP, name
#define FJ_SOURCE_CALL_Call(name) KEEP, name
#define FJ_SOURCE_CALL_Internal() DROP, _
