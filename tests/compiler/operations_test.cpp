// Every row of the operation table (flexjit/dsl/operations.h) has each of its forms: typing,
// printing, the host scalar and interval functions, the LLVM host code and the interval
// program (interpreted and LLVM-compiled). A row added without one of them fails here.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "flexjit/compiler/host_code.h"
#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/semantics.h"

namespace flexjit {
namespace {

using ir::ExprKind;
using ir::Type;

std::vector<ExprKind> operation_kinds() {
  return {
#define FJ_OPERATION_KIND(C, node, ...) ExprKind::node,
      FJ_FOR_EACH_OPERATION(FJ_OPERATION_KIND, _)
#undef FJ_OPERATION_KIND
  };
}

// Every list of operand types that `kind` accepts.
std::vector<std::vector<Type>> typed_operand_lists(ExprKind kind) {
  std::vector<std::vector<Type>> lists = {{}};
  for (int i = 0; i < ir::operand_count(kind); ++i) {
    std::vector<std::vector<Type>> longer;
    for (const std::vector<Type>& list : lists) {
      for (const Type type : {Type::Bool, Type::Int, Type::Float}) {
        longer.push_back(list);
        longer.back().push_back(type);
      }
    }
    lists = std::move(longer);
  }
  std::erase_if(lists, [&](const std::vector<Type>& list) {
    return list.empty() || !ir::result_type(kind, list);
  });
  return lists;
}

// A few values of each type, as slot bits: edges, signed zeros, a NaN.
std::vector<int32_t> sample_bits(Type type) {
  switch (type) {
    case Type::Bool:
      return {0, 1};
    case Type::Int:
      return {std::numeric_limits<int32_t>::min(), -7, 0, 3};
    case Type::Float:
      return {fj::float_to_bits(-2.5f), fj::float_to_bits(-0.0f), fj::float_to_bits(1.5f),
              fj::float_to_bits(std::numeric_limits<float>::quiet_NaN())};
  }
  return {};
}

ir::Value value_of_bits(Type type, int32_t bits) {
  return type == Type::Float  ? ir::Value::of_float(fj::bits_to_float(bits))
         : type == Type::Bool ? ir::Value::of_bool(bits != 0)
                              : ir::Value::of_int(bits);
}

int32_t bits_of_value(Type type, ir::Value value) {
  return type == Type::Float ? fj::float_to_bits(value.f) : value.i;
}

bool contains(const ir::IntervalValue& interval, Type type, ir::Value value) {
  if (type == Type::Float) {
    return std::isnan(value.f) ? interval.floats.nan
                               : interval.floats.lo <= value.f && value.f <= interval.floats.hi;
  }
  return interval.ints.lo <= value.i && value.i <= interval.ints.hi;
}

TEST_CASE("every operation of the table has its typing, printing, meaning and host code",
          "[ir][ops]") {
  constexpr int kWantSlot = 7;
  for (const ExprKind kind : operation_kinds()) {
    const std::vector<std::vector<Type>> lists = typed_operand_lists(kind);
    INFO(ir::kind_name(kind));
    REQUIRE_FALSE(lists.empty());
    for (const std::vector<Type>& types : lists) {
      std::vector<ir::Expr> operands;
      for (size_t i = 0; i < types.size(); ++i) {
        operands.push_back(ir::Param::make(types[i], static_cast<int>(i), "p" + std::to_string(i)));
      }
      const ir::Expr e = ir::make_operation(kind, operands);
      const Type result = e.type();
      CHECK(ir::to_string(e).find(ir::operation_spelling(kind)) != std::string::npos);

      // The mask `e == want` (or both NaN), true wherever want is the evaluator's value.
      const ir::Expr want = ir::Param::make(result, kWantSlot, "want");
      ir::Expr mask = ir::EQ::make(e, want);
      if (result == Type::Float) {
        mask = ir::Or::make(mask, ir::And::make(ir::NE::make(e, e), ir::NE::make(want, want)));
      }
      Variant variant;
      variant.name = variant.mask_name = ir::kind_name(kind);
      variant.mask = mask;
      auto code = make_host_code(variant, true);
      REQUIRE(code.ok());
      const MaskAnalysis analysis(variant);

      // Every combination of the operands' sample values.
      std::vector<std::vector<int32_t>> combinations = {{}};
      for (const Type type : types) {
        std::vector<std::vector<int32_t>> longer;
        for (const std::vector<int32_t>& combination : combinations) {
          for (const int32_t bits : sample_bits(type)) {
            longer.push_back(combination);
            longer.back().push_back(bits);
          }
        }
        combinations = std::move(longer);
      }
      for (const std::vector<int32_t>& bits : combinations) {
        std::vector<ir::Value> values;
        std::vector<ir::IntervalValue> points;
        fj::MaskParams params{};
        for (size_t i = 0; i < types.size(); ++i) {
          params.scalar[i] = bits[i];
          values.push_back(value_of_bits(types[i], bits[i]));
          ir::IntervalValue point;
          point.ints = fj::Interval::point(values.back().i);
          point.floats = fj::FloatInterval::point(values.back().f);
          points.push_back(point);
        }
        const ir::Value value = ir::apply_operation(kind, types, values);
        params.scalar[kWantSlot] = bits_of_value(result, value);
        CAPTURE(ir::to_string(e), bits);
        CHECK(contains(ir::apply_operation(kind, types, points), result, value));
        CHECK((*code)->mask(&params, 0, 0, 0, 0));
        const Tile tile{0, 0, 0, 4, 0, 4};
        CHECK(analysis.classify(tile, &params) != TileClass::Empty);
        CHECK((*code)->classify(tile, &params) == analysis.classify(tile, &params));
      }
    }
  }
}

}  // namespace
}  // namespace flexjit
