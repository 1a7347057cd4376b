// IR nodes, printer, mutator, constant folding, lowering and the evaluator.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/dsl/frontend.h"

namespace flexjit {
namespace {

using ir::Expr;

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

Expr q() {
  return ir::Var::make(ir::Variable::Q);
}
Expr kv() {
  return ir::Var::make(ir::Variable::KV);
}
Expr h() {
  return ir::Var::make(ir::Variable::H);
}
Expr num(int32_t value) {
  return ir::IntImm::make(value);
}

Result<MaskFunction> try_lower(std::string text, std::string_view name) {
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check({"test.mask", std::move(text)}, diagnostics);
  return lower_mask(module, name);
}

MaskFunction lower(std::string text, std::string_view name) {
  std::vector<dsl::Diagnostic> diagnostics;
  const dsl::Module module = dsl::parse_and_check({"test.mask", std::move(text)}, diagnostics);
  INFO(dsl::format_diagnostics(module.source, diagnostics));
  REQUIRE_FALSE(dsl::has_errors(diagnostics));
  Result<MaskFunction> mask = lower_mask(module, name);
  INFO((mask.ok() ? "" : mask.error().message));
  REQUIRE(mask.ok());
  return std::move(mask).value();
}

TEST_CASE("result_type types every operation", "[ir]") {
  using ir::ExprKind;
  using ir::Type;
  const auto type_of = [](ExprKind kind, std::vector<Type> operands) {
    return ir::result_type(kind, operands);
  };
  CHECK(type_of(ExprKind::Add, {Type::Int, Type::Int}) == Type::Int);
  CHECK(type_of(ExprKind::Add, {Type::Bool, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Add, {Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::LT, {Type::Int, Type::Int}) == Type::Bool);
  CHECK(type_of(ExprKind::LT, {Type::Bool, Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::EQ, {Type::Bool, Type::Bool}) == Type::Bool);
  CHECK(type_of(ExprKind::EQ, {Type::Bool, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::And, {Type::Bool, Type::Bool}) == Type::Bool);
  CHECK(type_of(ExprKind::And, {Type::Int, Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::Not, {Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Neg, {Type::Int}) == Type::Int);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Int, Type::Int}) == Type::Int);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Bool, Type::Bool}) == Type::Bool);
  CHECK(type_of(ExprKind::Select, {Type::Int, Type::Int, Type::Int}) == std::nullopt);
  CHECK(type_of(ExprKind::Select, {Type::Bool, Type::Int, Type::Bool}) == std::nullopt);
  CHECK(type_of(ExprKind::IntImm, {}) == std::nullopt);
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

TEST_CASE("constant folding keeps shared nodes shared", "[ir][fold]") {
  const Expr shared = ir::Sub::make(q(), ir::Add::make(num(1), num(1)));
  const Expr folded = ir::fold_constants(ir::Mul::make(shared, shared));
  const auto* mul = folded.as<ir::Mul>();
  REQUIRE(mul != nullptr);
  CHECK(ir::to_string(folded) == "(q - 2) * (q - 2)");
  CHECK(mul->a.same_as(mul->b));
}

// ---------------------------------------------------------------------------------------------
// Lowering

TEST_CASE("lowering inlines masks and constants and numbers params", "[lower]") {
  const std::string source = R"(
param first: int
param flag: bool
param window: int
const chunk: int = 8
const offset: int = -3
mask causal = q >= kv
mask sliding = causal && q - kv < window
mask chunked = causal && q / chunk == (kv + offset) / chunk
mask headed = flag || h == 2
)";
  const MaskFunction sliding = lower(source, "sliding");
  CHECK(sliding.name == "sliding");
  CHECK(ir::to_string(sliding.body) == "(q >= kv) && ((q - kv) < window)");
  REQUIRE(sliding.params.size() == 3);
  CHECK(sliding.params[0].name == "first");
  CHECK(sliding.params[1].name == "flag");
  CHECK(sliding.params[1].type == dsl::Type::Bool);
  CHECK(sliding.params[2].name == "window");
  for (int slot = 0; slot < 3; ++slot)
    CHECK(sliding.params[slot].slot == slot);
  const auto* lt = sliding.body.as<ir::And>()->b.as<ir::LT>();
  REQUIRE(lt != nullptr);
  REQUIRE(lt->b.as<ir::Param>() != nullptr);
  CHECK(lt->b.as<ir::Param>()->slot == 2);
  CHECK_FALSE(sliding.uses_head);
  CHECK(ir::uses_param(sliding.body, 2));
  CHECK_FALSE(ir::uses_param(sliding.body, 0));
  CHECK_FALSE(ir::uses_param(sliding.body, 1));

  const MaskFunction chunked = lower(source, "chunked");
  CHECK(ir::to_string(chunked.body) == "(q >= kv) && ((q / 8) == ((kv + (-3)) / 8))");

  const MaskFunction headed = lower(source, "headed");
  CHECK(ir::to_string(headed.body) == "flag || (h == 2)");
  CHECK(headed.uses_head);
  CHECK(ir::uses_param(headed.body, 1));
  CHECK_FALSE(ir::uses_param(headed.body, 2));
  CHECK(headed.body.as<ir::Or>()->a.as<ir::Param>()->type == ir::Type::Bool);
}

TEST_CASE("lowering folds constant parts", "[lower]") {
  const MaskFunction mask =
      lower("const big: int = 2147483647\nmask m = q - kv < big + 1 || (3 > 4 && q == kv)\n", "m");
  CHECK(ir::to_string(mask.body) == "(q - kv) < (-2147483648)");
}

TEST_CASE("lowering reports what it cannot lower", "[lower]") {
  const std::string source = "param window: int\nmask causal = q >= kv\n";
  const Result<MaskFunction> unknown = try_lower(source, "nope");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("no mask named `nope`"));

  const Result<MaskFunction> not_a_mask = try_lower(source, "window");
  REQUIRE_FALSE(not_a_mask.ok());
  CHECK_THAT(not_a_mask.error().message, Catch::Contains("not a mask"));

  const Result<MaskFunction> broken = try_lower("mask m = q >= nowhere\n", "m");
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(broken.error().message, Catch::Contains("errors"));
}

TEST_CASE("lowering refuses more runtime parameters than slots", "[lower]") {
  std::string source;
  std::string uses = "q >= kv";
  for (int i = 0; i <= kMaxScalarParams; ++i) {
    source += "param p" + std::to_string(i) + ": int\n";
    uses += " && q != p" + std::to_string(i);
  }
  const Result<MaskFunction> mask = try_lower(source + "mask m = " + uses + "\n", "m");
  REQUIRE_FALSE(mask.ok());
  CHECK_THAT(mask.error().message, Catch::Contains("too many runtime parameters"));
  CHECK_THAT(mask.error().message, Catch::StartsWith("test.mask:17:7:"));
}

TEST_CASE("lowering bounds the size of inlined masks", "[lower]") {
  SECTION("doubling masks") {
    // m20 would be a tree of 2^21 nodes.
    std::string source = "mask m0 = q >= kv\n";
    for (int i = 1; i <= 20; ++i) {
      source += "mask m" + std::to_string(i) + " = m" + std::to_string(i - 1) + " && m" +
                std::to_string(i - 1) + "\n";
    }
    const Result<MaskFunction> mask = try_lower(source, "m20");
    REQUIRE_FALSE(mask.ok());
    CHECK_THAT(mask.error().message, Catch::Contains("too large"));
    CHECK(try_lower(source, "m10").ok());
  }
  SECTION("a long chain of masks") {
    std::string source = "mask m0 = q >= kv\n";
    for (int i = 1; i <= 400; ++i) {
      source += "mask m" + std::to_string(i) + " = !m" + std::to_string(i - 1) + "\n";
    }
    const Result<MaskFunction> mask = try_lower(source, "m400");
    REQUIRE_FALSE(mask.ok());
    CHECK_THAT(mask.error().message, Catch::Contains("too large"));
    const Result<MaskFunction> shallow = try_lower(source, "m100");
    REQUIRE(shallow.ok());
    CHECK(ir::to_string(shallow->body) == "q >= kv");  // !! cancels
  }
}

// ---------------------------------------------------------------------------------------------
// Evaluator

int32_t wrap(int64_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x));
}

TEST_CASE("evaluating causal and sliding matches hand-written C++", "[evaluate]") {
  const std::string source =
      "param window: int\nmask causal = q >= kv\nmask sliding = causal && q - kv < window\n";
  const MaskFunction causal = lower(source, "causal");
  const MaskFunction sliding = lower(source, "sliding");

  std::vector<int32_t> positions;
  for (int32_t x = -70; x <= 70; ++x)
    positions.push_back(x);
  for (int32_t x : {kMin, kMin + 1, kMax - 1, kMax, 1 << 20, -(1 << 20)})
    positions.push_back(x);

  int checked = 0;
  for (const int32_t window : {1, 3, 64, 0, -1}) {
    const int32_t params[] = {window};
    for (const int32_t qv : positions) {
      for (const int32_t kvv : positions) {
        const EvalPoint point{0, 0, qv, kvv, params};
        const bool want_causal = qv >= kvv;
        const bool want_sliding = qv >= kvv && wrap(int64_t{qv} - kvv) < window;
        REQUIRE(evaluate_mask(causal, point) == want_causal);
        REQUIRE(evaluate_mask(sliding, point) == want_sliding);
        ++checked;
      }
    }
  }
  CHECK(checked == 5 * 147 * 147);
  // Wrap-around: q - kv overflows to -1, which is below any positive window.
  const int32_t params[] = {4};
  CHECK(evaluate_mask(sliding, {0, 0, kMax, kMin, params}));
}

TEST_CASE("evaluating every operation", "[evaluate]") {
  const std::string source = R"(
param p: int
param flag: bool
mask arith = (q + kv) * 3 - q / 4 + kv % 5 == p
mask calls = min(q, kv) + max(q, kv) - abs(q - kv) == -(-(2 * min(q, kv)))
mask logic = !(flag && h == 1) || b != 0
)";
  const MaskFunction arith = lower(source, "arith");
  const MaskFunction calls = lower(source, "calls");
  const MaskFunction logic = lower(source, "logic");
  for (int32_t qv = -9; qv <= 9; ++qv) {
    for (int32_t kvv = -9; kvv <= 9; ++kvv) {
      // Floor division and modulo written out for these small operands.
      const int32_t floor_q_by_4 = qv >= 0 ? qv / 4 : -((-qv + 3) / 4);
      const int32_t kv_mod_5 = ((kvv % 5) + 5) % 5;
      const int32_t want = (qv + kvv) * 3 - floor_q_by_4 + kv_mod_5;
      const int32_t params[] = {want, 0};
      CHECK(evaluate_mask(arith, {0, 0, qv, kvv, params}));
      const int32_t other[] = {want + 1, 0};
      CHECK_FALSE(evaluate_mask(arith, {0, 0, qv, kvv, other}));
      CHECK(evaluate_mask(calls, {0, 0, qv, kvv, params}));
    }
  }
  const int32_t flag_set[] = {0, 7};  // any nonzero slot value is true
  const int32_t flag_clear[] = {0, 0};
  CHECK_FALSE(evaluate_mask(logic, {0, 1, 0, 0, flag_set}));
  CHECK(evaluate_mask(logic, {1, 1, 0, 0, flag_set}));
  CHECK(evaluate_mask(logic, {0, 2, 0, 0, flag_set}));
  CHECK(evaluate_mask(logic, {0, 1, 0, 0, flag_clear}));
  // Slots the caller did not pass read as 0.
  CHECK(evaluate_mask(logic, {0, 1, 0, 0, {}}));
}

}  // namespace
}  // namespace flexjit
