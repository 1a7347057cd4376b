// Internal to the compiler: the interval analysis that classify_tile and kv_range share, and
// what it precomputes for a mask.
#pragma once

#include <unordered_map>

#include "flexjit/compiler/mask.h"
#include "interval_tape.h"
#include "kv_range_plan.h"

namespace flexjit {

// A mask's plans: the kv plan of the whole mask (kv_range) and, for each || node whose left
// operand bounds kv, the plan of where that operand may fail, which narrows the keys the right
// operand is evaluated over (fj::ival::narrowed_or). The
// analyses run `program`, the mask and these plans compiled.
struct MaskPlans {
  ir::Expr mask;
  KvPlan kv;
  std::unordered_map<const ir::ExprNode*, KvPlan> narrowing;
  IntervalProgram program;
};

// The plans of `mask`, a Bool expression (of another type, only `program.value()` has a
// meaning: its kv plan's guards would read a Float's ints).
MaskPlans plan_mask(const ir::Expr& mask);

// Every scalar reads 0 and every array is empty when the caller passes no parameters.
const fj::MaskParams& params_or_zero(const fj::MaskParams* params);

// A variant without a mask (a default-constructed Variant) shows nothing.
ir::Expr mask_of(const Variant& variant);

}  // namespace flexjit
