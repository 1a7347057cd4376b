// Evaluation and tile classification of a lowered mask: one walk per domain, the meaning of
// each operation coming from semantics.h (that is, from templates/fj_ops.cuh).
#include <array>

#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/semantics.h"

namespace flexjit {

// The host and the kernels share the slot count and the tile class values.
static_assert(kMaxScalarParams == fj::kMaxScalarParams);
static_assert(static_cast<int>(TileClass::Empty) == static_cast<int>(fj::TileClass::Empty) &&
              static_cast<int>(TileClass::Full) == static_cast<int>(fj::TileClass::Full) &&
              static_cast<int>(TileClass::Partial) == static_cast<int>(fj::TileClass::Partial));

namespace {

// A slot past the end of the caller's params reads as 0 rather than out of bounds.
int32_t param_value(std::span<const int32_t> params, const ir::Param* param) {
  const int32_t value = static_cast<size_t>(param->slot) < params.size() ? params[param->slot] : 0;
  return param->type == ir::Type::Bool ? (value != 0) : value;
}

// A mask without a body (a default-constructed MaskFunction) shows nothing.
ir::Expr body_of(const MaskFunction& mask) {
  return mask.body.defined() ? mask.body : ir::BoolImm::make(false);
}

int32_t evaluate(const ir::Expr& e, const EvalPoint& point) {
  switch (e.kind()) {
    case ir::ExprKind::IntImm:
      return e.as<ir::IntImm>()->value;
    case ir::ExprKind::BoolImm:
      return e.as<ir::BoolImm>()->value;
    case ir::ExprKind::Var:
      switch (e.as<ir::Var>()->variable) {
        case ir::Variable::B:
          return point.b;
        case ir::Variable::H:
          return point.h;
        case ir::Variable::Q:
          return point.q;
        case ir::Variable::KV:
          return point.kv;
      }
      return 0;
    case ir::ExprKind::Param:
      return param_value(point.params, e.as<ir::Param>());
    default: {
      const int count = ir::operand_count(e.kind());
      std::array<int32_t, 3> values{};
      for (int i = 0; i < count; ++i)
        values[i] = evaluate(ir::operand(e, i), point);
      return ir::apply_operation(e.kind(), std::span<const int32_t>(values.data(), count));
    }
  }
}

// The box of inputs one tile covers: concrete b, h and params, ranges of q and kv.
struct TileBox {
  const Tile& tile;
  fj::Interval q, kv;
  std::span<const int32_t> params;
};

fj::Interval evaluate_interval(const ir::Expr& e, const TileBox& box) {
  switch (e.kind()) {
    case ir::ExprKind::IntImm:
      return fj::Interval::point(e.as<ir::IntImm>()->value);
    case ir::ExprKind::BoolImm:
      return fj::Interval::boolean(e.as<ir::BoolImm>()->value);
    case ir::ExprKind::Var:
      switch (e.as<ir::Var>()->variable) {
        case ir::Variable::B:
          return fj::Interval::point(box.tile.b);
        case ir::Variable::H:
          return fj::Interval::point(box.tile.h);
        case ir::Variable::Q:
          return box.q;
        case ir::Variable::KV:
          return box.kv;
      }
      return fj::Interval::everything();
    case ir::ExprKind::Param:
      return fj::Interval::point(param_value(box.params, e.as<ir::Param>()));
    default: {
      const int count = ir::operand_count(e.kind());
      std::array<fj::Interval, 3> values{};
      for (int i = 0; i < count; ++i)
        values[i] = evaluate_interval(ir::operand(e, i), box);
      return ir::apply_operation(e.kind(), std::span<const fj::Interval>(values.data(), count));
    }
  }
}

}  // namespace

bool evaluate_mask(const MaskFunction& mask, const EvalPoint& point) {
  return evaluate(body_of(mask), point) != 0;
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

TileClass classify_tile(const MaskFunction& mask, const Tile& tile,
                        std::span<const int32_t> params) {
  if (tile.q0 >= tile.q1 || tile.k0 >= tile.k1) return TileClass::Empty;
  const TileBox box{tile, fj::Interval::range(tile.q0, int64_t{tile.q1} - 1),
                    fj::Interval::range(tile.k0, int64_t{tile.k1} - 1), params};
  return static_cast<TileClass>(fj::tile_class(evaluate_interval(body_of(mask), box)));
}

}  // namespace flexjit
