// KV ranges: which keys a range of queries may see, from the mask's comparisons on kv.
#include "kv_range_plan.h"

#include <unordered_set>

#include "analysis.h"

namespace flexjit {

namespace {

bool reads_kv(const ir::Expr& e) {
  return ir::uses_variable(e, ir::Variable::KV);
}

// The steps from `f` down to kv, when f reaches kv through invertible operations only (kv
// read once). Empty optional-like: returns false when f is not invertible.
bool invert_chain(const ir::Expr& f, std::vector<KvStep>& steps) {
  for (ir::Expr e = f;;) {
    const ir::ExprKind kind = e.kind();
    if (kind == ir::ExprKind::Var) return e.as<ir::Var>()->variable == ir::Variable::KV;
    if (e.type() != ir::Type::Int) return false;
    const int count = ir::operand_count(kind);
    if (count == 1) {
      switch (kind) {
        case ir::ExprKind::Neg:
          steps.push_back({KvStep::Neg, {}});
          break;
        case ir::ExprKind::Abs:
          steps.push_back({KvStep::Abs, {}});
          break;
        default:
          return false;
      }
      e = ir::operand(e, 0);
      continue;
    }
    if (count != 2) return false;
    const ir::Expr& a = ir::operand(e, 0);
    const ir::Expr& b = ir::operand(e, 1);
    const bool in_a = reads_kv(a), in_b = reads_kv(b);
    if (in_a == in_b) return false;  // kv on both sides cannot be solved for
    const ir::Expr& other = in_a ? b : a;
    switch (kind) {
      case ir::ExprKind::Add:
        steps.push_back({KvStep::Add, other});
        break;
      case ir::ExprKind::Sub:
        steps.push_back({in_a ? KvStep::Minuend : KvStep::Subtrahend, other});
        break;
      case ir::ExprKind::Mul:
        steps.push_back({KvStep::Mul, other});
        break;
      case ir::ExprKind::Div:
        if (!in_a) return false;  // kv in the divisor
        steps.push_back({KvStep::Div, other});
        break;
      case ir::ExprKind::Min:
        steps.push_back({KvStep::Min, other});
        break;
      case ir::ExprKind::Max:
        steps.push_back({KvStep::Max, other});
        break;
      default:
        return false;
    }
    e = in_a ? a : b;
  }
}

// The comparison `a kind b` as `f op other` with f the kv side, under a polarity.
int compare_op(ir::ExprKind kind, bool kv_on_left, bool polarity, bool* solvable) {
  // Negation first: !(a < b) is a >= b, and so on; != and !(==) bound nothing.
  if (!polarity) {
    switch (kind) {
      case ir::ExprKind::LT:
        kind = ir::ExprKind::GE;
        break;
      case ir::ExprKind::LE:
        kind = ir::ExprKind::GT;
        break;
      case ir::ExprKind::GT:
        kind = ir::ExprKind::LE;
        break;
      case ir::ExprKind::GE:
        kind = ir::ExprKind::LT;
        break;
      case ir::ExprKind::NE:
        kind = ir::ExprKind::EQ;
        break;
      default:
        kind = ir::ExprKind::NE;
        break;
    }
  }
  *solvable = kind != ir::ExprKind::NE;
  const bool swap = !kv_on_left;  // `other op f` is `f op' other`
  switch (kind) {
    case ir::ExprKind::LT:
      return swap ? fj::kvr::kGreater : fj::kvr::kLess;
    case ir::ExprKind::LE:
      return swap ? fj::kvr::kGreaterEqual : fj::kvr::kLessEqual;
    case ir::ExprKind::GT:
      return swap ? fj::kvr::kLess : fj::kvr::kGreater;
    case ir::ExprKind::GE:
      return swap ? fj::kvr::kLessEqual : fj::kvr::kGreaterEqual;
    default:
      return fj::kvr::kEqual;
  }
}

bool is_comparison(ir::ExprKind kind) {
  return kind == ir::ExprKind::LT || kind == ir::ExprKind::LE || kind == ir::ExprKind::GT ||
         kind == ir::ExprKind::GE || kind == ir::ExprKind::EQ || kind == ir::ExprKind::NE;
}

KvPlan leaf(KvPlan::Kind kind) {
  KvPlan plan;
  plan.kind = kind;
  return plan;
}

// Intersect or Hull of two plans, with the identities that hold exactly for fj::kvr's bounds
// (every bound lies within all()): all() absorbs a hull and drops out of an intersection, and
// none() drops out of a hull. So `window || global_token[kv]` bounds nothing and its hook is a
// constant rather than per-tile code whose value is all() anyway (the Longformer mask: that
// code in the consumers made ptxas serialize the wgmma and the kernel was built twice,
// docs/hopper.md#pitfalls).
KvPlan combine(KvPlan::Kind kind, KvPlan a, KvPlan b) {
  const bool hull = kind == KvPlan::Hull;
  for (KvPlan* side : {&a, &b}) {
    KvPlan& other = side == &a ? b : a;
    if (side->kind == KvPlan::All) return hull ? leaf(KvPlan::All) : std::move(other);
    if (side->kind == KvPlan::None && hull) return std::move(other);
  }
  KvPlan plan;
  plan.kind = kind;
  plan.children.push_back(std::move(a));
  plan.children.push_back(std::move(b));
  return plan;
}

KvPlan plan(const ir::Expr& e, bool polarity) {
  if (e.kind() == ir::ExprKind::BoolImm) {
    return leaf(e.as<ir::BoolImm>()->value == polarity ? KvPlan::All : KvPlan::None);
  }
  if (!reads_kv(e)) {
    KvPlan guard = leaf(KvPlan::Guard);
    guard.condition = e;
    guard.polarity = polarity;
    return guard;
  }
  switch (e.kind()) {
    case ir::ExprKind::And:
    case ir::ExprKind::Or: {
      // a && b holds only where both may; !(a && b) is !a || !b (De Morgan).
      const bool conjunction = (e.kind() == ir::ExprKind::And) == polarity;
      return combine(conjunction ? KvPlan::Intersect : KvPlan::Hull,
                     plan(ir::operand(e, 0), polarity), plan(ir::operand(e, 1), polarity));
    }
    case ir::ExprKind::Not:
      return plan(ir::operand(e, 0), !polarity);
    case ir::ExprKind::Select: {
      const ir::Expr& cond = ir::operand(e, 0);
      KvPlan then_plan = plan(ir::operand(e, 1), polarity);
      KvPlan else_plan = plan(ir::operand(e, 2), polarity);
      if (reads_kv(cond)) {
        return combine(KvPlan::Hull, std::move(then_plan), std::move(else_plan));
      }
      return combine(KvPlan::Hull,
                     combine(KvPlan::Intersect, plan(cond, true), std::move(then_plan)),
                     combine(KvPlan::Intersect, plan(cond, false), std::move(else_plan)));
    }
    default:
      break;
  }
  if (!is_comparison(e.kind()) || ir::operand(e, 0).type() != ir::Type::Int) {
    return leaf(KvPlan::All);
  }
  const ir::Expr& a = ir::operand(e, 0);
  const ir::Expr& b = ir::operand(e, 1);
  const bool in_a = reads_kv(a);
  if (in_a == reads_kv(b)) return leaf(KvPlan::All);
  KvPlan atom = leaf(KvPlan::Atom);
  bool solvable = false;
  atom.op = compare_op(e.kind(), in_a, polarity, &solvable);
  if (!solvable || !invert_chain(in_a ? a : b, atom.steps)) return leaf(KvPlan::All);
  atom.condition = e;
  atom.polarity = polarity;
  atom.other = in_a ? b : a;
  return atom;
}

int atom_count(const KvPlan& plan) {
  int count = plan.kind == KvPlan::Atom ? 1 : 0;
  for (const KvPlan& child : plan.children)
    count += atom_count(child);
  return count;
}

// Whether a plan bounds kv at all (a plan of Alls and Guards only does not).
bool bounds_kv(const KvPlan& plan) {
  if (plan.kind == KvPlan::Atom) return true;
  for (const KvPlan& child : plan.children)
    if (bounds_kv(child)) return true;
  return false;
}

constexpr int kMaxNarrowingAtoms = 4;

void collect_narrowing(const ir::Expr& e, std::unordered_set<const ir::ExprNode*>& visited,
                       std::unordered_map<const ir::ExprNode*, KvPlan>& out) {
  if (!visited.insert(e.get()).second) return;
  const int count = ir::operand_count(e.kind());
  for (int i = 0; i < count; ++i)
    collect_narrowing(ir::operand(e, i), visited, out);
  if (e.kind() != ir::ExprKind::Or) return;
  const ir::Expr& left = ir::operand(e, 0);
  if (!reads_kv(left) || !reads_kv(ir::operand(e, 1))) return;
  KvPlan where = plan(left, false);
  if (bounds_kv(where) && atom_count(where) <= kMaxNarrowingAtoms) {
    out.emplace(e.get(), std::move(where));
  }
}

}  // namespace

KvPlan plan_kv_range(const ir::Expr& mask, bool polarity) {
  return plan(mask, polarity);
}

std::unordered_map<const ir::ExprNode*, KvPlan> plan_narrowing(const ir::Expr& mask) {
  std::unordered_map<const ir::ExprNode*, KvPlan> narrowing;
  std::unordered_set<const ir::ExprNode*> visited;
  collect_narrowing(mask, visited, narrowing);
  return narrowing;
}

MaskPlans plan_mask(const ir::Expr& mask) {
  MaskPlans plans{mask, plan_kv_range(mask), plan_narrowing(mask), {}};
  plans.program = IntervalProgram(plans.mask, plans.kv, plans.narrowing);
  return plans;
}

KvRange kv_range(const Variant& variant, int32_t b, int32_t h, int32_t q0, int32_t q1,
                 const fj::MaskParams* params) {
  return MaskAnalysis(variant).kv_range(b, h, q0, q1, params);
}

}  // namespace flexjit
