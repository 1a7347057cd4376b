// Random well-typed IR for the property tests: every node kind over the variables, the scalar
// params and the array reads of a declared signature, and, on request, the shapes masks are
// made of (comparisons of kv with linear forms in q, distances, blocks, document-style reads
// indexed by positions, any/all chains), so that the passes, the tile classifier and the kv
// range solver meet what they are built for as well as arbitrary nesting and int32 extremes.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flexjit/compiler/ir.h"
#include "flexjit/compiler/mask.h"

namespace flexjit::testing {

inline constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
inline constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline ir::Expr var(ir::Variable variable) {
  return ir::Var::make(variable);
}
inline ir::Expr q() {
  return var(ir::Variable::Q);
}
inline ir::Expr kv() {
  return var(ir::Variable::KV);
}
inline ir::Expr h() {
  return var(ir::Variable::H);
}
inline ir::Expr score() {
  return var(ir::Variable::Score);
}
inline ir::Expr num(int32_t value) {
  return ir::IntImm::make(value);
}
inline ir::Expr real(float value) {
  return ir::FloatImm::make(value);
}
inline ir::Expr truth(bool value) {
  return ir::BoolImm::make(value);
}

// Floats worth meeting: signed zeros, ones, a value with no exact binary form, huge and tiny
// magnitudes, infinities, NaN and the smallest subnormal.
const std::vector<float>& float_constants();

// Copies a tree node by node: structurally equal to the original, sharing nothing with it.
class Copier : public ir::IRMutator {
 public:
  ir::Expr mutate(const ir::Expr& e) override;
};

// A runtime scalar the expressions may read: Param(type, slot, name).
struct ScalarDecl {
  ir::Type type = ir::Type::Int;
  int slot = 0;
  std::string name;
};

// A runtime array the expressions may read, with its dimensions named as in a `param`
// declaration (`{"b", "kv"}`: rank 2, one row per request, one column per key). With mask
// shapes on, a dimension named `q` or `kv` is read at positions (`kv`, `q - 1`, `kv / 64`),
// `b` at the request and `h` at the head; any other index is a random Int expression.
struct ArrayDecl {
  ir::Type type = ir::Type::Int;
  int slot = 0;
  std::string name;
  std::vector<std::string> dims;
};

struct RandomExprOptions {
  std::vector<ScalarDecl> scalars;
  std::vector<ArrayDecl> arrays;
  bool score = true;    // Var(Score) may appear (score bodies); mask bodies never see it
  int mask_shapes = 0;  // out of 8: how often a Bool is built as one of the mask shapes
  // Ints may be bitwise operations and shifts. Off, the generator draws what it drew before
  // they existed, seed for seed (a baseline recorded by seed, as the cliffs test's, stays valid).
  bool bitwise = true;
};

// The parameters random masks read (window, p, t, c, chunk; doc[b, kv], pos[kv], fdoc[b, kv],
// fpos[q], prefix[b], ranges[b, r]), mask shapes `mask_shapes` times out of 8, no score.
RandomExprOptions mask_options(int mask_shapes);

// A variant of `mask` (and `score`, when defined) declaring the parameters of `options`.
Variant random_variant(const ir::Expr& mask, const RandomExprOptions& options,
                       const ir::Expr& score = {});

// Generated variant `index` of issue 29's set (tests/runtime/generated_masks_test.cpp, the
// CUDA hooks of tests/compiler/emitted_hooks_test.cpp), named `generated<index>`: a mask (half
// of them with an any/all at the language's limits) and, for half, a score; both through the
// IR passes, as lowering runs them. The same variant for an index on every run.
Variant generated_variant(int index);

class RandomExpr {
 public:
  RandomExpr(uint32_t seed, RandomExprOptions options);

  // A random expression of `type`, about `depth` operations deep (mask shapes add a few
  // levels of their own). Earlier subexpressions come back now and then, the same node or a
  // copy, so that the passes meet sharing, x - x, min(x, x) and the like.
  ir::Expr make(ir::Type type, int depth);

  // any(i < N: body) or all(...) as lowering writes it, at the language's limits: body's terms
  // for i = 0 .. N-1 (N up to 64, often exactly 64) chained left with || or &&, the body
  // reading i as array columns (`ranges[b, 2i]`), offsets and divisors; now and then the body is
  // itself such a chain over j (nested two deep: N * M terms), reading N-th-based columns
  // `M i + j`. Run ir::run_passes on the result, as lowering does.
  ir::Expr reduction(int depth);

  // A uniform integer in [0, n).
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  std::mt19937& rng() { return rng_; }
  const RandomExprOptions& options() const { return options_; }

 private:
  std::pair<ir::Expr, ir::Expr> pair(ir::Type type, int depth);
  ir::Expr binary(ir::ExprKind kind, ir::Type type, int depth);
  ir::Expr boolean(int depth);
  ir::Expr select(ir::Type type, int depth);
  ir::Expr integer(int depth);
  ir::Expr floating(int depth);
  ir::Expr integer_constant();
  ir::Expr integer_leaf();
  ir::Expr float_leaf();
  // A declared scalar of `type`, or undefined when there is none.
  ir::Expr param(ir::Type type);
  // A read of a declared array of `type`, or undefined when there is none.
  ir::Expr load(ir::Type type, int depth);
  ir::Expr load_at(const ArrayDecl& array, const ir::Expr& position, int depth);
  const ArrayDecl* pick_array(ir::Type type, bool with_position);

  // Mask shapes.
  ir::Expr mask_shape(int depth);
  ir::Expr key_bound();
  ir::Expr distance_bound();
  ir::Expr same_block();
  ir::Expr same_value();
  ir::Expr chain(int depth);
  ir::Expr range_term(int index);
  ir::Expr key_side();
  ir::Expr query_side();
  ir::Expr position_of(ir::Expr position);
  ir::Expr offset();
  ir::Expr divisor();
  ir::Expr width();
  ir::Expr comparison(ir::Expr a, ir::Expr b);
  // A term of a reduction's body reading the Int `at` (an expression of the indices).
  ir::Expr indexed_term(const ir::Expr& at, int depth);
  // `body` for index = 0 .. count-1, chained left (the reduction's identity when count is 0).
  ir::Expr unrolled(const ir::Expr& body, const ir::Expr& index, int count, bool all);

  RandomExprOptions options_;
  std::mt19937 rng_;
  std::vector<ir::Expr> pools_[3];
};

}  // namespace flexjit::testing
