// The IR passes (fold, simplify, CSE, the pipeline): the simplifier's rules one by one, CSE's
// sharing, and a fuzzer that checks on random well-typed expressions (ints, floats, bools,
// variables, params, array reads, mask shapes; random_ir.h) that every pass keeps the value bit
// for bit and that the interval evaluation of the expressions is sound.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/semantics.h"
#include "random_ir.h"

namespace flexjit {
namespace {

using ir::Expr;
using ir::Type;
using namespace testing;

Expr flag(int slot = 3) {
  return ir::Param::make(Type::Bool, slot, slot == 3 ? "c" : "d");
}

// ---------------------------------------------------------------------------------------------
// Evaluation at a point and over a box, written against semantics.h only (the evaluator in
// mask.cpp belongs to lowering).

struct Point {
  int32_t b = 0, h = 0, q = 0, kv = 0;
  float score = 0.0f;
  const fj::MaskParams* params = nullptr;
};

ir::Value param_value(const ir::Param* param, const fj::MaskParams& params) {
  const int32_t slot = params.scalar[param->slot];
  switch (param->type) {
    case Type::Bool:
      return ir::Value::of_bool(slot != 0);
    case Type::Float:
      return ir::Value::of_float(fj::bits_to_float(slot));
    case Type::Int:
      break;
  }
  return ir::Value::of_int(slot);
}

class Evaluator {
 public:
  explicit Evaluator(const Point& point) : point_(point) {}

  ir::Value operator()(const Expr& e) {
    const auto found = memo_.find(e.get());
    if (found != memo_.end()) return found->second;
    const ir::Value value = compute(e);
    memo_.emplace(e.get(), value);
    return value;
  }

 private:
  ir::Value compute(const Expr& e) {
    switch (e.kind()) {
      case ir::ExprKind::IntImm:
        return ir::Value::of_int(e.as<ir::IntImm>()->value);
      case ir::ExprKind::FloatImm:
        return ir::Value::of_float(e.as<ir::FloatImm>()->value);
      case ir::ExprKind::BoolImm:
        return ir::Value::of_bool(e.as<ir::BoolImm>()->value);
      case ir::ExprKind::Var:
        switch (e.as<ir::Var>()->variable) {
          case ir::Variable::B:
            return ir::Value::of_int(point_.b);
          case ir::Variable::H:
            return ir::Value::of_int(point_.h);
          case ir::Variable::Q:
            return ir::Value::of_int(point_.q);
          case ir::Variable::KV:
            return ir::Value::of_int(point_.kv);
          case ir::Variable::Score:
            return ir::Value::of_float(point_.score);
        }
        break;
      case ir::ExprKind::Param:
        return param_value(e.as<ir::Param>(), *point_.params);
      case ir::ExprKind::Load: {
        const ir::Load* load = e.as<ir::Load>();
        return ir::load(point_.params->array[load->slot], load->type, (*this)(load->row).i,
                        (*this)(load->col).i);
      }
      default:
        break;
    }
    const int count = ir::operand_count(e.kind());
    std::vector<ir::Value> values;
    std::vector<Type> types;
    for (int i = 0; i < count; ++i) {
      values.push_back((*this)(ir::operand(e, i)));
      types.push_back(ir::operand(e, i).type());
    }
    return ir::apply_operation(e.kind(), types, values);
  }

  const Point& point_;
  std::unordered_map<const ir::ExprNode*, ir::Value> memo_;
};

// Concrete b, h and params; ranges of q, kv and the score.
struct Box {
  int32_t b = 0, h = 0;
  fj::Interval q = fj::Interval::point(0), kv = fj::Interval::point(0);
  fj::FloatInterval score = fj::FloatInterval::point(0.0f);
  const fj::MaskParams* params = nullptr;
};

class IntervalEvaluator {
 public:
  explicit IntervalEvaluator(const Box& box) : box_(box) {}

  ir::IntervalValue operator()(const Expr& e) {
    const auto found = memo_.find(e.get());
    if (found != memo_.end()) return found->second;
    const ir::IntervalValue value = compute(e);
    memo_.emplace(e.get(), value);
    return value;
  }

 private:
  ir::IntervalValue compute(const Expr& e) {
    ir::IntervalValue value;
    switch (e.kind()) {
      case ir::ExprKind::IntImm:
      case ir::ExprKind::BoolImm:
      case ir::ExprKind::FloatImm:
      case ir::ExprKind::Param: {
        const ir::Value point = Evaluator(Point{0, 0, 0, 0, 0.0f, box_.params})(e);
        value.ints = fj::Interval::point(point.i);
        value.floats = fj::FloatInterval::point(point.f);
        return value;
      }
      case ir::ExprKind::Var:
        switch (e.as<ir::Var>()->variable) {
          case ir::Variable::B:
            value.ints = fj::Interval::point(box_.b);
            break;
          case ir::Variable::H:
            value.ints = fj::Interval::point(box_.h);
            break;
          case ir::Variable::Q:
            value.ints = box_.q;
            break;
          case ir::Variable::KV:
            value.ints = box_.kv;
            break;
          case ir::Variable::Score:
            value.floats = box_.score;
            break;
        }
        return value;
      case ir::ExprKind::Load: {
        const ir::Load* load = e.as<ir::Load>();
        return ir::load(box_.params->array[load->slot], load->type, (*this)(load->row).ints,
                        (*this)(load->col).ints);
      }
      default:
        break;
    }
    const int count = ir::operand_count(e.kind());
    std::vector<ir::IntervalValue> values;
    std::vector<Type> types;
    for (int i = 0; i < count; ++i) {
      values.push_back((*this)(ir::operand(e, i)));
      types.push_back(ir::operand(e, i).type());
    }
    return ir::apply_operation(e.kind(), types, values);
  }

  const Box& box_;
  std::unordered_map<const ir::ExprNode*, ir::IntervalValue> memo_;
};

// Same value of `type`: equal ints, or the same float bits (any two NaNs being the same).
bool same_value(Type type, const ir::Value& a, const ir::Value& b) {
  if (type != Type::Float) return a.i == b.i;
  if (std::isnan(a.f) && std::isnan(b.f)) return true;
  return std::bit_cast<uint32_t>(a.f) == std::bit_cast<uint32_t>(b.f);
}

std::string value_text(Type type, const ir::Value& v) {
  return type == Type::Float ? ir::float_text(v.f) : std::to_string(v.i);
}

// ---------------------------------------------------------------------------------------------
// Random well-typed expressions (random_ir.h), over the parameters and arrays of Fixture, with
// some of the mask shapes among them.

RandomExprOptions fuzz_options() {
  RandomExprOptions options;
  options.scalars = {{Type::Int, 0, "p"},
                     {Type::Int, 1, "p"},
                     {Type::Float, 2, "t"},
                     {Type::Bool, 3, "c"},
                     {Type::Bool, 4, "d"}};
  options.arrays = {{Type::Int, 0, "doc", {"b", "kv"}},
                    {Type::Float, 1, "slopes", {"h"}},
                    {Type::Float, 2, "table", {"b", "r"}}};
  options.mask_shapes = 2;
  return options;
}

// Parameters and arrays that reads can hit: slot 0, 1 Int, 2 Float, 3 and 4 Bool; arrays
// doc (Int 3 x 4), slopes (Float 5), table (Float 2 x 3).
struct Fixture {
  std::vector<int32_t> doc = {0, 1, 1, 2, -1, 3, 0, 0, 5, 2, 2, 2};
  std::vector<float> slopes = {0.5f, -0.25f, kInf, 0.0f, 3.0f};
  std::vector<float> table = {-0.0f, 1.5f, kNaN, 100.0f, -7.0f, 1e-30f};
  fj::MaskParams params{};

  Fixture() {
    params.array[0] = {doc.data(), 3, 4, 4, 0};
    params.array[1] = {slopes.data(), 5, 1, 1, 0};
    params.array[2] = {table.data(), 2, 3, 3, 0};
  }

  void randomize(RandomExpr& random) {
    static constexpr int32_t kValues[] = {0, 1, -1, 3, 64, kMin, kMax};
    params.scalar[0] = random.pick(3) ? random.pick(11) - 5 : kValues[random.pick(7)];
    params.scalar[1] = random.pick(3) ? random.pick(11) - 5 : kValues[random.pick(7)];
    const std::vector<float>& constants = float_constants();
    params.scalar[2] =
        fj::float_to_bits(constants[random.pick(static_cast<int>(constants.size()))]);
    params.scalar[3] = random.pick(2) * (1 + random.pick(3));  // any nonzero value is true
    params.scalar[4] = random.pick(2);
  }
};

float random_score(RandomExpr& random) {
  const std::vector<float>& constants = float_constants();
  switch (random.pick(3)) {
    case 0:
      return constants[random.pick(static_cast<int>(constants.size()))];
    case 1:
      return static_cast<float>(random.pick(17) - 8) / 4.0f;
    default:
      return std::uniform_real_distribution<float>(-100.0f, 100.0f)(random.rng());
  }
}

Point random_point(RandomExpr& random, const fj::MaskParams& params) {
  const auto position = [&]() -> int32_t {
    static constexpr int32_t kExtremes[] = {kMin, kMin + 1, kMax, kMax - 1};
    return random.pick(6) ? random.pick(12) - 3 : kExtremes[random.pick(4)];
  };
  return {random.pick(4), random.pick(5) - 1,   position(),
          position(),     random_score(random), &params};
}

// Distinct nodes reachable from e.
std::vector<const ir::ExprNode*> distinct_nodes(const Expr& e) {
  std::vector<const ir::ExprNode*> order;
  std::unordered_set<const ir::ExprNode*> seen;
  std::function<void(const Expr&)> walk = [&](const Expr& node) {
    if (!seen.insert(node.get()).second) return;
    for (int i = 0; i < ir::operand_count(node.kind()); ++i)
      walk(ir::operand(node, i));
    order.push_back(node.get());
  };
  walk(e);
  return order;
}

TEST_CASE("every pass keeps the value of random expressions bit for bit", "[passes][fuzz]") {
  RandomExpr random(20250117, fuzz_options());
  Fixture fixture;
  int points = 0;
  int changed = 0;
  for (int expression = 0; expression < 12000; ++expression) {
    const Type type = static_cast<Type>(random.pick(3));
    const Expr original = random.make(type, 1 + random.pick(5));
    fixture.randomize(random);
    const std::vector<ir::PassResult> trace = ir::run_passes_traced(original);
    REQUIRE(trace.size() == 3);
    const std::pair<const char*, Expr> passes[] = {
        {"fold", ir::fold_constants(original)},
        {"simplify", ir::simplify(original)},
        {"cse", ir::eliminate_common_subexpressions(original)},
        {"pipeline", ir::run_passes(original)},
    };
    changed += !trace.back().result.same_as(original);
    for (const auto& [name, result] : passes)
      REQUIRE(result.type() == type);
    for (int p = 0; p < 8; ++p) {
      const Point point = random_point(random, fixture.params);
      const ir::Value want = Evaluator(point)(original);
      for (const auto& [name, result] : passes) {
        const ir::Value got = Evaluator(point)(result);
        if (!same_value(type, want, got)) {
          FAIL(name << " changed " << ir::to_string(original) << "\n into " << ir::to_string(result)
                    << "\n at b " << point.b << " h " << point.h << " q " << point.q << " kv "
                    << point.kv << " score " << point.score << " p0 " << fixture.params.scalar[0]
                    << " p1 " << fixture.params.scalar[1] << " t "
                    << fj::bits_to_float(fixture.params.scalar[2]) << " c "
                    << fixture.params.scalar[3] << " d " << fixture.params.scalar[4] << ": "
                    << value_text(type, want) << " became " << value_text(type, got));
        }
      }
      ++points;
    }
  }
  CHECK(points == 96000);
  CHECK(changed > 6000);  // the passes do rewrite many random expressions
}

TEST_CASE("interval evaluation of random expressions is sound", "[passes][interval][fuzz]") {
  RandomExpr random(4242, fuzz_options());
  Fixture fixture;
  int decided = 0;
  for (int expression = 0; expression < 4000; ++expression) {
    const Type type = static_cast<Type>(random.pick(3));
    const Expr original = random.make(type, 1 + random.pick(5));
    fixture.randomize(random);
    Box box;
    box.params = &fixture.params;
    box.b = random.pick(4);
    box.h = random.pick(5) - 1;
    const int32_t q0 = random.pick(4) ? random.pick(12) - 3 : kMax - 3;
    const int32_t k0 = random.pick(4) ? random.pick(12) - 3 : kMin;
    box.q = fj::Interval::range(q0, q0 + random.pick(4));
    box.kv = fj::Interval::range(k0, k0 + random.pick(4));
    float s0 = random_score(random), s1 = random_score(random);
    if (std::isnan(s0)) s0 = -1.0f;
    if (std::isnan(s1)) s1 = 2.0f;
    box.score = {std::min(s0, s1), std::max(s0, s1), random.pick(4) == 0};
    std::vector<float> scores = {box.score.lo, box.score.hi};
    const float middle = box.score.lo / 2.0f + box.score.hi / 2.0f;
    if (middle >= box.score.lo && middle <= box.score.hi) scores.push_back(middle);
    if (box.score.nan) scores.push_back(kNaN);

    for (const Expr& e : {original, ir::run_passes(original)}) {
      const ir::IntervalValue range = IntervalEvaluator(box)(e);
      decided += type == Type::Bool && range.ints.is_point();
      for (int64_t qv = box.q.lo; qv <= box.q.hi; ++qv) {
        for (int64_t kvv = box.kv.lo; kvv <= box.kv.hi; ++kvv) {
          for (const float s : scores) {
            const Point point{
                box.b, box.h,          static_cast<int32_t>(qv), static_cast<int32_t>(kvv),
                s,     &fixture.params};
            const ir::Value value = Evaluator(point)(e);
            const bool inside = type == Type::Float
                                    ? (std::isnan(value.f) ? range.floats.nan
                                                           : range.floats.lo <= value.f &&
                                                                 value.f <= range.floats.hi)
                                    : range.ints.contains(value.i);
            if (!inside) {
              FAIL(ir::to_string(e) << "\n at q " << qv << " kv " << kvv << " score " << s << ": "
                                    << value_text(type, value) << " outside ["
                                    << (type == Type::Float ? ir::float_text(range.floats.lo)
                                                            : std::to_string(range.ints.lo))
                                    << ", "
                                    << (type == Type::Float ? ir::float_text(range.floats.hi)
                                                            : std::to_string(range.ints.hi))
                                    << "]");
            }
          }
        }
      }
    }
  }
  CHECK(decided > 1000);
}

TEST_CASE("CSE leaves no two equal nodes and is idempotent on random expressions",
          "[passes][cse][fuzz]") {
  RandomExpr random(99, fuzz_options());
  for (int expression = 0; expression < 2000; ++expression) {
    const Expr original = random.make(static_cast<Type>(random.pick(3)), 1 + random.pick(5));
    const Expr shared = ir::eliminate_common_subexpressions(original);
    const std::vector<const ir::ExprNode*> nodes = distinct_nodes(shared);
    REQUIRE(distinct_nodes(original).size() >= nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (size_t j = i + 1; j < nodes.size(); ++j) {
        if (ir::equal(Expr(nodes[i]), Expr(nodes[j]))) {
          FAIL("two equal nodes after CSE in " << ir::to_string(shared) << ": "
                                               << ir::to_string(Expr(nodes[i])));
        }
      }
    }
    REQUIRE(ir::equal(shared, original));
    REQUIRE(ir::eliminate_common_subexpressions(shared).same_as(shared));
  }
}

TEST_CASE("CSE merges equal subtrees into one node", "[passes][cse]") {
  const Expr window = ir::Param::make(Type::Int, 0, "window");
  // (q - kv) < window && (q - kv) >= 0, each q - kv built on its own.
  const Expr e = ir::And::make(ir::LT::make(ir::Sub::make(q(), kv()), window),
                               ir::GE::make(ir::Sub::make(q(), kv()), num(0)));
  CHECK(distinct_nodes(e).size() == 11);
  const Expr shared = ir::eliminate_common_subexpressions(e);
  CHECK(ir::to_string(shared) == ir::to_string(e));
  // q, kv, q - kv, window, <, 0, >=, &&
  CHECK(distinct_nodes(shared).size() == 8);
  const auto* both = shared.as<ir::And>();
  REQUIRE(both != nullptr);
  CHECK(both->a.as<ir::LT>()->a.same_as(both->b.as<ir::GE>()->a));
  // The top node had to be rebuilt; a tree without duplicates comes back as it was.
  const Expr unique = ir::And::make(ir::GE::make(q(), kv()), ir::LT::make(h(), window));
  CHECK(ir::eliminate_common_subexpressions(unique).same_as(unique));
}

TEST_CASE("CSE tells apart what only looks alike", "[passes][cse]") {
  // 0.0 and -0.0, params of different slots, loads of different arrays stay apart.
  const Expr zeros =
      ir::Add::make(ir::Mul::make(score(), real(0.0f)), ir::Mul::make(score(), real(-0.0f)));
  CHECK(distinct_nodes(ir::eliminate_common_subexpressions(zeros)).size() == 6);
  const Expr params =
      ir::Add::make(ir::Param::make(Type::Int, 0, "a"), ir::Param::make(Type::Int, 1, "a"));
  CHECK(distinct_nodes(ir::eliminate_common_subexpressions(params)).size() == 3);
  const Expr loads = ir::Add::make(ir::Load::make(Type::Int, 0, "x", 1, q(), num(0)),
                                   ir::Load::make(Type::Int, 1, "x", 1, q(), num(0)));
  CHECK(distinct_nodes(ir::eliminate_common_subexpressions(loads)).size() == 5);
  const Expr same_loads = ir::Add::make(ir::Load::make(Type::Int, 0, "x", 1, q(), num(0)),
                                        ir::Load::make(Type::Int, 0, "x", 1, q(), num(0)));
  CHECK(distinct_nodes(ir::eliminate_common_subexpressions(same_loads)).size() == 4);
}

// ---------------------------------------------------------------------------------------------
// Simplifier rules

void check_simplifies(const Expr& e, const std::string& want) {
  const std::string got = ir::to_string(ir::simplify(e));
  INFO(ir::to_string(e) << "\n  want " << want << "\n  got  " << got);
  CHECK(got == want);
}

TEST_CASE("simplify: int arithmetic identities", "[passes][simplify]") {
  check_simplifies(ir::Add::make(q(), num(0)), "q");
  check_simplifies(ir::Sub::make(q(), num(0)), "q");
  check_simplifies(ir::Sub::make(q(), q()), "0");
  check_simplifies(ir::Sub::make(ir::Add::make(q(), kv()), ir::Add::make(q(), kv())), "0");
  check_simplifies(ir::Sub::make(num(0), q()), "-q");
  check_simplifies(ir::Mul::make(q(), num(1)), "q");
  check_simplifies(ir::Mul::make(q(), num(0)), "0");
  check_simplifies(ir::Mul::make(q(), num(-1)), "-q");
  check_simplifies(ir::Mul::make(ir::Mul::make(q(), num(3)), num(4)), "q * 12");
  check_simplifies(ir::Div::make(q(), num(1)), "q");
  check_simplifies(ir::Div::make(q(), num(-1)), "-q");
  check_simplifies(ir::Mod::make(q(), num(1)), "0");
  check_simplifies(ir::Mod::make(q(), num(-1)), "0");
  check_simplifies(ir::Add::make(num(3), q()), "q + 3");
  check_simplifies(ir::Mul::make(num(3), q()), "q * 3");
  check_simplifies(ir::Add::make(ir::Add::make(q(), num(3)), num(4)), "q + 7");
  check_simplifies(ir::Sub::make(ir::Add::make(q(), num(3)), num(5)), "q - 2");
  check_simplifies(ir::Add::make(ir::Sub::make(q(), num(3)), num(3)), "q");
  check_simplifies(ir::Add::make(q(), num(-3)), "q - 3");
  check_simplifies(ir::Sub::make(q(), num(-3)), "q + 3");
  check_simplifies(ir::Add::make(ir::Add::make(q(), num(kMax)), num(1)),
                   "q + (-2147483648)");  // wraps
  check_simplifies(ir::Sub::make(q(), num(kMin)), "q + (-2147483648)");
  check_simplifies(ir::Sub::make(q(), ir::Neg::make(kv())), "q + kv");
  check_simplifies(ir::Add::make(q(), ir::Neg::make(kv())), "q - kv");
  check_simplifies(ir::Neg::make(ir::Neg::make(q())), "q");
  check_simplifies(ir::Neg::make(ir::Sub::make(q(), kv())), "kv - q");
  check_simplifies(ir::Abs::make(ir::Neg::make(q())), "abs(q)");
  check_simplifies(ir::Abs::make(ir::Abs::make(q())), "abs(q)");
  check_simplifies(ir::Min::make(q(), q()), "q");
  check_simplifies(ir::Max::make(num(2), q()), "max(q, 2)");
  check_simplifies(ir::Min::make(ir::Min::make(q(), num(3)), num(5)), "min(q, 3)");
  check_simplifies(ir::Max::make(ir::Max::make(q(), num(3)), num(5)), "max(q, 5)");
  check_simplifies(ir::Min::make(q(), num(kMax)), "q");
  check_simplifies(ir::Max::make(q(), num(kMin)), "q");
}

TEST_CASE("simplify: float rules keep signed zeros, infinities and NaN", "[passes][simplify]") {
  check_simplifies(ir::Mul::make(score(), real(1.0f)), "score");
  check_simplifies(ir::Mul::make(real(1.0f), score()), "score");
  check_simplifies(ir::Mul::make(score(), real(-1.0f)), "-score");
  check_simplifies(ir::Div::make(score(), real(1.0f)), "score");
  check_simplifies(ir::Div::make(score(), real(-1.0f)), "-score");
  check_simplifies(ir::Add::make(score(), real(-0.0f)), "score");
  check_simplifies(ir::Sub::make(score(), real(0.0f)), "score");
  check_simplifies(ir::Neg::make(ir::Neg::make(score())), "score");
  check_simplifies(ir::Abs::make(ir::Neg::make(score())), "abs(score)");
  check_simplifies(ir::Min::make(score(), score()), "score");
  check_simplifies(ir::Max::make(ir::Max::make(score(), real(1.0f)), real(2.0f)),
                   "max(score, 2.0)");
  check_simplifies(ir::Sub::make(score(), ir::Neg::make(ir::Param::make(Type::Float, 2, "t"))),
                   "score + t");
  check_simplifies(ir::Floor::make(ir::Floor::make(score())), "floor(score)");
  check_simplifies(ir::Ceil::make(ir::Floor::make(score())), "floor(score)");
  check_simplifies(ir::Floor::make(ir::ToFloat::make(q())), "float(q)");
  check_simplifies(ir::ToInt::make(ir::ToFloat::make(flag())), "int(c)");
  check_simplifies(ir::ToFloat::make(ir::ToInt::make(flag())), "float(c)");
  // Not rewritten: each fails for some float.
  check_simplifies(ir::Sub::make(score(), score()), "score - score");   // inf - inf is NaN
  check_simplifies(ir::Mul::make(score(), real(0.0f)), "score * 0.0");  // NaN * 0.0, -1.0 * 0.0
  check_simplifies(ir::Add::make(score(), real(0.0f)), "score + 0.0");  // -0.0 + 0.0 is +0.0
  check_simplifies(ir::Sub::make(real(0.0f), score()), "0.0 - score");  // 0.0 - 0.0 is +0.0
  check_simplifies(ir::Neg::make(ir::Sub::make(score(), real(1.0f))), "-(score - 1.0)");
  check_simplifies(ir::Add::make(ir::Add::make(score(), real(0.1f)), real(0.2f)),
                   "(score + 0.1) + 0.2");  // each addition rounds
  check_simplifies(ir::ToInt::make(ir::ToFloat::make(q())), "int(float(q))");  // rounds > 2^24
  check_simplifies(ir::Mod::make(score(), real(1.0f)), "score % 1.0");
}

TEST_CASE("simplify: comparisons", "[passes][simplify]") {
  const Expr window = ir::Param::make(Type::Int, 0, "window");
  check_simplifies(ir::LT::make(num(3), q()), "q > 3");
  check_simplifies(ir::GE::make(real(0.5f), score()), "score <= 0.5");
  check_simplifies(ir::EQ::make(q(), q()), "true");
  check_simplifies(ir::NE::make(q(), q()), "false");
  check_simplifies(ir::LE::make(q(), q()), "true");
  check_simplifies(ir::LT::make(q(), q()), "false");
  check_simplifies(ir::LT::make(score(), score()), "false");
  check_simplifies(ir::GT::make(score(), score()), "false");
  check_simplifies(ir::EQ::make(score(), score()), "score == score");  // NaN
  check_simplifies(ir::LE::make(score(), score()), "score <= score");  // NaN
  check_simplifies(ir::NE::make(score(), score()), "score != score");  // NaN
  check_simplifies(ir::EQ::make(ir::Add::make(q(), num(3)), num(5)), "q == 2");
  check_simplifies(ir::NE::make(ir::Sub::make(q(), num(3)), num(kMax)), "q != (-2147483646)");
  check_simplifies(ir::EQ::make(ir::Sub::make(q(), kv()), num(0)), "q == kv");
  check_simplifies(ir::EQ::make(ir::Neg::make(q()), num(5)), "q == (-5)");
  check_simplifies(ir::EQ::make(flag(), truth(true)), "c");
  check_simplifies(ir::EQ::make(flag(), truth(false)), "!c");
  check_simplifies(ir::NE::make(flag(), truth(true)), "!c");
  check_simplifies(ir::NE::make(truth(false), flag()), "c");
  check_simplifies(ir::Not::make(ir::LT::make(q(), kv())), "q >= kv");
  check_simplifies(ir::Not::make(ir::GE::make(q(), kv())), "q < kv");
  check_simplifies(ir::Not::make(ir::EQ::make(score(), real(1.0f))), "score != 1.0");
  check_simplifies(ir::Not::make(ir::NE::make(q(), kv())), "q == kv");
  // Not rewritten: NaN, and wrap-around.
  check_simplifies(ir::Not::make(ir::LT::make(score(), real(1.0f))), "!(score < 1.0)");
  check_simplifies(ir::LT::make(ir::Add::make(q(), num(1)), num(5)), "(q + 1) < 5");
  check_simplifies(ir::GE::make(ir::Sub::make(q(), kv()), num(0)), "(q - kv) >= 0");
  // The standard masks come back untouched, as the same node.
  const Expr sliding =
      ir::And::make(ir::GE::make(q(), kv()), ir::LT::make(ir::Sub::make(q(), kv()), window));
  CHECK(ir::simplify(sliding).same_as(sliding));
}

TEST_CASE("simplify: booleans and selects", "[passes][simplify]") {
  const Expr c = flag(3);
  const Expr d = flag(4);
  check_simplifies(ir::And::make(c, c), "c");
  check_simplifies(ir::Or::make(c, flag(3)), "c");
  check_simplifies(ir::And::make(c, ir::Not::make(c)), "false");
  check_simplifies(ir::And::make(ir::Not::make(c), c), "false");
  check_simplifies(ir::Or::make(c, ir::Not::make(c)), "true");
  check_simplifies(ir::And::make(c, ir::Or::make(d, c)), "c");
  check_simplifies(ir::Or::make(ir::And::make(c, d), c), "c");
  check_simplifies(ir::And::make(c, ir::Or::make(d, ir::Not::make(c))), "c && (d || (!c))");
  check_simplifies(ir::Select::make(c, q(), q()), "q");
  check_simplifies(ir::Select::make(ir::Not::make(c), q(), kv()), "c ? kv : q");
  check_simplifies(ir::Select::make(c, truth(true), truth(false)), "c");
  check_simplifies(ir::Select::make(c, truth(false), truth(true)), "!c");
  check_simplifies(ir::Select::make(c, d, truth(false)), "c && d");
  check_simplifies(ir::Select::make(c, truth(true), d), "c || d");
  check_simplifies(ir::Select::make(c, truth(false), d), "(!c) && d");
  check_simplifies(ir::Select::make(c, d, truth(true)), "(!c) || d");
  check_simplifies(ir::Select::make(c, ir::Select::make(c, q(), kv()), h()), "c ? q : h");
  check_simplifies(ir::Select::make(c, h(), ir::Select::make(c, q(), kv())), "c ? h : kv");
  check_simplifies(ir::Select::make(ir::LT::make(num(1), num(2)), score(), real(0.0f)), "score");
  check_simplifies(ir::Not::make(ir::Not::make(c)), "c");
}

TEST_CASE("simplify keeps sharing and folds as it goes", "[passes][simplify]") {
  const Expr shared = ir::Add::make(ir::Add::make(q(), num(1)), num(1));
  const Expr e = ir::Mul::make(shared, shared);
  const Expr result = ir::simplify(e);
  CHECK(ir::to_string(result) == "(q + 2) * (q + 2)");
  const auto* mul = result.as<ir::Mul>();
  REQUIRE(mul != nullptr);
  CHECK(mul->a.same_as(mul->b));
  check_simplifies(ir::Add::make(ir::Mul::make(num(2), num(3)), q()), "q + 6");
  check_simplifies(ir::Mul::make(real(2.0f), ir::Tanh::make(ir::Div::make(score(), real(2.0f)))),
                   "tanh(score / 2.0) * 2.0");
}

TEST_CASE("the pipeline reports each pass", "[passes]") {
  // ((q - kv) + 0 < 4 && true) && (q - kv) < 4: fold drops `true`, simplify drops `+ 0`
  // and the duplicate conjunct.
  const Expr lhs = ir::And::make(
      ir::LT::make(ir::Add::make(ir::Sub::make(q(), kv()), num(0)), num(4)), truth(true));
  const Expr e = ir::And::make(lhs, ir::LT::make(ir::Sub::make(q(), kv()), num(4)));
  const std::vector<ir::PassResult> trace = ir::run_passes_traced(e);
  REQUIRE(trace.size() == 3);
  CHECK(std::string(trace[0].name) == "fold");
  CHECK(std::string(trace[1].name) == "simplify");
  CHECK(std::string(trace[2].name) == "cse");
  CHECK(ir::to_string(trace[0].result) == "(((q - kv) + 0) < 4) && ((q - kv) < 4)");
  CHECK(ir::to_string(trace[1].result) == "(q - kv) < 4");
  CHECK(trace[2].result.same_as(trace[1].result));  // nothing left to share
  CHECK(ir::equal(ir::run_passes(e), trace[2].result));
}

}  // namespace
}  // namespace flexjit
