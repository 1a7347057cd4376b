// Evaluation and tile classification of a lowered mask: a walk for concrete values, the
// compiled interval analysis (interval_tape.h) for tiles, the meaning of each operation coming
// from templates/fj_ops.cuh.
#include <algorithm>
#include <array>
#include <memory>

#include "analysis.h"
#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/semantics.h"

namespace flexjit {

// The host and the kernels share the tile class values.
static_assert(static_cast<int>(TileClass::Empty) == static_cast<int>(fj::TileClass::Empty) &&
              static_cast<int>(TileClass::Full) == static_cast<int>(fj::TileClass::Full) &&
              static_cast<int>(TileClass::Partial) == static_cast<int>(fj::TileClass::Partial));

namespace {

ir::Value param_value(const fj::MaskParams& params, const ir::Param* param) {
  const int32_t bits = params.scalar[param->slot];
  switch (param->type) {
    case ir::Type::Bool:
      return ir::Value::of_bool(bits != 0);
    case ir::Type::Int:
      return ir::Value::of_int(bits);
    case ir::Type::Float:
      return ir::Value::of_float(fj::bits_to_float(bits));
  }
  return {};
}

// The operand types of a node, for the typed semantics.
struct OperandTypes {
  std::array<ir::Type, 3> types{};
  int count = 0;
  std::span<const ir::Type> span() const { return {types.data(), static_cast<size_t>(count)}; }
};

OperandTypes operand_types(const ir::Expr& e) {
  OperandTypes result;
  result.count = ir::operand_count(e.kind());
  for (int i = 0; i < result.count; ++i)
    result.types[i] = ir::operand(e, i).type();
  return result;
}

// The values a walk needs besides the node: the variables and the parameter block.
struct Point {
  const EvalPoint& at;
  float score;
  const fj::MaskParams& params;
};

ir::Value evaluate(const ir::Expr& e, const Point& point) {
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
          return ir::Value::of_int(point.at.b);
        case ir::Variable::H:
          return ir::Value::of_int(point.at.h);
        case ir::Variable::Q:
          return ir::Value::of_int(point.at.q);
        case ir::Variable::KV:
          return ir::Value::of_int(point.at.kv);
        case ir::Variable::Score:
          return ir::Value::of_float(point.score);
      }
      return {};
    case ir::ExprKind::Param:
      return param_value(point.params, e.as<ir::Param>());
    case ir::ExprKind::Load: {
      const ir::Load* load = e.as<ir::Load>();
      return ir::load(point.params.array[load->slot], e.type(), evaluate(load->row, point).i,
                      evaluate(load->col, point).i);
    }
    default: {
      const OperandTypes types = operand_types(e);
      std::array<ir::Value, 3> values{};
      for (int i = 0; i < types.count; ++i)
        values[i] = evaluate(ir::operand(e, i), point);
      return ir::apply_operation(e.kind(), types.span(),
                                 std::span<const ir::Value>(values.data(), types.count));
    }
  }
}

}  // namespace

const fj::MaskParams& params_or_zero(const fj::MaskParams* params) {
  static const fj::MaskParams zero{};
  return params != nullptr ? *params : zero;
}

ir::Expr mask_of(const Variant& variant) {
  return variant.mask.defined() ? variant.mask : ir::BoolImm::make(false);
}

bool evaluate_mask(const Variant& variant, const EvalPoint& point) {
  return evaluate(mask_of(variant), {point, 0.0f, params_or_zero(point.params)}).i != 0;
}

float evaluate_score(const Variant& variant, float score, const EvalPoint& point) {
  if (!variant.has_score()) return score;
  return evaluate(variant.score, {point, score, params_or_zero(point.params)}).f;
}

const char* tile_class_name(TileClass tile_class) {
  switch (tile_class) {
    case TileClass::Empty:
      return "empty";
    case TileClass::Full:
      return "full";
    case TileClass::Partial:
      return "partial";
  }
  return "?";
}

MaskAnalysis::MaskAnalysis(const Variant& variant)
    : plans_(std::make_shared<const MaskPlans>(plan_mask(mask_of(variant)))) {}

TileClass MaskAnalysis::classify(const Tile& tile, const fj::MaskParams* params) const {
  if (tile.q0 >= tile.q1 || tile.k0 >= tile.k1) return TileClass::Empty;
  const TileBox box{tile, fj::Interval::range(tile.q0, int64_t{tile.q1} - 1),
                    fj::Interval::range(tile.k0, int64_t{tile.k1} - 1), params_or_zero(params)};
  return static_cast<TileClass>(fj::tile_class(plans_->program.value(box).ints));
}

KvRange MaskAnalysis::kv_range(int32_t b, int32_t h, int32_t q0, int32_t q1,
                               const fj::MaskParams* params) const {
  if (q0 >= q1) return {};
  const Tile tile{b, h, q0, q1, 0, 1};
  // kv is unused by the plan's own evaluations (atoms bind it themselves).
  const TileBox box{tile, fj::Interval::range(q0, int64_t{q1} - 1), fj::Interval::point(0),
                    params_or_zero(params)};
  const fj::KvRange range = fj::kvr::to_range(plans_->program.kv_bound(box));
  return {range.lo, range.hi};
}

int64_t MaskAnalysis::computed_elements(int32_t probe, int32_t tile_q, int32_t tile_k,
                                        const fj::MaskParams* params) const {
  int64_t elements = 0;
  for (int32_t q0 = 0; q0 < probe; q0 += tile_q) {
    const int32_t q1 = std::min(probe, q0 + tile_q);
    const KvRange range = kv_range(0, 0, q0, q1, params);
    const int32_t hi = std::min(range.hi, probe);
    // Tiles start at multiples of tile_k, as the kernels' do.
    for (int32_t k0 = std::max(range.lo, 0) / tile_k * tile_k; k0 < hi; k0 += tile_k) {
      const int32_t k1 = std::min(probe, k0 + tile_k);
      if (classify({0, 0, q0, q1, k0, k1}, params) != TileClass::Empty)
        elements += int64_t{q1 - q0} * (k1 - k0);
    }
  }
  return elements;
}

TileClass classify_tile(const Variant& variant, const Tile& tile, const fj::MaskParams* params) {
  return MaskAnalysis(variant).classify(tile, params);
}

}  // namespace flexjit
