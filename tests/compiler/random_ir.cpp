#include "random_ir.h"

#include <algorithm>

namespace flexjit::testing {

using ir::Expr;
using ir::ExprKind;
using ir::Type;

const std::vector<float>& float_constants() {
  static const std::vector<float> values = {0.0f,  -0.0f, 1.0f,  -1.0f, 0.5f,    2.0f,
                                            50.0f, 0.1f,  -2.5f, 1e30f, -1e-30f, kInf,
                                            -kInf, kNaN,  3.0f,  1e-45f};
  return values;
}

RandomExprOptions mask_options(int mask_shapes) {
  RandomExprOptions options;
  options.scalars = {{Type::Int, 0, "window"},
                     {Type::Int, 1, "p"},
                     {Type::Float, 2, "t"},
                     {Type::Bool, 3, "c"},
                     {Type::Int, 4, "chunk"}};
  options.arrays = {{Type::Int, 0, "doc", {"b", "kv"}},    {Type::Int, 1, "pos", {"kv"}},
                    {Type::Float, 2, "fdoc", {"b", "kv"}}, {Type::Float, 3, "fpos", {"q"}},
                    {Type::Int, 4, "prefix", {"b"}},       {Type::Int, 5, "ranges", {"b", "r"}}};
  options.score = false;
  options.mask_shapes = mask_shapes;
  return options;
}

Variant random_variant(const Expr& mask, const RandomExprOptions& options, const Expr& score) {
  Variant variant;
  variant.name = variant.mask_name = "random";
  variant.mask = mask;
  if (score.defined()) {
    variant.score = score;
    variant.score_name = "score";
  }
  for (const ScalarDecl& scalar : options.scalars) {
    variant.scalars.push_back({scalar.name,
                               scalar.type == Type::Float  ? dsl::Type::Float
                               : scalar.type == Type::Bool ? dsl::Type::Bool
                                                           : dsl::Type::Int,
                               scalar.slot,
                               {}});
  }
  for (const ArrayDecl& array : options.arrays) {
    variant.arrays.push_back({array.name,
                              array.type == Type::Float ? dsl::Type::Float : dsl::Type::Int,
                              array.slot, array.dims});
  }
  variant.uses_head = ir::uses_variable(mask, ir::Variable::H);
  return variant;
}

Variant generated_variant(int index) {
  RandomExprOptions options = mask_options(6);
  // The variants as the cliffs test's known lists name them: drawn as before the bitwise
  // operations existed.
  options.bitwise = false;
  // A per-head array instead of fdoc[b, kv]: the kernels meet `h` through it.
  options.arrays[2] = {Type::Float, 2, "slopes", {"h"}};
  RandomExpr random(29000 + static_cast<uint32_t>(index), options);
  Expr mask;
  switch (random.pick(4)) {
    case 0:
      mask = random.make(Type::Bool, 4);
      break;
    case 1:
      mask = random.reduction(3);
      break;
    case 2:  // prefix_ranges' shape: causal || any(...)
      mask = ir::Or::make(ir::GE::make(q(), kv()), random.reduction(3));
      break;
    default:
      mask = ir::And::make(random.make(Type::Bool, 3), random.reduction(2));
      break;
  }
  Expr score;
  if (random.pick(2) == 0) {
    options.score = true;
    RandomExpr scores(39000 + static_cast<uint32_t>(index), options);
    score = ir::run_passes(scores.make(Type::Float, 3));
  }
  Variant variant = random_variant(ir::run_passes(mask), options, score);
  variant.name = variant.mask_name = "generated" + std::to_string(index);
  return variant;
}

Expr Copier::mutate(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::IntImm:
      return num(e.as<ir::IntImm>()->value);
    case ExprKind::FloatImm:
      return real(e.as<ir::FloatImm>()->value);
    case ExprKind::BoolImm:
      return truth(e.as<ir::BoolImm>()->value);
    case ExprKind::Var:
      return var(e.as<ir::Var>()->variable);
    case ExprKind::Param:
      return ir::Param::make(e.type(), e.as<ir::Param>()->slot, e.as<ir::Param>()->name);
    default:
      return IRMutator::mutate(e);
  }
}

namespace {

constexpr ExprKind kComparisons[] = {ExprKind::EQ, ExprKind::NE, ExprKind::LT,
                                     ExprKind::LE, ExprKind::GT, ExprKind::GE};
constexpr ExprKind kArithmetic[] = {ExprKind::Add, ExprKind::Sub, ExprKind::Mul, ExprKind::Div,
                                    ExprKind::Mod, ExprKind::Min, ExprKind::Max};
constexpr ExprKind kBitwise[] = {ExprKind::BitAnd, ExprKind::BitOr, ExprKind::BitXor};

Expr operation(ExprKind kind, Expr a, Expr b) {
  const Expr operands[] = {std::move(a), std::move(b)};
  return ir::make_operation(kind, operands);
}

bool is_position(const std::string& dim) {
  return dim == "q" || dim == "kv";
}

}  // namespace

RandomExpr::RandomExpr(uint32_t seed, RandomExprOptions options)
    : options_(std::move(options)), rng_(seed) {}

Expr RandomExpr::make(Type type, int depth) {
  std::vector<Expr>& pool = pools_[static_cast<int>(type)];
  if (!pool.empty() && pick(8) == 0) {
    const Expr& old = pool[pick(static_cast<int>(pool.size()))];
    if (old->tree_size < 200) return pick(2) ? old : Copier().mutate(old);
  }
  Expr e = type == Type::Bool  ? boolean(depth)
           : type == Type::Int ? integer(depth)
                               : floating(depth);
  if (ir::operand_count(e.kind()) > 0) {
    if (pool.size() < 32) {
      pool.push_back(e);
    } else {
      pool[pick(32)] = e;
    }
  }
  return e;
}

// Two operands of one type; sometimes the same subexpression twice.
std::pair<Expr, Expr> RandomExpr::pair(Type type, int depth) {
  Expr a = make(type, depth);
  if (pick(8) == 0) {
    Expr b = pick(2) ? a : Copier().mutate(a);
    return {std::move(a), std::move(b)};
  }
  Expr b = make(type, depth);
  return {std::move(a), std::move(b)};
}

Expr RandomExpr::binary(ExprKind kind, Type type, int depth) {
  auto [a, b] = pair(type, depth);
  return operation(kind, std::move(a), std::move(b));
}

Expr RandomExpr::boolean(int depth) {
  if (depth > 0 && pick(8) < options_.mask_shapes) return mask_shape(depth);
  if (depth == 0 || pick(6) == 0) {
    const Expr flag = param(Type::Bool);
    return pick(2) || !flag.defined() ? truth(pick(2) == 1) : flag;
  }
  switch (pick(8)) {
    case 0:
    case 1:
      return binary(kComparisons[pick(6)], Type::Int, depth - 1);
    case 2:
      return binary(kComparisons[pick(6)], Type::Float, depth - 1);
    case 3:
      return binary(pick(2) ? ExprKind::EQ : ExprKind::NE, Type::Bool, depth - 1);
    case 4:
      return ir::Not::make(make(Type::Bool, depth - 1));
    case 5:
      return select(Type::Bool, depth);
    default:
      return binary(pick(2) ? ExprKind::And : ExprKind::Or, Type::Bool, depth - 1);
  }
}

Expr RandomExpr::select(Type type, int depth) {
  auto [a, b] = pair(type, depth - 1);
  Expr condition = make(Type::Bool, depth - 1);
  return ir::Select::make(std::move(condition), std::move(a), std::move(b));
}

Expr RandomExpr::integer(int depth) {
  if (depth == 0 || pick(5) == 0) return integer_leaf();
  // Cases 6 to 9, the bitwise ones, are drawn only with options_.bitwise.
  int choice = pick(options_.bitwise ? 18 : 14);
  if (!options_.bitwise && choice >= 6) choice += 4;
  switch (choice) {
    case 0:
      return ir::Abs::make(make(Type::Int, depth - 1));
    case 1:
      return ir::Neg::make(make(Type::Int, depth - 1));
    case 2:
      return select(Type::Int, depth);
    case 3:
      return ir::ToInt::make(make(pick(3) ? Type::Float : Type::Bool, depth - 1));
    case 4: {
      Expr read = load(Type::Int, depth);
      return read.defined() ? read : integer_leaf();
    }
    case 5: {  // an int plus or minus a constant, for the offset rules
      Expr a = make(Type::Int, depth - 1);
      return operation(pick(2) ? ExprKind::Add : ExprKind::Sub, std::move(a), integer_constant());
    }
    case 6:
      return binary(kBitwise[pick(3)], Type::Int, depth - 1);
    case 7:
      return ir::BitNot::make(make(Type::Int, depth - 1));
    case 8: {  // a shift, by any int or by a count at or beyond the edges of [0, 31]
      static constexpr int32_t kCounts[] = {-1, 0, 1, 5, 30, 31, 32, 33, kMin, kMax};
      Expr a = make(Type::Int, depth - 1);
      Expr count = pick(2) ? make(Type::Int, depth - 1) : num(kCounts[pick(10)]);
      return operation(pick(2) ? ExprKind::Shl : ExprKind::Shr, std::move(a), std::move(count));
    }
    case 9: {  // a bit of a word, as bit-packed masks read it: (x >> (kv % 32)) & 1
      Expr a = make(Type::Int, depth - 1);
      Expr count = operation(ExprKind::Mod, pick(2) ? kv() : make(Type::Int, depth - 1), num(32));
      return operation(ExprKind::BitAnd, operation(ExprKind::Shr, std::move(a), std::move(count)),
                       num(pick(2) ? 1 : 1 + pick(255)));
    }
    default:
      return binary(kArithmetic[pick(7)], Type::Int, depth - 1);
  }
}

Expr RandomExpr::floating(int depth) {
  if (depth == 0 || pick(5) == 0) return float_leaf();
  static constexpr ExprKind kFunctions[] = {ExprKind::Tanh,    ExprKind::Exp,   ExprKind::Exp2,
                                            ExprKind::Log,     ExprKind::Log2,  ExprKind::Sqrt,
                                            ExprKind::Sigmoid, ExprKind::Floor, ExprKind::Ceil};
  switch (pick(14)) {
    case 0:
      return ir::Abs::make(make(Type::Float, depth - 1));
    case 1:
      return ir::Neg::make(make(Type::Float, depth - 1));
    case 2:
      return select(Type::Float, depth);
    case 3:
      return ir::ToFloat::make(make(pick(3) ? Type::Int : Type::Bool, depth - 1));
    case 4:
    case 5: {
      const Expr operands[] = {make(Type::Float, depth - 1)};
      return ir::make_operation(kFunctions[pick(9)], operands);
    }
    case 6: {
      Expr read = load(Type::Float, depth);
      return read.defined() ? read : float_leaf();
    }
    default:
      return binary(kArithmetic[pick(7)], Type::Float, depth - 1);
  }
}

Expr RandomExpr::integer_constant() {
  static constexpr int32_t kExtremes[] = {kMin, kMin + 1, kMax, kMax - 1, 1 << 16, -1, 0, 1};
  return num(pick(3) ? pick(11) - 5 : kExtremes[pick(8)]);
}

Expr RandomExpr::integer_leaf() {
  switch (pick(6)) {
    case 0:
    case 1:
      return pick(2) ? q() : kv();
    case 2:
      return pick(2) ? var(ir::Variable::B) : h();
    case 3: {
      Expr p = param(Type::Int);
      return p.defined() ? p : integer_constant();
    }
    default:
      return integer_constant();
  }
}

Expr RandomExpr::float_leaf() {
  switch (pick(4)) {
    case 0:
      if (options_.score) return score();
      [[fallthrough]];
    case 1: {
      Expr p = param(Type::Float);
      if (p.defined()) return p;
      [[fallthrough]];
    }
    default: {
      const std::vector<float>& constants = float_constants();
      return real(constants[pick(static_cast<int>(constants.size()))]);
    }
  }
}

Expr RandomExpr::param(Type type) {
  std::vector<const ScalarDecl*> matching;
  for (const ScalarDecl& scalar : options_.scalars) {
    if (scalar.type == type) matching.push_back(&scalar);
  }
  if (matching.empty()) return {};
  const ScalarDecl& chosen = *matching[pick(static_cast<int>(matching.size()))];
  return ir::Param::make(type, chosen.slot, chosen.name);
}

const ArrayDecl* RandomExpr::pick_array(Type type, bool with_position) {
  std::vector<const ArrayDecl*> matching;
  for (const ArrayDecl& array : options_.arrays) {
    const bool positional = std::any_of(array.dims.begin(), array.dims.end(), is_position);
    if (array.type == type && (!with_position || positional)) matching.push_back(&array);
  }
  if (matching.empty()) return nullptr;
  return matching[pick(static_cast<int>(matching.size()))];
}

Expr RandomExpr::load(Type type, int depth) {
  const ArrayDecl* array = pick_array(type, false);
  if (array == nullptr) return {};
  // With mask shapes, half the reads are at positions (`doc[b, kv]`), the rest anywhere.
  if (options_.mask_shapes > 0 && pick(2)) return load_at(*array, pick(2) ? q() : kv(), depth);
  Expr row = make(Type::Int, depth - 1);
  Expr col = array->dims.size() == 2 ? make(Type::Int, depth - 1) : num(0);
  return ir::Load::make(type, array->slot, array->name, static_cast<int>(array->dims.size()),
                        std::move(row), std::move(col));
}

// A read of `array` with each index shaped by its dimension: a position dimension at
// `position` (sometimes shifted or scaled), b at the request, h at the head, others anywhere.
Expr RandomExpr::load_at(const ArrayDecl& array, const Expr& position, int depth) {
  std::vector<Expr> indices;
  for (const std::string& dim : array.dims) {
    if (is_position(dim)) {
      indices.push_back(position_of(position));
    } else if (dim == "b" && pick(6)) {
      indices.push_back(var(ir::Variable::B));
    } else if (dim == "h" && pick(6)) {
      indices.push_back(h());
    } else {
      indices.push_back(pick(2) ? num(pick(4)) : make(Type::Int, std::max(depth - 2, 0)));
    }
  }
  Expr col = indices.size() == 2 ? indices[1] : num(0);
  return ir::Load::make(array.type, array.slot, array.name, static_cast<int>(indices.size()),
                        indices[0], std::move(col));
}

// ---------------------------------------------------------------------------------------------
// Mask shapes

Expr RandomExpr::mask_shape(int depth) {
  if (depth <= 0) return key_bound();
  switch (pick(12)) {
    case 0:
    case 1:
    case 2:
      return key_bound();
    case 3:
      return distance_bound();
    case 4:
      return same_block();
    case 5:
      return same_value();
    case 6:
      return chain(depth);
    case 7: {  // causal && ..., causal || ...
      Expr causal = pick(4) ? ir::GE::make(q(), kv()) : ir::LE::make(kv(), q());
      Expr rest = mask_shape(depth - 1);
      return operation(pick(3) ? ExprKind::And : ExprKind::Or, std::move(causal), std::move(rest));
    }
    case 8:
      return ir::Not::make(mask_shape(depth - 1));
    case 9: {
      Expr condition = pick(2) ? make(Type::Bool, depth - 1) : mask_shape(depth - 1);
      Expr a = mask_shape(depth - 1);
      Expr b = mask_shape(depth - 1);
      return ir::Select::make(std::move(condition), std::move(a), std::move(b));
    }
    default: {
      Expr a = mask_shape(depth - 1);
      Expr b = pick(2) ? mask_shape(depth - 1) : make(Type::Bool, depth - 1);
      return operation(pick(2) ? ExprKind::And : ExprKind::Or, std::move(a), std::move(b));
    }
  }
}

// A comparison, either way round: `a < b` or `b > a`.
Expr RandomExpr::comparison(Expr a, Expr b) {
  const ExprKind kind = kComparisons[pick(4) ? 2 + pick(4) : pick(2)];
  return pick(2) ? operation(kind, std::move(a), std::move(b))
                 : operation(kind == ExprKind::LT   ? ExprKind::GT
                             : kind == ExprKind::LE ? ExprKind::GE
                             : kind == ExprKind::GT ? ExprKind::LT
                             : kind == ExprKind::GE ? ExprKind::LE
                                                    : kind,
                             std::move(b), std::move(a));
}

// kv (through +, -, *, /) against a linear form in q: `kv <= q`, `kv * 2 >= q`, `kv < P`.
Expr RandomExpr::key_bound() {
  Expr key = key_side();
  Expr query = query_side();
  return comparison(std::move(key), std::move(query));
}

// `q - kv < W`, `kv - q <= W`, `abs(q - kv) < W`.
Expr RandomExpr::distance_bound() {
  Expr distance;
  switch (pick(4)) {
    case 0:
      distance = ir::Sub::make(kv(), q());
      break;
    case 1:
      distance = ir::Abs::make(ir::Sub::make(q(), kv()));
      break;
    default:
      distance = ir::Sub::make(q(), kv());
      break;
  }
  return comparison(std::move(distance), width());
}

// `kv / C == q / C`, `(kv / C) * C <= q`, `kv % C < W`.
Expr RandomExpr::same_block() {
  const Expr c = divisor();
  switch (pick(4)) {
    case 0:
      return ir::LE::make(ir::Mul::make(ir::Div::make(kv(), c), c), q());
    case 1:
      return comparison(ir::Mod::make(pick(2) ? kv() : q(), c), width());
    default: {
      Expr a = ir::Div::make(kv(), c);
      Expr b = ir::Div::make(q(), pick(4) ? c : divisor());
      return pick(4) ? operation(pick(4) ? ExprKind::EQ : ExprKind::NE, std::move(a), std::move(b))
                     : comparison(std::move(a), std::move(b));
    }
  }
}

// `doc[b, q] == doc[b, kv]` and relatives, on any array with a position dimension.
Expr RandomExpr::same_value() {
  const ArrayDecl* array = pick_array(pick(3) ? Type::Int : Type::Float, true);
  if (array == nullptr) array = pick_array(Type::Int, true);
  if (array == nullptr) return key_bound();
  Expr at_query = load_at(*array, q(), 1);
  Expr at_key = load_at(*array, kv(), 1);
  if (pick(4)) return operation(pick(6) ? ExprKind::EQ : ExprKind::NE, at_query, at_key);
  return comparison(std::move(at_key), std::move(at_query));
}

// any(...) / all(...) as lowering unrolls them: a left-nested || or && chain of terms.
Expr RandomExpr::chain(int depth) {
  const ExprKind kind = pick(3) ? ExprKind::Or : ExprKind::And;
  const int terms = 2 + pick(3);
  const bool ranges = pick(2) == 0;
  Expr result = ranges ? range_term(0) : mask_shape(depth - 1);
  for (int i = 1; i < terms; ++i) {
    Expr term = ranges ? range_term(i) : mask_shape(depth - 1);
    result = operation(kind, std::move(result), std::move(term));
  }
  if (pick(2)) result = operation(ExprKind::Or, ir::GE::make(q(), kv()), std::move(result));
  return result;
}

namespace {

// Replaces one leaf node (an index placeholder) with a constant.
class SubstituteIndex : public ir::IRMutator {
 public:
  SubstituteIndex(const ir::ExprNode* index, int32_t value) : index_(index), value_(value) {}
  Expr mutate(const Expr& e) override {
    return e.get() == index_ ? num(value_) : IRMutator::mutate(e);
  }

 private:
  const ir::ExprNode* index_;
  int32_t value_;
};

// Counts as the language's any/all allow: 1 .. 64, a quarter of them 64.
int reduction_count(RandomExpr& random) {
  return random.pick(4) == 0 ? 64 : 1 + random.pick(64);
}

}  // namespace

Expr RandomExpr::unrolled(const Expr& body, const Expr& index, int count, bool all) {
  Expr result = truth(all);
  for (int k = 0; k < count; ++k) {
    Expr term = SubstituteIndex(index.get(), k).mutate(body);
    result =
        k == 0 ? std::move(term)
               : operation(all ? ExprKind::And : ExprKind::Or, std::move(result), std::move(term));
  }
  return result;
}

Expr RandomExpr::reduction(int depth) {
  // Placeholders of i and j: leaves of their own, replaced by constants term by term.
  const Expr i = var(ir::Variable::B);
  const Expr j = var(ir::Variable::B);
  const int count = reduction_count(*this);
  Expr body;
  if (pick(3) == 0) {
    int inner = reduction_count(*this);
    Expr at = operation(ExprKind::Add, operation(ExprKind::Mul, num(inner), i), j);
    Expr inner_body = indexed_term(at, depth - 1);
    // Within the IR's size limit (lowering refuses larger): N * M copies of the body.
    const uint64_t budget = ir::kMaxExprTreeSize / 2;
    while (inner > 1 && static_cast<uint64_t>(count) * inner * inner_body->tree_size > budget)
      inner /= 2;
    body = unrolled(inner_body, j, inner, pick(3) == 0);
  } else {
    body = indexed_term(i, depth - 1);
  }
  return unrolled(body, i, count, pick(3) == 0);
}

Expr RandomExpr::indexed_term(const Expr& at, int depth) {
  switch (pick(6)) {
    case 0: {  // both positions inside the range at columns 2 at, 2 at + 1
      const ArrayDecl* array = pick_array(Type::Int, false);
      if (array == nullptr || array->dims.size() != 2) break;
      const auto end = [&](int plus) {
        Expr column = operation(ExprKind::Add, operation(ExprKind::Mul, num(2), at), num(plus));
        return ir::Load::make(Type::Int, array->slot, array->name, 2, var(ir::Variable::B),
                              std::move(column));
      };
      return ir::And::make(ir::LE::make(end(0), ir::Min::make(q(), kv())),
                           ir::LE::make(ir::Max::make(q(), kv()), end(1)));
    }
    case 1:  // a diagonal: kv == q - step * at
      return comparison(
          kv(), operation(ExprKind::Sub, q(), operation(ExprKind::Mul, num(1 + pick(3)), at)));
    case 2: {  // a key list: kv == list[b, at] (or any array read at the index)
      const ArrayDecl* array = pick_array(Type::Int, false);
      if (array == nullptr) break;
      Expr read =
          array->dims.size() == 2
              ? ir::Load::make(Type::Int, array->slot, array->name, 2, var(ir::Variable::B), at)
              : ir::Load::make(Type::Int, array->slot, array->name, 1, at, num(0));
      return comparison(pick(2) ? kv() : q(), std::move(read));
    }
    case 3:  // strided: (q - kv) % (at + 2) == 0, and a shape
      return ir::And::make(
          ir::EQ::make(operation(ExprKind::Mod, operation(ExprKind::Sub, q(), kv()),
                                 operation(ExprKind::Add, at, num(2))),
                       num(0)),
          mask_shape(depth));
    case 4:  // blocks: kv / width == at
      return ir::EQ::make(operation(ExprKind::Div, kv(), width()), at);
    default:
      break;
  }
  // Any Bool, gated by the index.
  return operation(pick(2) ? ExprKind::And : ExprKind::Or, make(Type::Bool, depth),
                   comparison(kv(), operation(ExprKind::Mul, at, offset())));
}

// `ranges[b, 2i] <= min(q, kv) && max(q, kv) <= ranges[b, 2i + 1]`: both positions inside
// the i-th range, its ends read from a non-positional Int array or constants.
Expr RandomExpr::range_term(int index) {
  const ArrayDecl* array = nullptr;
  for (const ArrayDecl& candidate : options_.arrays) {
    if (candidate.type == Type::Int && candidate.dims.size() == 2 && candidate.dims[0] == "b" &&
        !is_position(candidate.dims[1])) {
      array = &candidate;
    }
  }
  const auto end = [&](int column) -> Expr {
    if (array == nullptr || pick(4) == 0) return num(pick(24) - 4);
    return ir::Load::make(Type::Int, array->slot, array->name, 2, var(ir::Variable::B),
                          num(column));
  };
  Expr lo = end(2 * index);
  Expr hi = end(2 * index + 1);
  return ir::And::make(ir::LE::make(std::move(lo), ir::Min::make(q(), kv())),
                       ir::LE::make(ir::Max::make(q(), kv()), std::move(hi)));
}

// kv, kv + c, kv - c, kv * m, kv / C, -kv, kv + P.
Expr RandomExpr::key_side() {
  switch (pick(10)) {
    case 0:
      return ir::Add::make(kv(), offset());
    case 1:
      return ir::Sub::make(kv(), offset());
    case 2: {
      static constexpr int32_t kFactors[] = {2, 3, -1, -2, 0, 1 << 20};
      return ir::Mul::make(kv(), num(kFactors[pick(6)]));
    }
    case 3:
      return ir::Div::make(kv(), divisor());
    case 4:
      return ir::Neg::make(kv());
    case 5: {
      Expr p = param(Type::Int);
      return ir::Add::make(kv(), p.defined() ? p : offset());
    }
    default:
      return kv();
  }
}

// q, q + c, q - W + 1, q * m, q / C, (q / C) * C, P, prefix[b], max(q, P), a constant, or
// anything.
Expr RandomExpr::query_side() {
  switch (pick(14)) {
    case 0:
      return ir::Add::make(q(), offset());
    case 1:
      return ir::Sub::make(q(), offset());
    case 2:
      return ir::Add::make(ir::Sub::make(q(), width()), num(1));
    case 3:
      return ir::Mul::make(q(), num(pick(2) ? 2 : -1));
    case 4:
      return ir::Div::make(q(), divisor());
    case 5: {
      const Expr c = divisor();
      return ir::Mul::make(ir::Div::make(q(), c), c);
    }
    case 6:
      return width();
    case 7: {
      const ArrayDecl* prefix = nullptr;
      for (const ArrayDecl& array : options_.arrays) {
        if (array.type == Type::Int && array.dims == std::vector<std::string>{"b"}) {
          prefix = &array;
        }
      }
      if (prefix != nullptr) {
        return ir::Load::make(Type::Int, prefix->slot, prefix->name, 1, var(ir::Variable::B),
                              num(0));
      }
      return width();
    }
    case 8:
      return operation(pick(2) ? ExprKind::Max : ExprKind::Min, q(), width());
    case 9:
      return offset();
    case 10:
      return make(Type::Int, 1);
    default:
      return q();
  }
}

// A position expression: `pos`, `pos + c`, `pos - 1`, `pos / C`, and `pos * 40`, whose range
// over a few positions spans many blocks of an array summary.
Expr RandomExpr::position_of(Expr position) {
  switch (pick(10)) {
    case 0:
      return ir::Add::make(std::move(position), offset());
    case 1:
      return ir::Sub::make(std::move(position), num(1));
    case 2:
      return ir::Div::make(std::move(position), divisor());
    case 3:
      return ir::Mul::make(std::move(position), num(pick(2) ? 16 : 40));
    default:
      return position;
  }
}

// Mostly small, sometimes the sizes masks use, sometimes an end of int32.
Expr RandomExpr::offset() {
  static constexpr int32_t kOffsets[] = {100, 1024, 8192, -100, kMax, kMin, kMax - 1, kMin + 1};
  return num(pick(4) ? pick(9) - 4 : kOffsets[pick(8)]);
}

// A divisor: usually positive (blocks, chunks), sometimes 0, negative or a parameter.
Expr RandomExpr::divisor() {
  static constexpr int32_t kDivisors[] = {1, 2, 3, 4, 7, 8, 16, 64, 96, 100, 8192, -3, 0};
  if (pick(8) == 0) {
    Expr p = param(Type::Int);
    if (p.defined()) return p;
  }
  return num(kDivisors[pick(13)]);
}

// A window or bound: a parameter, or a constant.
Expr RandomExpr::width() {
  if (pick(2)) {
    Expr p = param(Type::Int);
    if (p.defined()) return p;
  }
  static constexpr int32_t kWidths[] = {0, 1, 2, 5, 17, 100, 1024, -3, kMax, kMin};
  return num(kWidths[pick(10)]);
}

}  // namespace flexjit::testing
