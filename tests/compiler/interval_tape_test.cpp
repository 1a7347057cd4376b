// The compiled interval analysis (compiler/analysis/interval_tape.h) against a walk over the IR: the
// same IntervalValue for random expressions of every type, the same tile classes and kv ranges
// for random masks and the standard ones, bit for bit, over random tiles and parameters (arrays
// with their summaries, through HostParams).
//
// The walk is the analysis as the compiler had it before tapes: each node evaluated where it is
// used, through the generic ir::apply_operation, && and || narrowed by the mask's plans. The
// test reaches into the compiler's internal headers for the plans and the program.
#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../../compiler/analysis/analysis.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/dsl/frontend.h"
#include "random_ir.h"
#include "random_launch.h"
#include "standard_masks.h"

namespace flexjit {
namespace {

using ir::Type;
using namespace testing;

// ---------------------------------------------------------------------------------------------
// The reference: a walk over the IR

ir::IntervalValue of_ints(fj::Interval ints) {
  ir::IntervalValue value;
  value.ints = ints;
  return value;
}

ir::IntervalValue of_floats(fj::FloatInterval floats) {
  ir::IntervalValue value;
  value.floats = floats;
  return value;
}

ir::IntervalValue walk(const ir::Expr& e, const TileBox& box, const MaskPlans* plans);

fj::kvr::Bound walk_plan(const KvPlan& plan, const TileBox& box);

fj::Interval walk_ints(const ir::Expr& e, const TileBox& box) {
  return walk(e, box, nullptr).ints;
}

ir::IntervalValue walk(const ir::Expr& e, const TileBox& box, const MaskPlans* plans) {
  switch (e.kind()) {
    case ir::ExprKind::IntImm:
      return of_ints(fj::Interval::point(e.as<ir::IntImm>()->value));
    case ir::ExprKind::FloatImm:
      return of_floats(fj::FloatInterval::point(e.as<ir::FloatImm>()->value));
    case ir::ExprKind::BoolImm:
      return of_ints(fj::Interval::boolean(e.as<ir::BoolImm>()->value));
    case ir::ExprKind::Var:
      switch (e.as<ir::Var>()->variable) {
        case ir::Variable::B:
          return of_ints(fj::Interval::point(box.tile.b));
        case ir::Variable::H:
          return of_ints(fj::Interval::point(box.tile.h));
        case ir::Variable::Q:
          return of_ints(box.q);
        case ir::Variable::KV:
          return of_ints(box.kv);
        case ir::Variable::Score:
          return of_floats(fj::FloatInterval::everything());
      }
      return {};
    case ir::ExprKind::Param: {
      const int32_t bits = box.params.scalar[e.as<ir::Param>()->slot];
      switch (e.type()) {
        case Type::Bool:
          return of_ints(fj::Interval::point(bits != 0 ? 1 : 0));
        case Type::Int:
          return of_ints(fj::Interval::point(bits));
        case Type::Float:
          return of_floats(fj::FloatInterval::point(fj::bits_to_float(bits)));
      }
      return {};
    }
    case ir::ExprKind::Load: {
      const ir::Load* load = e.as<ir::Load>();
      return ir::load(box.params.array[load->slot], e.type(), walk(load->row, box, plans).ints,
                      walk(load->col, box, plans).ints);
    }
    case ir::ExprKind::Or: {
      if (plans == nullptr) break;
      const auto narrowing = plans->narrowing.find(e.get());
      if (narrowing == plans->narrowing.end()) break;
      const fj::Interval left = walk(ir::operand(e, 0), box, plans).ints;
      const fj::kvr::Bound where = walk_plan(narrowing->second, box);
      const auto right = [&](fj::Interval kv) {
        const TileBox narrowed{box.tile, box.q, kv, box.params};
        return walk(ir::operand(e, 1), narrowed, plans).ints;
      };
      return of_ints(fj::ival::narrowed_or(left, where, box.kv, right));
    }
    default:
      break;
  }
  const int count = ir::operand_count(e.kind());
  std::array<Type, 3> types{};
  std::array<ir::IntervalValue, 3> values{};
  for (int i = 0; i < count; ++i) {
    types[i] = ir::operand(e, i).type();
    values[i] = walk(ir::operand(e, i), box, plans);
  }
  return ir::apply_operation(e.kind(), std::span<const Type>(types.data(), count),
                             std::span<const ir::IntervalValue>(values.data(), count));
}

fj::kvr::Bound walk_step(const KvStep& step, fj::kvr::Bound s, const TileBox& box) {
  switch (step.kind) {
    case KvStep::Add:
      return fj::kvr::addend(s, walk_ints(step.other, box));
    case KvStep::Minuend:
      return fj::kvr::minuend(s, walk_ints(step.other, box));
    case KvStep::Subtrahend:
      return fj::kvr::subtrahend(s, walk_ints(step.other, box));
    case KvStep::Neg:
      return fj::kvr::negated(s);
    case KvStep::Mul:
      return fj::kvr::factor(s, walk_ints(step.other, box));
    case KvStep::Div:
      return fj::kvr::dividend(s, walk_ints(step.other, box));
    case KvStep::Abs:
      return fj::kvr::abs_argument(s);
    case KvStep::Min:
      return fj::kvr::min_argument(s, walk_ints(step.other, box));
    case KvStep::Max:
      return fj::kvr::max_argument(s, walk_ints(step.other, box));
  }
  return fj::kvr::all();
}

fj::kvr::Bound walk_plan(const KvPlan& plan, const TileBox& box) {
  switch (plan.kind) {
    case KvPlan::All:
      return fj::kvr::all();
    case KvPlan::None:
      return fj::kvr::none();
    case KvPlan::Intersect:
    case KvPlan::Hull: {
      fj::kvr::Bound result = walk_plan(plan.children[0], box);
      for (size_t i = 1; i < plan.children.size(); ++i) {
        const fj::kvr::Bound child = walk_plan(plan.children[i], box);
        result = plan.kind == KvPlan::Intersect ? fj::kvr::intersect(result, child)
                                                : fj::kvr::hull(result, child);
      }
      return result;
    }
    case KvPlan::Guard:
      return fj::kvr::guard(walk_ints(plan.condition, box), plan.polarity);
    case KvPlan::Atom: {
      fj::kvr::Bound s = fj::kvr::compared_with(plan.op, walk_ints(plan.other, box));
      for (const KvStep& step : plan.steps)
        s = walk_step(step, s, box);
      const auto atom = [&](fj::Interval kv) {
        return walk_ints(plan.condition, TileBox{box.tile, box.q, kv, box.params});
      };
      return fj::kvr::verified(s, atom, plan.polarity);
    }
  }
  return fj::kvr::all();
}

// ---------------------------------------------------------------------------------------------
// Comparison

std::string text(const ir::IntervalValue& value) {
  std::ostringstream out;
  out << "ints [" << value.ints.lo << ", " << value.ints.hi << "] floats ["
      << ir::float_text(value.floats.lo) << ", " << ir::float_text(value.floats.hi) << "]"
      << (value.floats.nan ? " nan" : "");
  return out.str();
}

bool identical(const ir::IntervalValue& a, const ir::IntervalValue& b) {
  return a.ints.lo == b.ints.lo && a.ints.hi == b.ints.hi &&
         std::bit_cast<uint32_t>(a.floats.lo) == std::bit_cast<uint32_t>(b.floats.lo) &&
         std::bit_cast<uint32_t>(a.floats.hi) == std::bit_cast<uint32_t>(b.floats.hi) &&
         a.floats.nan == b.floats.nan;
}

std::string box_text(const TileBox& box) {
  std::ostringstream out;
  out << "b " << box.tile.b << " h " << box.tile.h << " q [" << box.q.lo << ", " << box.q.hi
      << "] kv [" << box.kv.lo << ", " << box.kv.hi << "]";
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// Random inputs

RandomExprOptions options(bool mask) {
  RandomExprOptions result;
  result.scalars = {{Type::Int, 0, "window"},
                    {Type::Int, 1, "p"},
                    {Type::Float, 2, "t"},
                    {Type::Bool, 3, "c"},
                    {Type::Int, 4, "chunk"}};
  result.arrays = {{Type::Int, 0, "doc", {"b", "kv"}},    {Type::Int, 1, "pos", {"kv"}},
                   {Type::Float, 2, "fdoc", {"b", "kv"}}, {Type::Float, 3, "fpos", {"q"}},
                   {Type::Int, 4, "prefix", {"b"}},       {Type::Int, 5, "ranges", {"b", "r"}}};
  result.score = !mask;
  result.mask_shapes = mask ? 5 : 0;
  return result;
}

dsl::Type dsl_type(Type type) {
  return type == Type::Float  ? dsl::Type::Float
         : type == Type::Bool ? dsl::Type::Bool
                              : dsl::Type::Int;
}

// A variant declaring the parameters of `options`, for HostParams to summarise the arrays.
Variant variant_of(const ir::Expr& mask, const RandomExprOptions& options) {
  Variant variant;
  variant.name = variant.mask_name = "random";
  variant.mask = mask;
  for (const ScalarDecl& scalar : options.scalars)
    variant.scalars.push_back({scalar.name, dsl_type(scalar.type), scalar.slot, {}});
  for (const ArrayDecl& array : options.arrays)
    variant.arrays.push_back({array.name, dsl_type(array.type), array.slot, array.dims});
  return variant;
}

// Values along an array's lines: runs of rising ids (documents, ranges), small values, and
// int32 extremes; float arrays hold the same values halved, or special floats.
HostArray random_array(RandomExpr& random, const ArrayDecl& decl) {
  HostArray array;
  const auto extent = [&](const std::string& dim) {
    if (dim == "q" || dim == "kv") return random.pick(8) ? 20 + random.pick(80) : random.pick(3);
    return dim == "r" ? 2 * (1 + random.pick(4)) : 1 + random.pick(3);
  };
  array.rows = extent(decl.dims[0]);
  array.cols = decl.dims.size() == 2 ? extent(decl.dims[1]) : 1;
  int32_t id = random.pick(3);
  for (int32_t i = 0; i < array.rows * array.cols; ++i) {
    int32_t value = random.pick(4) ? id : random_int(random);
    if (random.pick(6) == 0) id += 1 + random.pick(20);
    if (decl.type == Type::Float) {
      const std::vector<float>& special = float_constants();
      value = fj::float_to_bits(random.pick(5) ? static_cast<float>(value) * 0.5f
                                               : special[random.pick(int(special.size()))]);
    }
    array.bits.push_back(value);
  }
  return array;
}

HostParams random_params(RandomExpr& random, const Variant& variant,
                         const RandomExprOptions& options) {
  std::vector<int32_t> scalars(fj::kMaxScalarParams, 0);
  for (const ScalarDecl& scalar : options.scalars) {
    scalars[scalar.slot] =
        scalar.type == Type::Float
            ? fj::float_to_bits(float_constants()[random.pick(int(float_constants().size()))])
            : random_int(random);
  }
  std::vector<HostArray> arrays(fj::kMaxArrayParams);
  for (const ArrayDecl& array : options.arrays)
    arrays[array.slot] = random_array(random, array);
  return HostParams(variant, std::move(scalars), std::move(arrays));
}

// A range of positions: mostly small and near 0 (where the arrays are), sometimes negative,
// wide, or at the ends of int32.
fj::Interval random_range(RandomExpr& random) {
  int64_t lo = 0;
  switch (random.pick(8)) {
    case 0:
      lo = -1 - random.pick(100);
      break;
    case 1:
      lo = kMax - random.pick(64);
      break;
    case 2:
      lo = kMin + random.pick(8);
      break;
    default:
      lo = random.pick(100);
      break;
  }
  const int64_t width = random.pick(4) ? random.pick(64) : random.pick(1 << 20);
  return fj::Interval::range(lo, std::min<int64_t>(lo + width, kMax));
}

// ---------------------------------------------------------------------------------------------
// Tests

TEST_CASE("compiled interval analysis equals the walk on random expressions", "[interval][tape]") {
  int64_t compared = 0, narrowed = 0;
  for (const bool mask : {true, false}) {
    const RandomExprOptions random_options = options(mask);
    RandomExpr random(mask ? 20250611 : 20250612, random_options);
    for (int e = 0; e < (mask ? 1500 : 600); ++e) {
      const Type type = mask ? Type::Bool : static_cast<Type>(random.pick(3));
      // Now and then one deep enough that its frame outgrows the stack's.
      const ir::Expr made = random.make(type, e % 50 == 0 ? 9 : 1 + random.pick(5));
      const ir::Expr expr = e % 2 ? ir::run_passes(made) : made;
      const MaskPlans plans = plan_mask(expr);
      narrowed += !plans.narrowing.empty();
      const Variant variant = variant_of(expr, random_options);
      std::optional<MaskAnalysis> analysis;  // of masks only
      if (mask) analysis.emplace(variant);
      for (int launch = 0; launch < 2; ++launch) {
        const HostParams host = random_params(random, variant, random_options);
        const fj::MaskParams& params = host.params();
        for (int t = 0; t < 16; ++t) {
          const fj::Interval q = random_range(random), kv = random_range(random);
          const Tile tile{random.pick(3),
                          random.pick(3),
                          static_cast<int32_t>(q.lo),
                          static_cast<int32_t>(q.hi + 1),
                          static_cast<int32_t>(kv.lo),
                          static_cast<int32_t>(kv.hi + 1)};
          const TileBox box{tile, q, kv, params};
          const ir::IntervalValue want = walk(expr, box, &plans);
          // A frame is not cleared between evaluations: one over other queries first, so that
          // a value read before it is computed would be the other evaluation's.
          const Tile decoy_tile{tile.b + 1, tile.h + 1, 0, 1, 0, 1};
          const TileBox decoy{decoy_tile, random_range(random), random_range(random), params};
          plans.program.value(decoy);
          const ir::IntervalValue got = plans.program.value(box);
          INFO(ir::to_string(expr) << "\n" << box_text(box));
          if (!identical(got, want)) FAIL("value " << text(got) << ", walk " << text(want));
          ++compared;
          if (!mask) continue;  // a kv plan is a Bool mask's
          plans.program.kv_bound(decoy);
          const fj::kvr::Bound bound = plans.program.kv_bound(box);
          const fj::kvr::Bound walked = walk_plan(plans.kv, box);
          if (bound.lo != walked.lo || bound.hi != walked.hi) {
            FAIL("kv bound [" << bound.lo << ", " << bound.hi << "], walk [" << walked.lo << ", "
                              << walked.hi << "]");
          }
          ++compared;
          if (q.hi >= kMax || kv.hi >= kMax) continue;
          // The public entry points, over the same tile and queries.
          const TileClass tile_class = analysis->classify(tile, &params);
          if (tile_class != static_cast<TileClass>(fj::tile_class(want.ints))) {
            FAIL("class " << tile_class_name(tile_class));
          }
          const KvRange range = analysis->kv_range(tile.b, tile.h, tile.q0, tile.q1, &params);
          const fj::KvRange walked_range = fj::kvr::to_range(
              walk_plan(plans.kv, TileBox{tile, q, fj::Interval::point(0), params}));
          if (range.lo != walked_range.lo || range.hi != walked_range.hi) {
            FAIL("kv_range [" << range.lo << ", " << range.hi << "), walk [" << walked_range.lo
                              << ", " << walked_range.hi << ")");
          }
          compared += 2;
        }
      }
    }
  }
  INFO(compared << " comparisons, " << narrowed << " expressions with narrowing");
  CHECK(compared >= 100000);
  CHECK(narrowed >= 100);
}

const dsl::Module& standard() {
  return testing::standard_masks();
}

TEST_CASE("compiled interval analysis equals the walk on the standard masks", "[interval][tape]") {
  RandomExpr random(20250613, {});
  int64_t compared = 0;
  for (const char* name : {"causal", "sliding", "sliding_sym", "prefix_lm", "prefix_ranges", "rswa",
                           "chunked", "document"}) {
    Result<Variant> variant = lower_mask(standard(), name);
    REQUIRE(variant.ok());
    const MaskPlans plans = plan_mask(variant->mask);
    const MaskAnalysis analysis(*variant);
    for (int launch = 0; launch < 20; ++launch) {
      // Two requests: rising ranges, runs of document ids, a prefix length, a window.
      const HostParams host = standard_params(random, *variant, true);
      const fj::MaskParams& params = host.params();
      for (int t = 0; t < 500; ++t) {
        const int32_t q0 = random.pick(1000), k0 = random.pick(2) ? random.pick(1000) : q0;
        const int32_t q1 = q0 + 1 + random.pick(64),
                      k1 = k0 + 1 + random.pick(random.pick(4) ? 64 : 600);
        const Tile tile{random.pick(2), 0, q0, q1, k0, k1};
        const fj::Interval q = fj::Interval::range(q0, q1 - 1);
        const TileBox box{tile, q, fj::Interval::range(k0, k1 - 1), params};
        INFO(name << ": " << box_text(box));
        const ir::IntervalValue want = walk(variant->mask, box, &plans);
        CHECK(analysis.classify(tile, &params) ==
              static_cast<TileClass>(fj::tile_class(want.ints)));
        const fj::KvRange walked = fj::kvr::to_range(
            walk_plan(plans.kv, TileBox{tile, q, fj::Interval::point(0), params}));
        const KvRange range = analysis.kv_range(tile.b, tile.h, q0, q1, &params);
        CHECK(range.lo == walked.lo);
        CHECK(range.hi == walked.hi);
        compared += 2;
      }
    }
  }
  CHECK(compared >= 100000);
}

}  // namespace
}  // namespace flexjit
