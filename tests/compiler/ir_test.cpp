// IR nodes, typing, printer, mutator, structural equality and constant folding.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flexjit/compiler/ir.h"

namespace flexjit {
namespace {

using ir::Expr;

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Expr q() {
  return ir::Var::make(ir::Variable::Q);
}
Expr kv() {
  return ir::Var::make(ir::Variable::KV);
}
Expr h() {
  return ir::Var::make(ir::Variable::H);
}
Expr score() {
  return ir::Var::make(ir::Variable::Score);
}
Expr num(int32_t value) {
  return ir::IntImm::make(value);
}
Expr real(float value) {
  return ir::FloatImm::make(value);
}

TEST_CASE("result_type types every operation", "[ir]") {
  using ir::ExprKind;
  using ir::Type;
  const auto type_of = [](ExprKind kind, std::vector<Type> operands) {
    return ir::result_type(kind, operands);
  };
  CHECK(type_of(ExprKind::Add, {Type::Int, Type::Int}) == Type::Int);
  CHECK(type_of(ExprKind::Add, {Type::Float, Type::Float}) == Type::Float);
  CHECK(type_of(ExprKind::Add, {Type::Int, Type::Float}) == std::nullopt);  // lowering converts
  CHECK(type_of(ExprKind::Add, {Type::Bool, Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::Add, {Type::Bool, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Add, {Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Mod, {Type::Float, Type::Float}) == Type::Float);
  CHECK(type_of(ExprKind::Min, {Type::Float, Type::Float}) == Type::Float);
  CHECK(type_of(ExprKind::LT, {Type::Int, Type::Int}) == Type::Bool);
  CHECK(type_of(ExprKind::LT, {Type::Float, Type::Float}) == Type::Bool);
  CHECK(type_of(ExprKind::LT, {Type::Float, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::LT, {Type::Bool, Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::EQ, {Type::Bool, Type::Bool}) == Type::Bool);
  CHECK(type_of(ExprKind::EQ, {Type::Float, Type::Float}) == Type::Bool);
  CHECK(type_of(ExprKind::EQ, {Type::Bool, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::And, {Type::Bool, Type::Bool}) == Type::Bool);
  CHECK(type_of(ExprKind::And, {Type::Int, Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::Not, {Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Neg, {Type::Int}) == Type::Int);
  CHECK(type_of(ExprKind::Neg, {Type::Float}) == Type::Float);
  CHECK(type_of(ExprKind::Abs, {Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Int, Type::Int}) == Type::Int);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Float, Type::Float}) == Type::Float);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Bool, Type::Bool}) == Type::Bool);
  CHECK(type_of(ExprKind::Select, {Type::Int, Type::Int, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Int, Type::Float}) == std::nullopt);
  CHECK(type_of(ExprKind::ToInt, {Type::Float}) == Type::Int);
  CHECK(type_of(ExprKind::ToInt, {Type::Bool}) == Type::Int);
  CHECK(type_of(ExprKind::ToInt, {Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::ToFloat, {Type::Int}) == Type::Float);
  CHECK(type_of(ExprKind::ToFloat, {Type::Bool}) == Type::Float);
  CHECK(type_of(ExprKind::ToFloat, {Type::Float}) == std::nullopt);
  for (const ExprKind kind :
       {ExprKind::Tanh, ExprKind::Exp, ExprKind::Exp2, ExprKind::Log, ExprKind::Log2,
        ExprKind::Sqrt, ExprKind::Sigmoid, ExprKind::Floor, ExprKind::Ceil}) {
    INFO(ir::kind_name(kind));
    CHECK(type_of(kind, {Type::Float}) == Type::Float);
    CHECK(type_of(kind, {Type::Int}) == std::nullopt);  // lowering promotes first
    CHECK(ir::operand_count(kind) == 1);
  }
  // Load is typed by its array, never by its operands.
  CHECK(type_of(ExprKind::Load, {Type::Int, Type::Int}) == std::nullopt);
  CHECK(ir::operand_count(ExprKind::Load) == 2);
  CHECK(type_of(ExprKind::IntImm, {}) == std::nullopt);
  CHECK(type_of(ExprKind::FloatImm, {}) == std::nullopt);
  CHECK(std::string(ir::type_name(Type::Float)) == "float");
}

TEST_CASE("leaves carry their types", "[ir]") {
  CHECK(q().type() == ir::Type::Int);
  CHECK(score().type() == ir::Type::Float);
  CHECK(real(0.5f).type() == ir::Type::Float);
  CHECK(ir::Param::make(ir::Type::Float, 3, "cap").type() == ir::Type::Float);
  CHECK(std::string(ir::variable_name(ir::Variable::Score)) == "score");
  const Expr load = ir::Load::make(ir::Type::Float, 1, "slopes", 1, h(), num(0));
  CHECK(load.type() == ir::Type::Float);
  CHECK(load->depth == 2);
  CHECK(load->tree_size == 3);
  CHECK(ir::operand(load, 0).same_as(load.as<ir::Load>()->row));
  CHECK(ir::operand(load, 1).same_as(load.as<ir::Load>()->col));
}

TEST_CASE("nodes record depth and tree size, counting shared nodes per use", "[ir]") {
  const Expr difference = ir::Sub::make(q(), kv());
  CHECK(difference->depth == 2);
  CHECK(difference->tree_size == 3);
  const Expr twice = ir::Mul::make(difference, difference);
  CHECK(twice->depth == 3);
  CHECK(twice->tree_size == 7);
  CHECK(twice.type() == ir::Type::Int);
  CHECK(ir::LT::make(twice, num(3)).type() == ir::Type::Bool);
  const Expr converted = ir::Tanh::make(ir::ToFloat::make(twice));
  CHECK(converted->depth == 5);
  CHECK(converted.type() == ir::Type::Float);
}

TEST_CASE("the printer parenthesizes compound operands", "[ir]") {
  const Expr window = ir::Param::make(ir::Type::Int, 0, "window");
  const Expr sliding =
      ir::And::make(ir::GE::make(q(), kv()), ir::LT::make(ir::Sub::make(q(), kv()), window));
  CHECK(ir::to_string(sliding) == "(q >= kv) && ((q - kv) < window)");
  CHECK(ir::to_string(ir::Add::make(ir::Min::make(q(), kv()), ir::Abs::make(ir::Neg::make(h())))) ==
        "min(q, kv) + abs(-h)");
  CHECK(ir::to_string(ir::Not::make(ir::LT::make(q(), kv()))) == "!(q < kv)");
  CHECK(ir::to_string(ir::Select::make(ir::LT::make(q(), kv()), num(-3), q())) ==
        "(q < kv) ? (-3) : q");
  CHECK(ir::to_string(ir::Div::make(ir::Mod::make(q(), num(8)), num(-2))) == "(q % 8) / (-2)");
  CHECK(ir::to_string(ir::Or::make(ir::BoolImm::make(true), ir::NE::make(kv(), num(kMin)))) ==
        "true || (kv != (-2147483648))");
}

TEST_CASE("the printer writes floats, arrays, conversions and functions", "[ir]") {
  const Expr cap = real(50.0f);
  const Expr softcap = ir::Mul::make(cap, ir::Tanh::make(ir::Div::make(score(), cap)));
  CHECK(ir::to_string(softcap) == "50.0 * tanh(score / 50.0)");
  const Expr slopes = ir::Load::make(ir::Type::Float, 0, "slopes", 1, h(), num(0));
  const Expr alibi =
      ir::Sub::make(score(), ir::Mul::make(slopes, ir::ToFloat::make(ir::Sub::make(q(), kv()))));
  CHECK(ir::to_string(alibi) == "score - (slopes[h] * float(q - kv))");
  const Expr doc_q =
      ir::Load::make(ir::Type::Int, 2, "doc", 2, ir::Var::make(ir::Variable::B), q());
  CHECK(ir::to_string(ir::EQ::make(doc_q, num(1))) == "doc[b, q] == 1");
  CHECK(ir::to_string(ir::Load::make(ir::Type::Int, 2, "doc", 2, num(0),
                                     ir::Add::make(q(), num(1)))) == "doc[0, q + 1]");
  CHECK(ir::to_string(ir::ToInt::make(ir::Floor::make(real(-2.5f)))) == "int(floor(-2.5))");
  CHECK(ir::to_string(ir::Add::make(score(), real(-0.5f))) == "score + (-0.5)");
  CHECK(ir::to_string(ir::Add::make(score(), real(-0.0f))) == "score + (-0.0)");
  CHECK(ir::to_string(ir::Mul::make(score(), real(kInf))) == "score * inf");
  CHECK(ir::to_string(ir::Mul::make(score(), real(-kInf))) == "score * (-inf)");
  CHECK(ir::to_string(ir::Mul::make(score(), real(kNaN))) == "score * nan");
  CHECK(ir::to_string(ir::Sigmoid::make(ir::Param::make(ir::Type::Float, 1, "t"))) == "sigmoid(t)");
  CHECK(ir::to_string(ir::Exp2::make(ir::Log2::make(ir::Sqrt::make(ir::Exp::make(ir::Log::make(
            ir::Ceil::make(score()))))))) == "exp2(log2(sqrt(exp(log(ceil(score))))))");
}

TEST_CASE("float text reads back as the same float", "[ir]") {
  CHECK(ir::float_text(50.0f) == "50.0");
  CHECK(ir::float_text(0.1f) == "0.1");
  CHECK(ir::float_text(-2.5f) == "-2.5");
  CHECK(ir::float_text(0.0f) == "0.0");
  CHECK(ir::float_text(-0.0f) == "-0.0");
  CHECK(ir::float_text(1e20f) == "1.0e+20");
  CHECK(ir::float_text(1.5e-3f) == "0.0015");
  CHECK(ir::float_text(16777216.0f) == "16777216.0");
  CHECK(ir::float_text(kInf) == "inf");
  CHECK(ir::float_text(-kInf) == "-inf");
  CHECK(ir::float_text(kNaN) == "nan");
  // Every finite float, by random bits: the text has a `.`, and strtof gives the same bits.
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float value = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isfinite(value)) continue;
    const std::string text = ir::float_text(value);
    INFO(text);
    REQUIRE(text.find('.') != std::string::npos);
    REQUIRE(std::bit_cast<uint32_t>(std::strtof(text.c_str(), nullptr)) ==
            std::bit_cast<uint32_t>(value));
  }
}

// Replaces kv by 0.
class ReplaceKv : public ir::IRMutator {
 protected:
  using ir::IRMutator::visit;
  Expr visit(const ir::Var* op) override {
    return op->variable == ir::Variable::KV ? num(0) : Expr(op);
  }
};

TEST_CASE("the mutator rebuilds only what changed", "[ir]") {
  const Expr untouched = ir::Mul::make(q(), h());
  const Expr touched = ir::Sub::make(q(), kv());
  const Expr e = ir::LT::make(untouched, touched);
  ReplaceKv replace;
  const Expr result = replace.mutate(e);
  CHECK(ir::to_string(result) == "(q * h) < (q - 0)");
  const auto* lt = result.as<ir::LT>();
  REQUIRE(lt != nullptr);
  CHECK(lt->a.same_as(untouched));
  CHECK_FALSE(lt->b.same_as(touched));
  CHECK(replace.mutate(untouched).same_as(untouched));
}

TEST_CASE("the mutator rebuilds a Load with its array", "[ir]") {
  const Expr load = ir::Load::make(ir::Type::Float, 5, "table", 2, q(), kv());
  ReplaceKv replace;
  const Expr result = replace.mutate(load);
  const auto* rebuilt = result.as<ir::Load>();
  REQUIRE(rebuilt != nullptr);
  CHECK_FALSE(result.same_as(load));
  CHECK(rebuilt->slot == 5);
  CHECK(rebuilt->rank == 2);
  CHECK(rebuilt->name == "table");
  CHECK(result.type() == ir::Type::Float);
  CHECK(ir::to_string(result) == "table[q, 0]");
  const Expr no_kv = ir::Load::make(ir::Type::Int, 0, "a", 1, q(), num(0));
  CHECK(replace.mutate(no_kv).same_as(no_kv));
}

TEST_CASE("uses_variable, uses_param and uses_array look through every node", "[ir]") {
  const Expr alibi = ir::Sub::make(
      score(), ir::Mul::make(ir::Load::make(ir::Type::Float, 3, "slopes", 1, h(), num(0)),
                             ir::ToFloat::make(ir::Param::make(ir::Type::Int, 1, "w"))));
  CHECK(ir::uses_variable(alibi, ir::Variable::Score));
  CHECK(ir::uses_variable(alibi, ir::Variable::H));  // inside the index
  CHECK_FALSE(ir::uses_variable(alibi, ir::Variable::Q));
  CHECK(ir::uses_array(alibi, 3));
  CHECK_FALSE(ir::uses_array(alibi, 1));
  CHECK(ir::uses_param(alibi, 1));
  CHECK_FALSE(ir::uses_param(alibi, 3));
  // An array read inside another's index.
  const Expr nested = ir::Load::make(ir::Type::Int, 0, "a", 1,
                                     ir::Load::make(ir::Type::Int, 7, "b", 1, q(), num(0)), num(0));
  CHECK(ir::uses_array(nested, 7));
  CHECK(ir::uses_array(nested, 0));
}

TEST_CASE("structural equality", "[ir]") {
  const auto sliding = [] {
    return ir::And::make(
        ir::GE::make(q(), kv()),
        ir::LT::make(ir::Sub::make(q(), kv()), ir::Param::make(ir::Type::Int, 0, "w")));
  };
  CHECK(ir::equal(sliding(), sliding()));
  CHECK_FALSE(
      ir::equal(sliding(), ir::And::make(ir::GE::make(q(), kv()), ir::BoolImm::make(true))));
  CHECK(ir::equal(real(0.1f), real(0.1f)));
  CHECK_FALSE(ir::equal(real(0.0f), real(-0.0f)));  // by bits
  CHECK(ir::equal(real(kNaN), real(kNaN)));
  CHECK_FALSE(ir::equal(num(1), real(1.0f)));
  CHECK_FALSE(
      ir::equal(ir::Param::make(ir::Type::Int, 0, "w"), ir::Param::make(ir::Type::Int, 1, "w")));
  CHECK_FALSE(ir::equal(ir::Load::make(ir::Type::Int, 0, "a", 1, q(), num(0)),
                        ir::Load::make(ir::Type::Int, 1, "a", 1, q(), num(0))));
  CHECK_FALSE(ir::equal(ir::Load::make(ir::Type::Int, 0, "a", 1, q(), num(0)),
                        ir::Load::make(ir::Type::Int, 0, "a", 1, kv(), num(0))));
  CHECK(ir::equal(ir::Load::make(ir::Type::Float, 0, "a", 2, q(), kv()),
                  ir::Load::make(ir::Type::Float, 0, "a", 2, q(), kv())));
  CHECK_FALSE(ir::equal(ir::Var::make(ir::Variable::B), h()));
  // Shared and unshared spellings of one tree are equal.
  const Expr shared = ir::Sub::make(q(), kv());
  CHECK(ir::equal(ir::Mul::make(shared, shared),
                  ir::Mul::make(ir::Sub::make(q(), kv()), ir::Sub::make(q(), kv()))));
  // A deep chain of shared nodes (2^60 as a tree) compares in linear time.
  Expr left = q(), right = q();
  for (int i = 0; i < 60; ++i) {
    left = ir::Add::make(left, left);
    right = ir::Add::make(right, right);
  }
  CHECK(ir::equal(left, right));
}

TEST_CASE("constant folding uses the language's semantics", "[ir][fold]") {
  CHECK(ir::to_string(ir::fold_constants(ir::Add::make(num(3), ir::Mul::make(num(4), num(2))))) ==
        "11");
  CHECK(ir::to_string(ir::fold_constants(ir::Div::make(num(7), num(-2)))) == "-4");
  CHECK(ir::to_string(ir::fold_constants(ir::Mod::make(num(-7), num(2)))) == "1");
  CHECK(ir::to_string(ir::fold_constants(ir::Div::make(num(7), num(0)))) == "0");
  CHECK(ir::to_string(ir::fold_constants(ir::Div::make(num(kMin), num(-1)))) == "-2147483648");
  CHECK(ir::to_string(ir::fold_constants(ir::Add::make(num(kMax), num(1)))) == "-2147483648");
  CHECK(ir::to_string(ir::fold_constants(ir::Abs::make(num(kMin)))) == "-2147483648");
  CHECK(ir::to_string(ir::fold_constants(ir::LT::make(num(-1), num(0)))) == "true");

  const Expr causal = ir::GE::make(q(), kv());
  CHECK(ir::fold_constants(ir::And::make(causal, ir::BoolImm::make(true))).same_as(causal));
  CHECK(ir::fold_constants(ir::And::make(ir::BoolImm::make(true), causal)).same_as(causal));
  CHECK(ir::to_string(ir::fold_constants(ir::And::make(causal, ir::BoolImm::make(false)))) ==
        "false");
  CHECK(ir::to_string(ir::fold_constants(ir::Or::make(ir::BoolImm::make(true), causal))) == "true");
  CHECK(ir::fold_constants(ir::Or::make(causal, ir::BoolImm::make(false))).same_as(causal));
  CHECK(ir::fold_constants(ir::Not::make(ir::Not::make(causal))).same_as(causal));
  CHECK(ir::fold_constants(ir::Select::make(ir::LT::make(num(1), num(2)), q(), kv()))
            .as<ir::Var>()
            ->variable == ir::Variable::Q);
  // Nothing to fold: the same node comes back.
  const Expr sliding = ir::And::make(causal, ir::LT::make(ir::Sub::make(q(), kv()), num(4)));
  CHECK(ir::fold_constants(sliding).same_as(sliding));
}

TEST_CASE("constant folding of floats and conversions", "[ir][fold]") {
  const auto folded = [](const Expr& e) { return ir::to_string(ir::fold_constants(e)); };
  CHECK(folded(ir::Mul::make(real(0.1f), real(3.0f))) == ir::float_text(0.1f * 3.0f));
  CHECK(folded(ir::Div::make(real(1.0f), real(0.0f))) == "0.0");
  CHECK(folded(ir::Div::make(real(-1.0f), real(4.0f))) == "-0.25");
  CHECK(folded(ir::Mod::make(real(-5.5f), real(2.0f))) == "0.5");
  CHECK(folded(ir::Exp::make(real(100.0f))) == "inf");
  CHECK(folded(ir::Sqrt::make(real(-1.0f))) == "nan");
  CHECK(folded(ir::Min::make(real(kNaN), real(2.0f))) == "2.0");
  CHECK(folded(ir::ToInt::make(real(-7.9f))) == "-7");
  CHECK(folded(ir::ToInt::make(real(1e10f))) == "2147483647");
  CHECK(folded(ir::ToInt::make(ir::BoolImm::make(true))) == "1");
  CHECK(folded(ir::ToFloat::make(num(16777217))) == "16777216.0");
  CHECK(folded(ir::ToFloat::make(ir::BoolImm::make(false))) == "0.0");
  CHECK(folded(ir::LT::make(real(kNaN), real(1.0f))) == "false");
  CHECK(folded(ir::NE::make(real(kNaN), real(kNaN))) == "true");
  CHECK(folded(ir::Select::make(ir::BoolImm::make(true), real(1.5f), score())) == "1.5");
  CHECK(folded(ir::Floor::make(real(-0.5f))) == "-1.0");
  CHECK(folded(ir::Tanh::make(real(0.0f))) == "0.0");
  CHECK(folded(ir::Mul::make(real(50.0f), ir::Tanh::make(ir::Div::make(score(), real(50.0f))))) ==
        "50.0 * tanh(score / 50.0)");
  // A Load is never a constant: its array is given at launch.
  const Expr load = ir::Load::make(ir::Type::Int, 0, "a", 1, num(1), num(0));
  CHECK(ir::fold_constants(load).same_as(load));
  CHECK(folded(ir::Load::make(ir::Type::Int, 0, "a", 1, ir::Add::make(num(1), num(2)), num(0))) ==
        "a[3]");
}

TEST_CASE("constant folding keeps shared nodes shared", "[ir][fold]") {
  const Expr shared = ir::Sub::make(q(), ir::Add::make(num(1), num(1)));
  const Expr folded = ir::fold_constants(ir::Mul::make(shared, shared));
  const auto* mul = folded.as<ir::Mul>();
  REQUIRE(mul != nullptr);
  CHECK(ir::to_string(folded) == "(q - 2) * (q - 2)");
  CHECK(mul->a.same_as(mul->b));
}

}  // namespace
}  // namespace flexjit
