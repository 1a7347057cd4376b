// Internal to the compiler: how a mask bounds kv (docs/architecture.md#tile-analysis "KV ranges").
// The plan is the mask's boolean structure over the comparisons that constrain kv; the host's
// kv_range() evaluates it and the CUDA emitter writes it out as the kv_range() hook, both through
// the fj::kvr functions of templates/fj_ops.cuh, so the two agree.
#pragma once

#include <unordered_map>
#include <vector>

#include "flexjit/compiler/ir.h"

namespace flexjit {

// One inverse step from an operation's result down to its operand that reads kv.
struct KvStep {
  enum Kind { Add, Minuend, Subtrahend, Neg, Mul, Div, Abs, Min, Max };
  Kind kind = Add;
  ir::Expr other;  // the operand without kv; undefined for Neg and Abs
};

struct KvPlan {
  enum Kind {
    All,        // nothing bounds kv
    None,       // the condition is false for every key
    Intersect,  // every child must hold
    Hull,       // some child must hold
    Guard,      // `condition` does not read kv: none if surely false (with polarity), else all
    Atom,       // `comparison` (with polarity) rewritten as `f op other`, f = steps down to kv
  };
  Kind kind = All;
  std::vector<KvPlan> children;  // Intersect, Hull
  ir::Expr condition;            // Guard: a Bool without kv; Atom: the comparison node
  bool polarity = true;          // Guard, Atom: the condition holds (true) or fails (false)
  int op = 0;                    // Atom: fj::kvr::CompareOp
  ir::Expr other;                // Atom: the side without kv
  std::vector<KvStep> steps;     // Atom: from f down to kv
};

// The plan of a Bool expression (a mask) holding (polarity) or failing (!polarity).
KvPlan plan_kv_range(const ir::Expr& mask, bool polarity = true);

// The plans that narrow the right operand of the || nodes of `mask`, by node: where the left
// operand may fail. Only where it bounds kv with a few comparisons (each costs two interval
// evaluations per tile). && is not narrowed: the standard masks are exact without it, and in
// the kernel the extra live intervals cost an occupancy step (sliding: 168 -> 182 registers,
// 3 -> 2 CTAs per SM, 1.84 -> 2.47 ms at 16k).
std::unordered_map<const ir::ExprNode*, KvPlan> plan_narrowing(const ir::Expr& mask);

}  // namespace flexjit
