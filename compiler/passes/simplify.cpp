// Algebraic simplification. Every rewrite holds for every value of its operands under the
// language's exact semantics (int32 wrap-around; IEEE float32 with NaN, infinities and signed
// zeros) and gives the same bits (a NaN's payload aside), so a simplified mask or score is
// indistinguishable from the original. Each rule says why it is sound. Rewrites that look
// right on paper but are not here are listed at the end, with a counterexample.
#include <initializer_list>
#include <unordered_map>

#include "passes.h"

namespace flexjit::ir {

namespace {

std::optional<int32_t> int_constant(const Expr& e) {
  if (const IntImm* number = e.as<IntImm>()) return number->value;
  return std::nullopt;
}

bool is_int(const Expr& e, int32_t value) {
  const std::optional<int32_t> constant = int_constant(e);
  return constant && *constant == value;
}

// Compared by bits: 0.0 and -0.0 are different rules.
bool is_float(const Expr& e, float value) {
  const FloatImm* number = e.as<FloatImm>();
  return number != nullptr && fj::float_to_bits(number->value) == fj::float_to_bits(value);
}

bool is_bool(const Expr& e, bool value) {
  const BoolImm* truth = e.as<BoolImm>();
  return truth != nullptr && truth->value == value;
}

bool is_constant(const Expr& e) {
  return detail::constant_value(e).has_value();
}

bool same(const Expr& a, const Expr& b) {
  return a.same_as(b) || equal(a, b);
}

// The operand of `e` if it is a `!`.
const Expr* negated(const Expr& e) {
  const Not* node = e.as<Not>();
  return node != nullptr ? &node->a : nullptr;
}

// An Int expression `x + c` or `x - c` (c constant) as x and the wrapped offset.
struct Offset {
  Expr base;
  int32_t offset;
};

std::optional<Offset> as_offset(const Expr& e) {
  if (e.type() != Type::Int) return std::nullopt;
  if (const Add* add = e.as<Add>()) {
    if (const std::optional<int32_t> c = int_constant(add->b)) return Offset{add->a, *c};
  }
  if (const Sub* sub = e.as<Sub>()) {
    if (const std::optional<int32_t> c = int_constant(sub->b)) {
      return Offset{sub->a, fj::wrap_neg(*c)};
    }
  }
  return std::nullopt;
}

Expr simplify_node(Expr e);

// A new node, simplified (its operands already are).
Expr make(ExprKind kind, std::initializer_list<Expr> operands) {
  return simplify_node(
      make_operation(kind, std::span<const Expr>(operands.begin(), operands.size())));
}

// x + offset in canonical form: `x` for 0, `x - 3` rather than `x + (-3)` (wrap_add(x, -c) ==
// wrap_sub(x, c) for every c but INT_MIN, which has no positive counterpart and stays an Add).
Expr make_offset(const Expr& base, int32_t offset) {
  if (offset == 0) return base;
  if (offset < 0 && offset != fj::kInt32Min) {
    return make(ExprKind::Sub, {base, IntImm::make(-offset)});
  }
  return make(ExprKind::Add, {base, IntImm::make(offset)});
}

// Int `x + c` and `x - c`, with an inner offset merged: wrap-around addition is associative and
// commutative modulo 2^32, so (x + c1) + c2 == x + (c1 + c2) for every x.
Expr simplify_int_offset(const Expr& e) {
  const std::optional<Offset> outer = as_offset(e);
  if (!outer) return e;
  Offset total = *outer;
  if (const std::optional<Offset> inner = as_offset(outer->base)) {
    total = {inner->base, fj::wrap_add(inner->offset, outer->offset)};
  }
  // Already canonical: nothing merged, and the sign of the constant matches the node.
  const bool merged = !total.base.same_as(outer->base);
  const int32_t written = *int_constant(operand(e, 1));
  const bool canonical =
      total.offset != 0 &&
      (e.kind() == ExprKind::Add ? written > 0 || written == fj::kInt32Min : written > 0);
  if (!merged && canonical) return e;
  return make_offset(total.base, total.offset);
}

bool is_commutative(ExprKind kind) {
  switch (kind) {
    case ExprKind::Add:
    case ExprKind::Mul:
    case ExprKind::Min:
    case ExprKind::Max:
    case ExprKind::EQ:
    case ExprKind::NE:
    case ExprKind::And:
    case ExprKind::Or:
    case ExprKind::BitAnd:
    case ExprKind::BitOr:
    case ExprKind::BitXor:
      return true;
    default:
      return false;
  }
}

// `c < x` written as `x > c`: a < b and b > a are the same test for every int and every float
// (both false when a NaN takes part).
ExprKind mirrored(ExprKind kind) {
  switch (kind) {
    case ExprKind::LT:
      return ExprKind::GT;
    case ExprKind::LE:
      return ExprKind::GE;
    case ExprKind::GT:
      return ExprKind::LT;
    case ExprKind::GE:
      return ExprKind::LE;
    default:
      return kind;
  }
}

// The comparison that is true exactly when `kind` is false, on Ints only: on Floats a NaN
// makes both a < b and a >= b false.
std::optional<ExprKind> int_negation(ExprKind kind) {
  switch (kind) {
    case ExprKind::LT:
      return ExprKind::GE;
    case ExprKind::LE:
      return ExprKind::GT;
    case ExprKind::GT:
      return ExprKind::LE;
    case ExprKind::GE:
      return ExprKind::LT;
    default:
      return std::nullopt;
  }
}

Expr simplify_binary(const Expr& e) {
  const auto* node = static_cast<const BinaryNode*>(e.get());
  const Expr& a = node->a;
  const Expr& b = node->b;
  const ExprKind kind = e.kind();
  const Type type = a.type();  // the operands' type

  // Constants to the right: every commutative operation here commutes exactly (int addition
  // and multiplication modulo 2^32; IEEE addition and multiplication; fj::fmin / fj::fmax,
  // which order -0.0 below +0.0 and ignore NaN symmetrically; == and != of any type).
  if (is_commutative(kind) && is_constant(a) && !is_constant(b)) return make(kind, {b, a});
  if (mirrored(kind) != kind && is_constant(a) && !is_constant(b)) {
    return make(mirrored(kind), {b, a});
  }

  switch (kind) {
    case ExprKind::Add:
      if (type == Type::Int) {
        if (is_int(b, 0)) return a;  // x + 0 == x
        if (int_constant(b)) return simplify_int_offset(e);
      }
      // x + (-0.0) == x for every float: -0.0 + -0.0 is -0.0, +0.0 + -0.0 is +0.0, NaN stays.
      if (type == Type::Float && is_float(b, -0.0f)) return a;
      // a + (-y) == a - y: IEEE defines a - y as a + (-y); modulo 2^32 alike.
      if (const Neg* neg = b.as<Neg>()) return make(ExprKind::Sub, {a, neg->a});
      return e;

    case ExprKind::Sub:
      if (type == Type::Int) {
        if (is_int(b, 0)) return a;                         // x - 0 == x
        if (same(a, b)) return IntImm::make(0);             // x - x == 0 modulo 2^32
        if (is_int(a, 0)) return make(ExprKind::Neg, {b});  // wrap_sub(0, x) == wrap_neg(x)
        if (int_constant(b)) return simplify_int_offset(e);
      }
      // x - (+0.0) == x + (-0.0) == x.
      if (type == Type::Float && is_float(b, 0.0f)) return a;
      // a - (-y) == a + y, as for Add.
      if (const Neg* neg = b.as<Neg>()) return make(ExprKind::Add, {a, neg->a});
      return e;

    case ExprKind::Mul:
      if (type == Type::Int) {
        if (is_int(b, 1)) return a;                          // x * 1 == x
        if (is_int(b, 0)) return IntImm::make(0);            // x * 0 == 0 (ints only)
        if (is_int(b, -1)) return make(ExprKind::Neg, {a});  // wrap_mul(x, -1) == wrap_neg(x)
        // (x * c1) * c2 == x * (c1 * c2): multiplication modulo 2^32 is associative.
        if (const Mul* inner = a.as<Mul>();
            inner != nullptr && int_constant(b) && int_constant(inner->b)) {
          return make(ExprKind::Mul, {inner->a, make(ExprKind::Mul, {inner->b, b})});
        }
      } else {
        // x * 1.0 == x and x * -1.0 == -x exactly, for infinities, NaN and zeros too.
        if (is_float(b, 1.0f)) return a;
        if (is_float(b, -1.0f)) return make(ExprKind::Neg, {a});
      }
      return e;

    case ExprKind::Div:
      // Int floordiv(x, 1) == x, and floordiv defines x / -1 as wrap_neg(x). Float fdiv by a
      // nonzero divisor is IEEE division, which is exact by 1.0 and -1.0.
      if (is_int(b, 1) || is_float(b, 1.0f)) return a;
      if (is_int(b, -1) || is_float(b, -1.0f)) return make(ExprKind::Neg, {a});
      return e;

    case ExprKind::Mod:
      // floormod(x, 1) == floormod(x, -1) == 0 for every int (not for floats: 0.5 % 1.0).
      if (is_int(b, 1) || is_int(b, -1)) return IntImm::make(0);
      return e;

    case ExprKind::Min:
    case ExprKind::Max: {
      // min(x, x) == x: for floats too, NaN included.
      if (same(a, b)) return a;
      // min(min(x, c1), c2) == min(x, min(c1, c2)): min is associative for ints, and for
      // floats as fj::fmin defines it (the minimum in the order -inf < ... < -0.0 < +0.0 <
      // ... < inf, with NaN ignored).
      if (a.kind() == kind && is_constant(b)) {
        const auto* inner = static_cast<const BinaryNode*>(a.get());
        if (is_constant(inner->b)) return make(kind, {inner->a, make(kind, {inner->b, b})});
      }
      // min(x, INT_MAX) == x, max(x, INT_MIN) == x.
      if (kind == ExprKind::Min && is_int(b, fj::kInt32Max)) return a;
      if (kind == ExprKind::Max && is_int(b, fj::kInt32Min)) return a;
      return e;
    }

    case ExprKind::EQ:
    case ExprKind::NE: {
      const bool is_eq = kind == ExprKind::EQ;
      // x == x for ints and bools (not floats: NaN == NaN is false).
      if (type != Type::Float && same(a, b)) return BoolImm::make(is_eq);
      if (type == Type::Bool) {
        // b == true is b, b == false is !b (and != the other way).
        if (is_bool(b, true)) return is_eq ? a : make(ExprKind::Not, {a});
        if (is_bool(b, false)) return is_eq ? make(ExprKind::Not, {a}) : a;
      }
      if (type == Type::Int) {
        // Adding a constant or negating is a bijection of int32 (modulo 2^32), so it keeps
        // equality either way: x + c1 == c2 iff x == c2 - c1; -x == c iff x == -c.
        if (const std::optional<int32_t> c = int_constant(b)) {
          if (const std::optional<Offset> offset = as_offset(a)) {
            return make(kind, {offset->base, IntImm::make(fj::wrap_sub(*c, offset->offset))});
          }
          if (const Neg* neg = a.as<Neg>()) {
            return make(kind, {neg->a, IntImm::make(fj::wrap_neg(*c))});
          }
          // x - y == 0 iff x == y modulo 2^32.
          if (const Sub* sub = a.as<Sub>(); sub != nullptr && *c == 0) {
            return make(kind, {sub->a, sub->b});
          }
        }
      }
      return e;
    }

    case ExprKind::LT:
    case ExprKind::GT:
      // x < x is false for every int and float (NaN < NaN is false too).
      if (same(a, b)) return BoolImm::make(false);
      return e;
    case ExprKind::LE:
    case ExprKind::GE:
      // x <= x for ints (not floats: NaN <= NaN is false).
      if (type == Type::Int && same(a, b)) return BoolImm::make(true);
      return e;

    case ExprKind::And:
    case ExprKind::Or: {
      const bool is_and = kind == ExprKind::And;
      // Bools are pure and two-valued: a && a == a, a && !a == false, a || !a == true.
      if (same(a, b)) return a;
      const Expr* not_a = negated(a);
      const Expr* not_b = negated(b);
      if ((not_a != nullptr && same(*not_a, b)) || (not_b != nullptr && same(*not_b, a))) {
        return BoolImm::make(!is_and);
      }
      // Absorption: a && (a || c) == a, a || (a && c) == a.
      const ExprKind dual = is_and ? ExprKind::Or : ExprKind::And;
      for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        if (y->kind() != dual) continue;
        const auto* inner = static_cast<const BinaryNode*>(y->get());
        if (same(inner->a, *x) || same(inner->b, *x)) return *x;
      }
      return e;
    }

    case ExprKind::BitAnd:
    case ExprKind::BitOr:
    case ExprKind::BitXor: {
      // The identities of two's complement bits, for every int32 x: x & x == x | x == x,
      // x ^ x == 0; x & 0 == 0, x & -1 == x; x | 0 == x, x | -1 == -1; x ^ 0 == x,
      // x ^ -1 == ~x.
      if (same(a, b)) return kind == ExprKind::BitXor ? IntImm::make(0) : a;
      const int32_t identity = kind == ExprKind::BitAnd ? -1 : 0;
      if (is_int(b, identity)) return a;
      if (kind == ExprKind::BitAnd && is_int(b, 0)) return b;
      if (kind == ExprKind::BitOr && is_int(b, -1)) return b;
      if (kind == ExprKind::BitXor && is_int(b, -1)) return make(ExprKind::BitNot, {a});
      // (x op c1) op c2 == x op (c1 op c2): each is associative.
      if (a.kind() == kind && is_constant(b)) {
        const auto* inner = static_cast<const BinaryNode*>(a.get());
        if (is_constant(inner->b)) return make(kind, {inner->a, make(kind, {inner->b, b})});
      }
      return e;
    }

    case ExprKind::Shl:
    case ExprKind::Shr:
      // A shift by 0 changes nothing; 0 shifted either way, and -1 shifted right (its sign
      // fills in), stay themselves for every count.
      if (is_int(b, 0) || is_int(a, 0)) return a;
      if (kind == ExprKind::Shr && is_int(a, -1)) return a;
      return e;

    default:
      return e;
  }
}

Expr simplify_unary(const Expr& e) {
  const Expr& a = static_cast<const UnaryNode*>(e.get())->a;
  switch (e.kind()) {
    case ExprKind::Neg:
      // -(-x) == x: negation is an involution (wrap_neg too, INT_MIN included).
      if (const Neg* inner = a.as<Neg>()) return inner->a;
      // Int -(x - y) == y - x modulo 2^32. (Not floats: x == y gives -(+0.0) but +0.0.)
      if (const Sub* sub = a.as<Sub>(); sub != nullptr && e.type() == Type::Int) {
        return make(ExprKind::Sub, {sub->b, sub->a});
      }
      return e;
    case ExprKind::Abs:
      // abs(-x) == abs(abs(x)) == abs(x): floats clear the sign bit; for ints
      // abs(INT_MIN) == -INT_MIN == INT_MIN, so INT_MIN agrees too.
      if (const Neg* inner = a.as<Neg>()) return make(ExprKind::Abs, {inner->a});
      if (a.kind() == ExprKind::Abs) return a;
      return e;
    case ExprKind::Not:
      // !(a == b) is a != b for every type: with a NaN, == is false and != is true.
      if (const EQ* eq = a.as<EQ>()) return make(ExprKind::NE, {eq->a, eq->b});
      if (const NE* ne = a.as<NE>()) return make(ExprKind::EQ, {ne->a, ne->b});
      // !(a < b) is a >= b on ints only (see int_negation).
      if (const std::optional<ExprKind> negation = int_negation(a.kind())) {
        const auto* comparison = static_cast<const BinaryNode*>(a.get());
        if (comparison->a.type() == Type::Int) {
          return make(*negation, {comparison->a, comparison->b});
        }
      }
      return e;
    case ExprKind::BitNot:
      // ~~x == x: an involution.
      if (const BitNot* inner = a.as<BitNot>()) return inner->a;
      return e;
    case ExprKind::ToInt:
      // int(float(b)) == int(b) for a Bool: float(b) is exactly 0.0 or 1.0.
      if (const ToFloat* inner = a.as<ToFloat>();
          inner != nullptr && inner->a.type() == Type::Bool) {
        return make(ExprKind::ToInt, {inner->a});
      }
      return e;
    case ExprKind::ToFloat:
      // float(int(b)) == float(b) for a Bool.
      if (const ToInt* inner = a.as<ToInt>(); inner != nullptr && inner->a.type() == Type::Bool) {
        return make(ExprKind::ToFloat, {inner->a});
      }
      return e;
    case ExprKind::Floor:
    case ExprKind::Ceil:
      // floor and ceil give integral floats (or inf, NaN, a signed zero), and so does float()
      // of an int; on those floor and ceil change nothing.
      if (a.kind() == ExprKind::Floor || a.kind() == ExprKind::Ceil ||
          a.kind() == ExprKind::ToFloat) {
        return a;
      }
      return e;
    default:
      return e;
  }
}

Expr simplify_select(const Expr& e) {
  const Select* select = e.as<Select>();
  const Expr& c = select->condition;
  const Expr& t = select->true_value;
  const Expr& f = select->false_value;
  // Both branches alike: the condition does not matter (it is pure).
  if (same(t, f)) return t;
  // select(!c, x, y) == select(c, y, x).
  if (const Expr* not_c = negated(c)) return make(ExprKind::Select, {*not_c, f, t});
  // A branch that selects on the same condition again knows its outcome.
  if (const Select* inner = t.as<Select>(); inner != nullptr && same(inner->condition, c)) {
    return make(ExprKind::Select, {c, inner->true_value, f});
  }
  if (const Select* inner = f.as<Select>(); inner != nullptr && same(inner->condition, c)) {
    return make(ExprKind::Select, {c, t, inner->false_value});
  }
  // On Bools, select(c, x, y) == (c && x) || (!c && y).
  if (t.type() == Type::Bool) {
    if (is_bool(t, true) && is_bool(f, false)) return c;
    if (is_bool(t, false) && is_bool(f, true)) return make(ExprKind::Not, {c});
    if (is_bool(f, false)) return make(ExprKind::And, {c, t});
    if (is_bool(t, true)) return make(ExprKind::Or, {c, f});
    if (is_bool(t, false)) return make(ExprKind::And, {make(ExprKind::Not, {c}), f});
    if (is_bool(f, true)) return make(ExprKind::Or, {make(ExprKind::Not, {c}), t});
  }
  return e;
}

// One rewrite at the top of e (operands simplified), or e itself.
Expr rewrite(const Expr& e) {
  const int count = operand_count(e.kind());
  if (count == 0 || e.kind() == ExprKind::Load) return e;
  if (e.kind() == ExprKind::Select) return simplify_select(e);
  if (count == 1) return simplify_unary(e);
  return simplify_binary(e);
}

// Rewrites at the top until nothing applies. Every rule shrinks the expression or moves it
// toward one canonical form, so this ends; the bound only guards against a future rule pair
// that undoes each other.
Expr simplify_node(Expr e) {
  constexpr int kMaxRounds = 64;
  for (int round = 0; round < kMaxRounds; ++round) {
    Expr next = detail::fold_node(e);
    if (next.same_as(e)) next = rewrite(e);
    if (next.same_as(e)) break;
    e = std::move(next);
  }
  return e;
}

class Simplifier : public IRMutator {
 public:
  // Memoized by node like the constant folder, so shared nodes stay shared.
  Expr mutate(const Expr& e) override {
    if (!e.defined()) return e;
    const auto found = simplified_.find(e.get());
    if (found != simplified_.end()) return found->second;
    Expr result = simplify_node(IRMutator::mutate(e));
    simplified_.emplace(e.get(), result);
    return result;
  }

 private:
  std::unordered_map<const ExprNode*, Expr> simplified_;
};

// Rewrites deliberately left out (each fails for some value):
// - Float x - x -> 0.0 (inf - inf and NaN - NaN are NaN); float x * 0.0 -> 0.0 (NaN * 0.0 is
//   NaN, -1.0 * 0.0 is -0.0); float x + 0.0 -> x (-0.0 + 0.0 is +0.0); float 0.0 - x -> -x.
// - Float !(a < b) -> a >= b and x <= x -> true, x == x -> true: false for NaN.
// - Int x + c1 < c2 -> x < c2 - c1, and (q - kv) >= 0 -> q >= kv: the subtraction can wrap
//   (q = INT_MAX, kv = -1 gives q - kv == INT_MIN < 0 while q >= kv). Only == and != survive
//   adding a constant. The interval analysis, which knows the operands' ranges, decides such
//   comparisons instead.
// - Float re-association ((x + c1) + c2 -> x + (c1 + c2)): each addition rounds.
// - int(float(x)) -> x for an Int x: float(x) rounds beyond 2^24.

}  // namespace

Expr simplify(const Expr& e) {
  Simplifier simplifier;
  return simplifier.mutate(e);
}

}  // namespace flexjit::ir
