// Internal to the compiler: the interval analysis that classify_tile and kv_range share, and
// what it precomputes for a mask.
#pragma once

#include <unordered_map>

#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/semantics.h"
#include "kv_range_plan.h"

namespace flexjit {

// The box of inputs one analysis covers: concrete b, h and params, ranges of q and kv.
struct TileBox {
  const Tile& tile;  // b and h
  fj::Interval q, kv;
  const fj::MaskParams& params;
};

// A mask's plans: the kv plan of the whole mask (kv_range) and, for each && / || node whose
// left operand bounds kv, the plan of where that operand may hold (&&) or fail (||), which
// narrows the keys the right operand is evaluated over (fj::ival::narrowed_and / _or).
struct MaskPlans {
  ir::Expr mask;
  KvPlan kv;
  std::unordered_map<const ir::ExprNode*, KvPlan> narrowing;
};

MaskPlans plan_mask(const ir::Expr& mask);

// The values `e` takes over the box (sound: every value of every point is included). With
// `plans` (of an expression containing e), && and || narrow their right operand.
ir::IntervalValue evaluate_interval(const ir::Expr& e, const TileBox& box,
                                    const MaskPlans* plans = nullptr);

// The kv bound of a plan for the box's queries (the box's kv is unused).
fj::kvr::Bound evaluate_plan(const KvPlan& plan, const TileBox& box);

// Every scalar reads 0 and every array is empty when the caller passes no parameters.
const fj::MaskParams& params_or_zero(const fj::MaskParams* params);

// A variant without a mask (a default-constructed Variant) shows nothing.
ir::Expr mask_of(const Variant& variant);

}  // namespace flexjit
