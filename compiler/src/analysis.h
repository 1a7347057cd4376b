// Internal to the compiler: the interval analysis that classify_tile and kv_range share.
#pragma once

#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/semantics.h"

namespace flexjit {

// The box of inputs one analysis covers: concrete b, h and params, ranges of q and kv.
struct TileBox {
  const Tile& tile;  // b and h
  fj::Interval q, kv;
  const fj::MaskParams& params;
};

// The values `e` takes over the box (sound: every value of every point is included).
ir::IntervalValue evaluate_interval(const ir::Expr& e, const TileBox& box);

// Every scalar reads 0 and every array is empty when the caller passes no parameters.
const fj::MaskParams& params_or_zero(const fj::MaskParams* params);

// A variant without a mask (a default-constructed Variant) shows nothing.
ir::Expr mask_of(const Variant& variant);

}  // namespace flexjit
