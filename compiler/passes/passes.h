// What the IR passes (fold.cpp, simplify.cpp, cse.cpp, passes.cpp) share; not a public API.
#pragma once

#include <optional>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/semantics.h"

namespace flexjit::ir::detail {

// The value of an immediate (IntImm, FloatImm, BoolImm), or nullopt.
std::optional<Value> constant_value(const Expr& e);

// The immediate of `type` holding `value`.
Expr make_constant(Type type, const Value& value);

// `e`, whose operands are already folded, with its top node folded: an operation on constants
// becomes a constant, and the boolean identities of fold_constants() apply. Returns `e` itself
// when nothing folds.
Expr fold_node(const Expr& e);

}  // namespace flexjit::ir::detail
