// The CUDA variant struct of a mask and its score (docs/architecture.md#kernel-contract). Every IR
// node becomes one statement that calls the fj_ops.cuh function the host evaluator and classifier
// call for it, so the device computes exactly what the host does.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "analysis/kv_range_plan.h"
#include "flexjit/compiler/host_params.h"
#include "flexjit/compiler/mask.h"

namespace flexjit {

namespace {

// How one operation is written (its row of FJ_FOR_EACH_OPERATION): a call `fj::wrap_add(a, b)`
// or an operator `(a < b)` on values, and the fj::ival / fj::fival function on intervals.
struct Spelling {
  const char* scalar;
  bool scalar_is_operator;
  const char* interval;
};

// `operand_type` is the type of the first operand, except for Select, where it is the type of
// the branches. A Bool operand takes the Int forms (conversions of a Bool: see
// StatementWriter::operation()).
Spelling spelling_of(ir::ExprKind kind, ir::Type operand_type) {
  const bool is_float = operand_type == ir::Type::Float;
  switch (kind) {
#define FJ_SPELLING(C, node, arity, typing, syntax, spelling, source, emit, int_fn, float_fn, \
                    ival_fn, fival_fn)                                                        \
  case ir::ExprKind::node:                                                                    \
    if constexpr (ops::Emit::emit == ops::Emit::Operator) {                                   \
      return {spelling, true, is_float ? #fival_fn : #ival_fn};                               \
    } else {                                                                                  \
      return {is_float ? #float_fn : #int_fn, false, is_float ? #fival_fn : #ival_fn};        \
    }
    FJ_FOR_EACH_OPERATION(FJ_SPELLING, _)
#undef FJ_SPELLING
    default:  // leaves; a Load is written by StatementWriter::load()
      break;
  }
  return {"", false, ""};
}

std::string int_literal(int32_t value) {
  // -2147483648 would be the negation of a 64-bit literal.
  return value == INT32_MIN ? "(-2147483647 - 1)" : std::to_string(value);
}

// A float literal that denotes exactly `value`: a hexadecimal float (a decimal literal may be
// rounded either way by the compiler), and inf / NaN by their bits.
std::string float_literal(float value) {
  if (std::isnan(value)) return "fj::bits_to_float(0x7fffffff)";
  if (std::isinf(value)) {
    return value < 0 ? "(-fj::bits_to_float(0x7f800000))" : "fj::bits_to_float(0x7f800000)";
  }
  std::array<char, 64> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(),
                                          std::fabs(value), std::chars_format::hex);
  return fmt::format("{}0x{}f", std::signbit(value) ? "-" : "",
                     std::string_view(buffer.data(), end));
}

std::string param_read(const ir::Param* param) {
  const std::string slot = fmt::format("p.scalar[{}]", param->slot);
  switch (param->type) {
    case ir::Type::Bool:
      return "(" + slot + " != 0)";
    case ir::Type::Float:
      return "fj::bits_to_float(" + slot + ")";
    case ir::Type::Int:
      break;
  }
  return slot;
}

const char* scalar_type_name(ir::Type type) {
  switch (type) {
    case ir::Type::Bool:
      return "bool";
    case ir::Type::Int:
      return "int";
    case ir::Type::Float:
      return "float";
  }
  return "?";
}

// Two more spaces before every line.
std::string indent(const std::string& code) {
  std::string result;
  bool line_start = true;
  for (const char c : code) {
    if (line_start) result += "  ";
    result += c;
    line_start = c == '\n';
  }
  return result;
}

using NarrowingPlans = std::unordered_map<const ir::ExprNode*, KvPlan>;

// Longest || or && chain the scalar hooks write out term by term. Lowering unrolls any/all
// (up to 64 terms, nested two deep: 4096); unrolled in a hook that the kernels inline once per
// element of a tile, such chains took NVRTC minutes and gigabytes and made ptxas spill
// (prefix_ranges -D max_ranges=64: 116 s). Longer chains become loops (RolledChain). The
// standard masks' chains (prefix_ranges: 8 terms) stay unrolled in the per-element hooks.
constexpr size_t kMaxUnrolledTerms = 8;
// The same for the per-tile hooks (classify, kv_range), whose interval code is many times the
// scalar code per term and runs once per tile: unrolled, prefix_ranges' 8 terms took 11 of its
// 16 s of NVRTC there. Rolled, a tile pays a loop of L1-cached loads.
constexpr size_t kMaxUnrolledTileTerms = 2;

// A left-nested || or && chain, as lowering writes any/all, with its runs of terms that differ
// only in Int constants affine in the term's position: t_k = body[index := k], which the scalar
// hooks write as a loop over k (StatementWriter::rolled).
struct RolledChain {
  struct Run {
    size_t first = 0;  // terms [first, first + count)
    size_t count = 1;
    ir::Expr index;  // the placeholder leaf `body` reads for k (a node of its own)
    ir::Expr body;   // undefined for a single term written as is
  };
  ir::ExprKind kind = ir::ExprKind::Or;
  std::vector<ir::Expr> terms;
  std::vector<Run> runs;  // in order, covering every term
};

// `terms` as one expression over `index`: each Int constant that differs between the terms is
// c_0 + d * index with c_k = c_0 + k d (wrapping int32, as lowering folded them); everything
// else must be the same in every term. Undefined when the terms are not so related.
ir::Expr generalize(std::span<const ir::Expr> terms, const ir::Expr& index) {
  const ir::Expr& first = terms[0];
  if (std::all_of(terms.begin(), terms.end(), [&](const ir::Expr& t) { return t.same_as(first); }))
    return first;
  for (const ir::Expr& t : terms) {
    if (t.kind() != first.kind() || t.type() != first.type()) return {};
  }
  switch (first.kind()) {
    case ir::ExprKind::IntImm: {
      const auto value = [&](size_t k) {
        return static_cast<uint32_t>(terms[k].as<ir::IntImm>()->value);
      };
      const uint32_t c0 = value(0);
      const uint32_t d = value(1) - c0;
      for (size_t k = 0; k < terms.size(); ++k) {
        if (value(k) != c0 + d * static_cast<uint32_t>(k)) return {};
      }
      if (d == 0) return first;
      const ir::Expr step =
          d == 1 ? index : ir::Mul::make(ir::IntImm::make(static_cast<int32_t>(d)), index);
      return c0 == 0 ? step : ir::Add::make(ir::IntImm::make(static_cast<int32_t>(c0)), step);
    }
    case ir::ExprKind::FloatImm:
      for (const ir::Expr& t : terms) {
        if (std::bit_cast<uint32_t>(t.as<ir::FloatImm>()->value) !=
            std::bit_cast<uint32_t>(first.as<ir::FloatImm>()->value))
          return {};
      }
      return first;
    case ir::ExprKind::BoolImm:
      for (const ir::Expr& t : terms) {
        if (t.as<ir::BoolImm>()->value != first.as<ir::BoolImm>()->value) return {};
      }
      return first;
    case ir::ExprKind::Var:
      // Only the same node (the passes share each variable's): an enclosing chain's index is
      // a Var node of its own, never to be taken for the variable it is made as.
      return {};
    case ir::ExprKind::Param:
      for (const ir::Expr& t : terms) {
        if (t.as<ir::Param>()->slot != first.as<ir::Param>()->slot) return {};
      }
      return first;
    default:
      break;
  }
  const ir::Load* load = first.as<ir::Load>();
  if (load != nullptr) {
    for (const ir::Expr& t : terms) {
      if (t.as<ir::Load>()->slot != load->slot || t.as<ir::Load>()->rank != load->rank) return {};
    }
  }
  std::vector<ir::Expr> operands;
  std::vector<ir::Expr> column(terms.size());
  for (int i = 0; i < ir::operand_count(first.kind()); ++i) {
    for (size_t k = 0; k < terms.size(); ++k)
      column[k] = ir::operand(terms[k], i);
    ir::Expr operand = generalize(column, index);
    if (!operand.defined()) return {};
    operands.push_back(std::move(operand));
  }
  if (load != nullptr) {
    return ir::Load::make(load->type, load->slot, load->name, load->rank, operands[0], operands[1]);
  }
  return ir::make_operation(first.kind(), operands);
}

// The runs of `e` if it is a chain of more than `max_unrolled` terms with a run of at least
// two; else nullopt (the chain is written as it is).
std::optional<RolledChain> rolled_chain(const ir::Expr& e, size_t max_unrolled) {
  if (e.kind() != ir::ExprKind::Or && e.kind() != ir::ExprKind::And) return std::nullopt;
  RolledChain chain;
  chain.kind = e.kind();
  ir::Expr at = e;
  while (at.kind() == chain.kind) {
    chain.terms.push_back(ir::operand(at, 1));
    at = ir::operand(at, 0);
  }
  chain.terms.push_back(at);
  if (chain.terms.size() <= max_unrolled) return std::nullopt;
  std::reverse(chain.terms.begin(), chain.terms.end());
  bool rolls = false;
  const std::span<const ir::Expr> terms(chain.terms);
  for (size_t first = 0; first < terms.size();) {
    RolledChain::Run run{first, 1, ir::Var::make(ir::Variable::B), {}};
    // Grow the run while the terms so far generalize (quadratic in the run, linear in size).
    for (size_t end = first + 2; end <= terms.size(); ++end) {
      ir::Expr body = generalize(terms.subspan(first, end - first), run.index);
      if (!body.defined()) break;
      run.body = std::move(body);
      run.count = end - first;
    }
    if (run.count == 1) run.body = ir::Expr();
    rolls = rolls || run.count > 1;
    first += run.count;
    chain.runs.push_back(std::move(run));
  }
  if (!rolls) return std::nullopt;
  return chain;
}

// Writes the statements of one hook body, one per operation node, shared nodes once.
class StatementWriter {
 public:
  // Temporaries are named `prefix` and a number, so that writers can share a function body.
  // With `narrowing` (interval writers of classify), && and || nodes that have a plan narrow
  // their right operand's keys as the host analysis does (analysis.h, MaskPlans).
  explicit StatementWriter(bool intervals, std::string prefix = "t",
                           const NarrowingPlans* narrowing = nullptr)
      : intervals_(intervals), prefix_(std::move(prefix)), narrowing_(narrowing) {}

  // The score hook's writer: tanh by the special function unit (fj::ftanh_approx), as fast as
  // exp2 in the softmax next to it. Scores only: masks keep the library tanh that the interval
  // analysis widens by a few ulp.
  void approximate_tanh() { approximate_tanh_ = true; }

  // An interval writer whose h is a range declared by the hook (score_kv_uniform: a thread's
  // rows may belong to two heads), not the concrete head of classify and kv_range.
  void range_heads() { ranged_heads_ = true; }

  // A name no other statement of this writer's function uses, starting with `stem`.
  std::string fresh(std::string_view stem) {
    return fmt::format("{}{}{}", prefix_, stem, fresh_count_++);
  }

  // The C++ expression naming e's value (a leaf's text, or the temporary holding it).
  std::string value_of(const ir::Expr& e) {
    if (ir::operand_count(e.kind()) == 0) {
      const auto bound = leaves_.find(e.get());
      if (bound == leaves_.end()) return leaf(e);
      return intervals_ ? fmt::format("fj::Interval::point({})", bound->second) : bound->second;
    }
    const auto found = names_.find(e.get());
    if (found != names_.end()) return found->second;
    if (intervals_ && point_inputs(e) == Points::Indexed) return scalar_point(e);
    if (std::optional<RolledChain> chain = rolled_chain(e, max_unrolled()))
      return rolled(e, *chain);

    const KvPlan* plan = narrowing_plan(e);
    std::vector<std::string> operands;
    for (int i = 0; i < ir::operand_count(e.kind()) && !(plan != nullptr && i == 1); ++i) {
      operands.push_back(value_of(ir::operand(e, i)));
    }
    const std::string value = plan != nullptr                  ? narrowed(e, *plan, operands[0])
                              : e.kind() == ir::ExprKind::Load ? load(e.as<ir::Load>(), operands)
                                                               : operation(e, operands);

    std::string name = fmt::format("{}{}", prefix_, statement_count_++);
    ++operations_;
    code_ += fmt::format("    const {} {} = {};\n", type_name(e.type()), name, value);
    names_.emplace(e.get(), name);
    return name;
  }

  // Names e's value `name` (computed elsewhere): value_of returns it instead of a statement.
  void bind(const ir::Expr& e, std::string name) { names_.emplace(e.get(), std::move(name)); }

  // A writer for a loop body inside this one's function: it reads this one's values and leaf
  // bindings, writes statements of its own (named `prefix` and a number), and narrows nothing.
  StatementWriter nested(std::string prefix) const {
    StatementWriter body(intervals_, std::move(prefix));
    body.names_ = names_;
    body.leaves_ = leaves_;
    body.approximate_tanh_ = approximate_tanh_;
    return body;
  }
  // A writer for a lambda inside this one's function (the interval checks of kv_range and
  // narrowing): it computes its values anew, with this one's leaf bindings (a loop's index).
  StatementWriter lambda(std::string prefix, const NarrowingPlans* narrowing = nullptr) const {
    StatementWriter inner(intervals_, std::move(prefix), narrowing);
    inner.leaves_ = leaves_;
    return inner;
  }
  // The value of leaf `index` (a RolledChain's) is the loop variable `name`.
  void bind_index(const ir::Expr& index, const std::string& name) {
    leaves_.emplace(index.get(), name);
  }
  // Adds the operations of a loop body that runs `count` times.
  void count_loop(const StatementWriter& body, size_t count) {
    operations_ += body.operations_ * static_cast<int>(count);
  }

  const std::string& code() const { return code_; }
  // Whether a chain was written as a loop.
  bool wrote_loop() const { return wrote_loop_; }
  // Operations written by value_of, a loop's body counted once per iteration.
  int statements() const { return operations_; }
  // Adds a statement of the caller's after those written so far.
  void append(const std::string& statement) { code_ += statement; }

 private:
  const KvPlan* narrowing_plan(const ir::Expr& e) const {
    if (narrowing_ == nullptr) return nullptr;
    const auto found = narrowing_->find(e.get());
    return found == narrowing_->end() ? nullptr : &found->second;
  }

  // What an interval writer knows of a node's inputs: Points when every leaf is a single value
  // in classify and kv_range (literals, b, h, scalar params) and no node is a float; Indexed
  // when one of them is also a loop index; Ranged otherwise.
  enum class Points { Ranged, Points, Indexed };
  Points point_inputs(const ir::Expr& e) {
    const auto found = point_inputs_.find(e.get());
    if (found != point_inputs_.end()) return found->second;
    Points result = Points::Points;
    if (e.type() == ir::Type::Float) {
      result = Points::Ranged;
    } else if (leaves_.contains(e.get())) {
      result = Points::Indexed;
    } else if (e.kind() == ir::ExprKind::Var) {
      const ir::Variable variable = e.as<ir::Var>()->variable;
      if (variable != ir::Variable::B && (variable != ir::Variable::H || ranged_heads_)) {
        result = Points::Ranged;
      }
    }
    for (int i = 0; i < ir::operand_count(e.kind()) && result != Points::Ranged; ++i) {
      const Points operand = point_inputs(ir::operand(e, i));
      if (operand != Points::Points) result = operand;
    }
    point_inputs_.emplace(e.get(), result);
    return result;
  }

  // A node of point inputs that reads a loop index (the index arithmetic of a rolled chain,
  // `ranges[b, 2 * i + 1]`), as the point of its scalar value. The interval operations give
  // the same point, but through bounds the compiler cannot see to be equal: a load's index
  // would not fold to a point, and every load would carry the summary path (a rolled
  // prefix_ranges' kv_range took NVRTC seconds so). Ints and bools only, whose interval
  // operations on points are exact, so the host's analysis of the unrolled chain agrees.
  std::string scalar_point(const ir::Expr& e) {
    StatementWriter scalar(false, fresh("s") + "_");
    scalar.leaves_ = leaves_;
    const std::string value = scalar.value_of(e);
    code_ += scalar.code();
    std::string name = fmt::format("{}{}", prefix_, statement_count_++);
    ++operations_;
    code_ += fmt::format("    const fj::Interval {} = fj::Interval::{}({});\n", name,
                         e.type() == ir::Type::Bool ? "boolean" : "point", value);
    names_.emplace(e.get(), name);
    return name;
  }

  // fj::ival::narrowed_or of a node with a narrowing plan (defined after KvRangeWriter).
  std::string narrowed(const ir::Expr& e, const KvPlan& plan, const std::string& left);

  // A chain with runs (rolled_chain): single terms as they are, each run's first term as it is
  // and the others by a loop over the index (not unrolled: a loop's worth of code per element
  // is what the rolling saves), folded left in the same order as the unrolled chain. The
  // parts of a run's body that do not read the index are computed before the loop. Intervals
  // combine without narrowing (plan_narrowing's || plans): sound, coarser on such chains.
  std::string rolled(const ir::Expr& e, const RolledChain& chain) {
    wrote_loop_ = true;
    const ir::Type type = ir::Type::Bool;
    const auto combine = [&](const std::string& a, const std::string& b) {
      if (intervals_) {
        return fmt::format("{}({}, {})", spelling_of(chain.kind, type).interval, a, b);
      }
      return fmt::format("({} {} {})", a, chain.kind == ir::ExprKind::Or ? "||" : "&&", b);
    };
    std::string value;
    for (const RolledChain::Run& run : chain.runs) {
      const std::string first = value_of(chain.terms[run.first]);
      value = value.empty() ? first : combine(value, first);
      if (!run.body.defined()) continue;
      std::unordered_map<const ir::ExprNode*, bool> reads_index;
      hoist_invariants(run.body, run.index, reads_index);
      const std::string part = fresh("any");
      const std::string index = fresh("i");
      StatementWriter body = nested(part + "_");
      body.bind_index(run.index, index);
      const std::string term = body.value_of(run.body);
      count_loop(body, run.count - 1);
      code_ += fmt::format(
          "    {type} {part} = {value};\n"
          "#pragma unroll 1\n"
          "    for (int {index} = 1; {index} < {count}; ++{index}) {{\n"
          "{body}"
          "      {part} = {combined};\n"
          "    }}\n",
          fmt::arg("type", type_name(type)), fmt::arg("part", part), fmt::arg("value", value),
          fmt::arg("index", index), fmt::arg("count", run.count),
          fmt::arg("body", indent(body.code())), fmt::arg("combined", combine(part, term)));
      value = part;
    }
    std::string name = fmt::format("{}{}", prefix_, statement_count_++);
    ++operations_;
    code_ += fmt::format("    const {} {} = {};\n", type_name(type), name, value);
    names_.emplace(e.get(), name);
    return name;
  }

  // Computes, here, the largest parts of `e` that do not read `index`.
  void hoist_invariants(const ir::Expr& e, const ir::Expr& index,
                        std::unordered_map<const ir::ExprNode*, bool>& reads_index) {
    if (!reads(e, index, reads_index)) {
      if (ir::operand_count(e.kind()) > 0) value_of(e);
      return;
    }
    for (int i = 0; i < ir::operand_count(e.kind()); ++i)
      hoist_invariants(ir::operand(e, i), index, reads_index);
  }
  static bool reads(const ir::Expr& e, const ir::Expr& index,
                    std::unordered_map<const ir::ExprNode*, bool>& memo) {
    if (e.same_as(index)) return true;
    const auto found = memo.find(e.get());
    if (found != memo.end()) return found->second;
    bool result = false;
    for (int i = 0; i < ir::operand_count(e.kind()) && !result; ++i)
      result = reads(ir::operand(e, i), index, memo);
    memo.emplace(e.get(), result);
    return result;
  }

  std::string operation(const ir::Expr& e, const std::vector<std::string>& operands) const {
    const bool is_select = e.kind() == ir::ExprKind::Select;
    const ir::Type operand_type = ir::operand(e, is_select ? 1 : 0).type();
    // A Bool is 0 or 1: int(b) and float(b) are a choice on values. On intervals a Bool's
    // {0, 1} interval is already an int one (int(b) copies it) and converts to float as one.
    if (operand_type == ir::Type::Bool && e.kind() == ir::ExprKind::ToInt) {
      return intervals_ ? operands[0] : fmt::format("({} ? 1 : 0)", operands[0]);
    }
    if (operand_type == ir::Type::Bool && e.kind() == ir::ExprKind::ToFloat && !intervals_) {
      return fmt::format("({} ? 1.0f : 0.0f)", operands[0]);
    }
    const Spelling spelling = spelling_of(e.kind(), operand_type);
    if (approximate_tanh_ && !intervals_ && e.kind() == ir::ExprKind::Tanh) {
      return fmt::format("fj::ftanh_approx({})", operands[0]);
    }
    if (intervals_) return fmt::format("{}({})", spelling.interval, fmt::join(operands, ", "));
    if ((e.kind() == ir::ExprKind::Div || e.kind() == ir::ExprKind::Mod) &&
        operand_type == ir::Type::Int && ir::operand(e, 1).kind() == ir::ExprKind::IntImm &&
        ir::operand(e, 1).as<ir::IntImm>()->value > 0) {
      // By a positive constant: a shift and a mask for powers of two (fj_ops.cuh).
      return fmt::format("fj::{}<{}>({})",
                         e.kind() == ir::ExprKind::Div ? "floordiv_by" : "floormod_by",
                         ir::operand(e, 1).as<ir::IntImm>()->value, operands[0]);
    }
    if (!spelling.scalar_is_operator) {
      return fmt::format("{}({})", spelling.scalar, fmt::join(operands, ", "));
    }
    if (is_select) return fmt::format("({} ? {} : {})", operands[0], operands[1], operands[2]);
    if (e.kind() == ir::ExprKind::And || e.kind() == ir::ExprKind::Or) {
      // Both operands are computed already (one statement per node): & and | leave nvcc no
      // short circuit to turn into a branch around the right operand's instructions in the
      // kernel's per-element loop, where a select is cheaper.
      return fmt::format("({} {} {})", operands[0], e.kind() == ir::ExprKind::And ? "&" : "|",
                         operands[1]);
    }
    if (operands.size() == 1) return fmt::format("({}{})", spelling.scalar, operands[0]);
    return fmt::format("({} {} {})", operands[0], spelling.scalar, operands[1]);
  }

  std::string load(const ir::Load* op, const std::vector<std::string>& operands) const {
    const bool is_float = op->type == ir::Type::Float;
    const char* function = intervals_ ? (is_float ? "fj::fival::load_float" : "fj::ival::load_int")
                                      : (is_float ? "fj::load_float" : "fj::load_int");
    // Interval reads by the array's summary axis (the variant's kArraySummaryAxes): a kernel
    // holds the code of one way to bound a read (fj_ops.cuh).
    const std::string axis =
        intervals_ ? fmt::format("<kArraySummaryAxes[{}]>", op->slot) : std::string();
    return fmt::format("{}{}(p.array[{}], {}, {})", function, axis, op->slot, operands[0],
                       operands[1]);
  }

  const char* type_name(ir::Type type) const {
    return intervals_ ? (type == ir::Type::Float ? "fj::FloatInterval" : "fj::Interval")
                      : scalar_type_name(type);
  }

  std::string leaf(const ir::Expr& e) const {
    switch (e.kind()) {
      case ir::ExprKind::IntImm: {
        const std::string literal = int_literal(e.as<ir::IntImm>()->value);
        return intervals_ ? fmt::format("fj::Interval::point({})", literal) : literal;
      }
      case ir::ExprKind::FloatImm: {
        const std::string literal = float_literal(e.as<ir::FloatImm>()->value);
        return intervals_ ? fmt::format("fj::FloatInterval::point({})", literal) : literal;
      }
      case ir::ExprKind::BoolImm: {
        const char* literal = e.as<ir::BoolImm>()->value ? "true" : "false";
        return intervals_ ? fmt::format("fj::Interval::boolean({})", literal) : literal;
      }
      case ir::ExprKind::Var: {
        const ir::Variable variable = e.as<ir::Var>()->variable;
        // The score hook's parameter. classify() sees masks only, which never read the score;
        // should one, every float is a sound value for it.
        if (variable == ir::Variable::Score) {
          return intervals_ ? "fj::FloatInterval::everything()" : "s";
        }
        const char* name = ir::variable_name(variable);
        // q and kv are ranges declared at the top of classify(); b and h are concrete (h a
        // range too with range_heads).
        const bool ranged = variable == ir::Variable::Q || variable == ir::Variable::KV ||
                            (variable == ir::Variable::H && ranged_heads_);
        return intervals_ && !ranged ? fmt::format("fj::Interval::point({})", name) : name;
      }
      case ir::ExprKind::Param: {
        const ir::Param* param = e.as<ir::Param>();
        if (!intervals_) return param_read(param);
        const char* constructor = param->type == ir::Type::Bool    ? "fj::Interval::boolean"
                                  : param->type == ir::Type::Float ? "fj::FloatInterval::point"
                                                                   : "fj::Interval::point";
        return fmt::format("{}({})", constructor, param_read(param));
      }
      default:
        return "";
    }
  }

  // Interval writers serve the per-tile hooks, scalar ones the per-element hooks.
  size_t max_unrolled() const { return intervals_ ? kMaxUnrolledTileTerms : kMaxUnrolledTerms; }

  bool intervals_;
  bool approximate_tanh_ = false;
  bool ranged_heads_ = false;
  bool wrote_loop_ = false;
  std::string prefix_;
  const NarrowingPlans* narrowing_;
  int fresh_count_ = 0;
  int statement_count_ = 0;
  int operations_ = 0;
  std::unordered_map<const ir::ExprNode*, std::string> names_;
  // Bound leaves: a RolledChain's index, by its loop variable's name.
  std::unordered_map<const ir::ExprNode*, std::string> leaves_;
  std::unordered_map<const ir::ExprNode*, Points> point_inputs_;
  std::string code_;
};

// `plans` as one plan over `index` (generalize() on each expression), or nullopt when they
// differ otherwise.
std::optional<KvPlan> generalize_plans(std::span<const KvPlan> plans, const ir::Expr& index) {
  const KvPlan& first = plans[0];
  const auto expr = [&](auto field, ir::Expr& out) {
    std::vector<ir::Expr> column;
    for (const KvPlan& plan : plans)
      column.push_back(field(plan));
    if (!column[0].defined()) {
      return std::all_of(column.begin(), column.end(),
                         [](const ir::Expr& e) { return !e.defined(); });
    }
    if (!std::all_of(column.begin(), column.end(), [](const ir::Expr& e) { return e.defined(); }))
      return false;
    out = generalize(column, index);
    return out.defined();
  };
  KvPlan result;
  result.kind = first.kind;
  result.polarity = first.polarity;
  result.op = first.op;
  for (const KvPlan& plan : plans) {
    if (plan.kind != first.kind || plan.polarity != first.polarity || plan.op != first.op ||
        plan.children.size() != first.children.size() || plan.steps.size() != first.steps.size()) {
      return std::nullopt;
    }
  }
  if (!expr([](const KvPlan& p) { return p.condition; }, result.condition) ||
      !expr([](const KvPlan& p) { return p.other; }, result.other)) {
    return std::nullopt;
  }
  for (size_t i = 0; i < first.steps.size(); ++i) {
    KvStep step;
    step.kind = first.steps[i].kind;
    for (const KvPlan& plan : plans) {
      if (plan.steps[i].kind != step.kind) return std::nullopt;
    }
    if (!expr([&](const KvPlan& p) { return p.steps[i].other; }, step.other)) return std::nullopt;
    result.steps.push_back(std::move(step));
  }
  std::vector<KvPlan> column(plans.size());
  for (size_t i = 0; i < first.children.size(); ++i) {
    for (size_t k = 0; k < plans.size(); ++k)
      column[k] = plans[k].children[i];
    std::optional<KvPlan> child = generalize_plans(column, index);
    if (!child) return std::nullopt;
    result.children.push_back(std::move(*child));
  }
  return result;
}

const char* kv_step_function(KvStep::Kind kind) {
  switch (kind) {
    case KvStep::Add:
      return "addend";
    case KvStep::Minuend:
      return "minuend";
    case KvStep::Subtrahend:
      return "subtrahend";
    case KvStep::Neg:
      return "negated";
    case KvStep::Mul:
      return "factor";
    case KvStep::Div:
      return "dividend";
    case KvStep::Abs:
      return "abs_argument";
    case KvStep::Min:
      return "min_argument";
    case KvStep::Max:
      return "max_argument";
  }
  return "";
}

// Writes the kv_range() body of a plan (kv_range_plan.h) as fj::kvr calls: the same steps in
// the same order as the host's kv_range(), kv-free operands as interval statements.
class KvRangeWriter {
 public:
  explicit KvRangeWriter(StatementWriter& out) : out_(out) {}

  // The name of the bound that `plan` evaluates to.
  std::string bound_of(const KvPlan& plan) {
    switch (plan.kind) {
      case KvPlan::All:
        return "fj::kvr::all()";
      case KvPlan::None:
        return "fj::kvr::none()";
      case KvPlan::Intersect:
      case KvPlan::Hull: {
        const char* combine = plan.kind == KvPlan::Intersect ? "intersect" : "hull";
        // A chain's plan nests to the left (Hull(Hull(c0, c1), c2)): the same fold flat.
        std::vector<const KvPlan*> flat;
        for (const KvPlan* at = &plan; flat.size() <= kMaxUnrolledTileTerms;) {
          for (size_t i = at->children.size(); i-- > 1;)
            flat.push_back(&at->children[i]);
          const KvPlan& left = at->children[0];
          if (left.kind != plan.kind) {
            flat.push_back(&left);
            break;
          }
          at = &left;
        }
        if (flat.size() > kMaxUnrolledTileTerms) return rolled(plan, combine);
        std::string result = bound_of(plan.children[0]);
        for (size_t i = 1; i < plan.children.size(); ++i) {
          const std::string child = bound_of(plan.children[i]);
          result = declare(fmt::format("fj::kvr::{}({}, {})", combine, result, child));
        }
        return result;
      }
      case KvPlan::Guard:
        return declare(
            fmt::format("fj::kvr::guard({}, {})", out_.value_of(plan.condition), plan.polarity));
      case KvPlan::Atom:
        return atom(plan);
    }
    return "fj::kvr::all()";
  }

 private:
  // The children of a long Intersect or Hull (an any/all over more than kMaxUnrolledTileTerms
  // terms) folded as bound_of folds them, runs of children that generalize (generalize_plans)
  // by a loop, as RolledChain does for the mask.
  std::string rolled(const KvPlan& plan, const char* combine) {
    std::vector<KvPlan> flat;
    const KvPlan* at = &plan;
    for (; at->kind == plan.kind; at = &at->children[0]) {
      for (size_t i = at->children.size(); i-- > 1;)
        flat.push_back(at->children[i]);
    }
    flat.push_back(*at);
    std::reverse(flat.begin(), flat.end());
    const std::span<const KvPlan> children(flat);
    std::string result;
    for (size_t first = 0; first < children.size();) {
      const ir::Expr index = ir::Var::make(ir::Variable::B);
      std::optional<KvPlan> body;
      size_t count = 1;
      for (size_t end = first + 2; end <= children.size(); ++end) {
        std::optional<KvPlan> grown = generalize_plans(children.subspan(first, end - first), index);
        if (!grown) break;
        body = std::move(grown);
        count = end - first;
      }
      const std::string child = bound_of(children[first]);
      result = result.empty() ? child
                              : declare(fmt::format("fj::kvr::{}({}, {})", combine, result, child));
      if (count > 1) {
        const std::string part = out_.fresh("k");
        const std::string loop_index = out_.fresh("i");
        StatementWriter body_writer = out_.nested(part + "_");
        body_writer.bind_index(index, loop_index);
        const std::string term = KvRangeWriter(body_writer).bound_of(*body);
        out_.append(fmt::format(
            "    fj::kvr::Bound {part} = {result};\n"
            "#pragma unroll 1\n"
            "    for (int {index} = 1; {index} < {count}; ++{index}) {{\n"
            "{body}"
            "      {part} = fj::kvr::{combine}({part}, {term});\n"
            "    }}\n",
            fmt::arg("part", part), fmt::arg("result", result), fmt::arg("index", loop_index),
            fmt::arg("count", count), fmt::arg("body", indent(body_writer.code())),
            fmt::arg("combine", combine), fmt::arg("term", term)));
        result = part;
      }
      first += count;
    }
    return result;
  }

  std::string declare(const std::string& value) {
    std::string name = out_.fresh("k");
    out_.append(fmt::format("    const fj::kvr::Bound {} = {};\n", name, value));
    return name;
  }

  std::string atom(const KvPlan& plan) {
    static constexpr const char* kOps[] = {"kLess", "kLessEqual", "kGreater", "kGreaterEqual",
                                           "kEqual"};
    std::string s = declare(fmt::format("fj::kvr::compared_with(fj::kvr::{}, {})", kOps[plan.op],
                                        out_.value_of(plan.other)));
    for (const KvStep& step : plan.steps) {
      const std::string other =
          step.other.defined() ? ", " + out_.value_of(step.other) : std::string();
      s = declare(fmt::format("fj::kvr::{}({}{})", kv_step_function(step.kind), s, other));
    }
    // The check reads the comparison over key ranges of its choosing.
    StatementWriter check = out_.lambda(out_.fresh("a") + "_");
    const std::string value = check.value_of(plan.condition);
    return declare(fmt::format(
        "fj::kvr::verified({}, [&](fj::Interval kv) {{\n{}      return {};\n    }}, {})", s,
        indent(check.code()), value, plan.polarity));
  }

  StatementWriter& out_;
};

std::string StatementWriter::narrowed(const ir::Expr& e, const KvPlan& plan,
                                      const std::string& left) {
  const std::string where = KvRangeWriter(*this).bound_of(plan);
  StatementWriter right = lambda(fresh("n") + "_", narrowing_);
  const std::string value = right.value_of(ir::operand(e, 1));
  return fmt::format(
      "fj::ival::narrowed_or({}, {}, kv, [&](fj::Interval kv) {{\n{}      return {};\n    }})",
      left, where, indent(right.code()), value);
}

// Rewrites float(q - kv) (either order) as float(q) - float(kv) in a score hook, so that the
// split converts once per query row and once per key instead of once per element (ALiBi's
// distance): a conversion costs more than the float subtraction that replaces it. Positions are
// non-negative int32, so q - kv does not wrap; both forms are exact while q and kv are below
// 2^24, beyond that they differ by a rounding (the score hooks' approximate arithmetic, like
// their tanh).
class SplitPositionDifferences : public ir::IRMutator {
 public:
  using ir::IRMutator::mutate;

 protected:
  using ir::IRMutator::visit;
  ir::Expr visit(const ir::ToFloat* op) override {
    const ir::Sub* difference = op->a.as<ir::Sub>();
    if (difference != nullptr && is_position(difference->a) && is_position(difference->b) &&
        variable(difference->a) != variable(difference->b)) {
      return ir::Sub::make(ir::ToFloat::make(difference->a), ir::ToFloat::make(difference->b));
    }
    return ir::IRMutator::visit(op);
  }

 private:
  static bool is_position(const ir::Expr& e) {
    const ir::Var* var = e.as<ir::Var>();
    return var != nullptr &&
           (var->variable == ir::Variable::Q || var->variable == ir::Variable::KV);
  }
  static ir::Variable variable(const ir::Expr& e) { return e.as<ir::Var>()->variable; }
};

// Which of b, h, q, kv, score each node of an expression reads, one bit each (ir::Variable
// order), memoized over the expression's shared nodes.
class VariableReads {
 public:
  static unsigned bit(ir::Variable v) { return 1u << static_cast<unsigned>(v); }

  unsigned of(const ir::Expr& e) {
    const auto found = reads_.find(e.get());
    if (found != reads_.end()) return found->second;
    unsigned set = e.kind() == ir::ExprKind::Var ? bit(e.as<ir::Var>()->variable) : 0u;
    for (int i = 0; i < ir::operand_count(e.kind()); ++i)
      set |= of(ir::operand(e, i));
    reads_.emplace(e.get(), set);
    return set;
  }
  bool reads(const ir::Expr& e, ir::Variable v) { return (of(e) & bit(v)) != 0; }

 private:
  std::unordered_map<const ir::ExprNode*, unsigned> reads_;
};

// A hook split by what its terms read (docs/architecture.md#kernel-contract), so that a kernel
// computes each term as rarely as it can:
// - request terms read only b and params: once per request (prefix_len[b], ranges[b, i]);
// - query terms read only b, h, q: once per query row (doc[b, q], slopes[h], q / chunk);
// - key terms read only b, kv: once per key of a tile (doc[b, kv], kv / chunk);
// - the element part reads the rest, and the terms instead of recomputing them.
// Each term is the largest such operation that a higher level reads; leaves (variables,
// literals, param reads) stay where they are. The parts call the same fj_ops.cuh functions as
// the whole hook would, so the values are the same.
//
// A mask's element part may also have group terms: the largest element operations that read
// arrays and read kv only through kv / C (or kv >> log2 C) for powers of two C >= 8, such as
// random_bits' `bits[q, kv / 32]`. Their value is one per row and group of G keys (G the least
// such C) aligned to G, so a kernel whose tiles start on a multiple of their width computes
// them once per row and group (kMaskGroupKeys, the element hook that takes MaskGroupTerms)
// instead of loading per element; the element hook without them computes them itself.
class SplitHook {
 public:
  // `stem` is "Mask" or "Score"; `approximate_tanh` as StatementWriter::approximate_tanh().
  SplitHook(const ir::Expr& root, std::string stem, bool approximate_tanh)
      : stem_(std::move(stem)), lower_(stem_ == "Mask" ? "mask" : "score") {
    if (ir::operand_count(root.kind()) > 0 && level(root) != kElement) {
      terms_[level(root)].push_back(root);
    }
    collect(root);
    // Group terms: masks only, and not beside a rolled element loop (element_bits evaluates
    // those by the element hook without them).
    if (stem_ == "Mask" && !element_loop_) {
      std::unordered_set<const ir::ExprNode*> seen;
      find_group_terms(root, seen);
    }
    StatementWriter writers[kLevels] = {StatementWriter(false, "r_"), StatementWriter(false, "q_"),
                                        StatementWriter(false, "k_"), StatementWriter(false)};
    for (int at = 0; at < kLevels; ++at) {
      if (approximate_tanh) writers[at].approximate_tanh();
      bind_terms(writers[at], static_cast<Level>(at));
    }
    for (int at = 0; at < kElement; ++at) {
      std::vector<std::string> values;
      for (size_t i = 0; i < terms_[at].size(); ++i) {
        values.push_back(writers[at].value_of(terms_[at][i]));
        fields_[at] += fmt::format(" {} v{};", scalar_type_name(terms_[at][i].type()), i);
      }
      if (!fields_[at].empty()) fields_[at] += " ";
      code_[at] = writers[at].code() +
                  fmt::format("    return {}{{{}}};\n", type(at), fmt::join(values, ", "));
    }
    element_value_ = writers[kElement].value_of(root);
    element_operations_ = writers[kElement].statements();
    element_loop_ = writers[kElement].wrote_loop();
    key_terms_loop_ = writers[kKey].wrote_loop();
    code_[kElement] = writers[kElement].code();
    if (!group_terms_.empty()) {
      // The group terms read the request, query and key terms as the element part does; the
      // element hook that takes them reads them too.
      StatementWriter group(false, "g_");
      StatementWriter grouped(false);
      bind_terms(group, kElement);
      bind_terms(grouped, kElement);
      std::vector<std::string> values;
      for (size_t i = 0; i < group_terms_.size(); ++i) {
        values.push_back(group.value_of(group_terms_[i]));
        group_fields_ += fmt::format(" {} v{};", scalar_type_name(group_terms_[i].type()), i);
        grouped.bind(group_terms_[i], fmt::format("group.v{}", i));
      }
      group_fields_ += " ";
      group_code_ = group.code() +
                    fmt::format("    return {}GroupTerms{{{}}};\n", stem_, fmt::join(values, ", "));
      grouped_value_ = grouped.value_of(root);
      grouped_code_ = grouped.code();
    }
  }

  // The hook's definitions at the variant struct's indentation: the terms struct and function
  // of each level that has terms (VariantBase's empty ones stand for the others), the element
  // hook that takes them, and the base's hook of the element from scratch. `result` is the
  // hook's C++ type, `inputs` its leading parameters after the params ("float s, " for scores),
  // `base` the struct's VariantBase.
  std::string declarations(const char* result, const char* inputs, std::string_view base) const {
    static constexpr const char* kSignatures[kElement] = {
        "const fj::MaskParams& p, int b", "const fj::MaskParams& p, int b, int h, int q, {request}",
        "const fj::MaskParams& p, int b, int kv, {request}"};
    const std::string request = fmt::format("const {}& request", type(kRequest));
    std::string text;
    for (int at = 0; at < kElement; ++at) {
      if (terms_[at].empty()) continue;
      text += fmt::format(
          "  // {stem} terms of one {level} (computed once each)\n"
          "  struct {type} {{{fields}}};\n"
          "  __device__ __forceinline__ {type} {lower}_{name}_terms({signature}) const {{\n"
          "{code}  }}\n",
          fmt::arg("stem", stem_), fmt::arg("level", kLevelNames[at]), fmt::arg("name", kNames[at]),
          fmt::arg("type", type(at)), fmt::arg("fields", fields_[at]), fmt::arg("lower", lower_),
          fmt::arg("signature",
                   fmt::format(fmt::runtime(kSignatures[at]), fmt::arg("request", request))),
          fmt::arg("code", code_[at]));
    }
    text += fmt::format(
        "  __device__ __forceinline__ {result} {lower}(const fj::MaskParams& p, {inputs}int b, "
        "int h, int q, int kv, {request}, const {query_type}& query, const {key_type}& key) "
        "const {{\n{element_code}    return {element_value};\n  }}\n"
        "  using {base}::{lower};  // from scratch: the terms, then the hook above\n",
        fmt::arg("lower", lower_), fmt::arg("result", result), fmt::arg("inputs", inputs),
        fmt::arg("request", request), fmt::arg("query_type", type(kQuery)),
        fmt::arg("key_type", type(kKey)), fmt::arg("element_code", code_[kElement]),
        fmt::arg("element_value", element_value_), fmt::arg("base", base));
    if (!group_terms_.empty()) {
      text += fmt::format(
          "  // {stem} terms of one query row and group of {keys} keys (computed once each)\n"
          "  struct {stem}GroupTerms {{{fields}}};\n"
          "  __device__ __forceinline__ {stem}GroupTerms {lower}_group_terms(const fj::MaskParams& "
          "p, int b, int h, int q, int kv, {request}, const {query_type}& query, "
          "const {key_type}& key) const {{\n{code}  }}\n"
          "  __device__ __forceinline__ {result} {lower}(const fj::MaskParams& p, {inputs}int b, "
          "int h, int q, int kv, {request}, const {query_type}& query, const {key_type}& key, "
          "const {stem}GroupTerms& group) const {{\n{element_code}    return {element_value};\n"
          "  }}\n",
          fmt::arg("stem", stem_), fmt::arg("keys", group_keys_), fmt::arg("fields", group_fields_),
          fmt::arg("lower", lower_), fmt::arg("request", request),
          fmt::arg("query_type", type(kQuery)), fmt::arg("key_type", type(kKey)),
          fmt::arg("code", group_code_), fmt::arg("result", result), fmt::arg("inputs", inputs),
          fmt::arg("element_code", grouped_code_), fmt::arg("element_value", grouped_value_));
    }
    return text;
  }

  // Keys per group of the group terms (a power of two, at least 8), 0 where there are none.
  int group_keys() const { return group_terms_.empty() ? 0 : group_keys_; }

  // Operations the element part computes (each a statement).
  int element_operations() const { return element_operations_; }
  // Whether the element part holds a loop (a rolled any/all).
  bool element_loop() const { return element_loop_; }
  // Whether the key terms hold a loop (a rolled any/all of the key alone).
  bool key_terms_loop() const { return key_terms_loop_; }
  // Whether the element part reads runtime arrays (t5_bias[h, q - kv]): a load per element.
  bool element_load() const { return element_load_; }
  // Whether the key terms or the element part take a float `%` (fj::fmod_floor: fmodf, a loop in
  // CUDA's libdevice), per key or per element.
  bool float_modulo() const { return float_modulo_; }
  // Whether the key terms read runtime arrays (doc[b, kv]): loads, not arithmetic.
  bool key_terms_load() const {
    for (const ir::Expr& term : terms_[kKey]) {
      if (ir::reads_arrays(term)) return true;
    }
    return false;
  }

 private:
  enum Level { kRequest, kQuery, kKey, kElement, kLevels };
  static constexpr const char* kNames[kLevels] = {"request", "query", "key", ""};
  static constexpr const char* kLevelNames[kElement] = {"request", "query row", "key"};

  std::string type(int at) const {
    static constexpr const char* kTypes[kLevels] = {"RequestTerms", "QueryTerms", "KeyTerms", ""};
    return stem_ + kTypes[at];
  }

  // Names the terms that the part of level `at` reads in `writer`: every level reads the request
  // terms; the element part reads them all.
  void bind_terms(StatementWriter& writer, Level at) const {
    for (int below = 0; below < at; ++below) {
      if (below != kRequest && at != kElement) continue;
      for (size_t i = 0; i < terms_[below].size(); ++i) {
        writer.bind(terms_[below][i], fmt::format("{}.v{}", kNames[below], i));
      }
    }
  }

  Level level(const ir::Expr& e) {
    const auto bit = VariableReads::bit;
    const unsigned set = reads_.of(e);
    const unsigned row = bit(ir::Variable::H) | bit(ir::Variable::Q);
    const unsigned key = bit(ir::Variable::KV);
    if ((set & bit(ir::Variable::Score)) != 0 || ((set & row) != 0 && (set & key) != 0)) {
      return kElement;
    }
    return (set & row) != 0 ? kQuery : (set & key) != 0 ? kKey : kRequest;
  }

  // An operand on a lower level than the node that reads it is a term of its level (an
  // operand's inputs are a subset of its reader's, so a different level is a lower one).
  void collect(const ir::Expr& e) {
    if (!visited_.insert(e.get()).second) return;
    // A chain written as a loop computes its terms' parts in the loop, where it is computed.
    if (rolled_chain(e, kMaxUnrolledTerms)) {
      if (level(e) == kElement && ir::reads_arrays(e)) element_load_ = true;
      return;
    }
    const Level at = level(e);
    if (at == kElement && e.kind() == ir::ExprKind::Load) element_load_ = true;
    if ((at == kKey || at == kElement) && e.kind() == ir::ExprKind::Mod &&
        e.type() == ir::Type::Float) {
      float_modulo_ = true;
    }
    for (int i = 0; i < ir::operand_count(e.kind()); ++i) {
      const ir::Expr& operand = ir::operand(e, i);
      if (ir::operand_count(operand.kind()) == 0) continue;
      const Level below = level(operand);
      if (below != at && term_set_.insert(operand.get()).second) terms_[below].push_back(operand);
      collect(operand);
    }
  }

  // The keys over which e's value is constant: 1 where it reads kv, C where it reads kv only
  // through kv / C or kv >> log2 C (C a power of two, at least 8; the least such C), kNoKeys
  // where it does not read kv. A rolled chain counts as reading kv itself.
  static constexpr int kNoKeys = std::numeric_limits<int>::max();
  int key_granularity(const ir::Expr& e) {
    const auto found = granularity_.find(e.get());
    if (found != granularity_.end()) return found->second;
    int keys = kNoKeys;
    if (reads_.reads(e, ir::Variable::KV)) {
      keys = 1;
      const bool divides = e.kind() == ir::ExprKind::Div || e.kind() == ir::ExprKind::Shr;
      const ir::Var* var = divides ? ir::operand(e, 0).as<ir::Var>() : nullptr;
      const ir::IntImm* by = divides ? ir::operand(e, 1).as<ir::IntImm>() : nullptr;
      if (var != nullptr && var->variable == ir::Variable::KV && by != nullptr) {
        const int64_t divisor =
            e.kind() == ir::ExprKind::Div
                ? by->value
                : (by->value >= 3 && by->value <= 30 ? int64_t{1} << by->value : 0);
        if (divisor >= 8 && (divisor & (divisor - 1)) == 0) {
          keys = static_cast<int>(divisor);
        }
      } else if (e.kind() != ir::ExprKind::Var && !rolled_chain(e, kMaxUnrolledTerms)) {
        keys = kNoKeys;
        for (int i = 0; i < ir::operand_count(e.kind()); ++i)
          keys = std::min(keys, key_granularity(ir::operand(e, i)));
      }
    }
    granularity_.emplace(e.get(), keys);
    return keys;
  }

  // The group terms under e (see the class comment): the first element operations from the root
  // down that read arrays and whose key granularity is at least 8.
  void find_group_terms(const ir::Expr& e, std::unordered_set<const ir::ExprNode*>& seen) {
    if (ir::operand_count(e.kind()) == 0 || level(e) != kElement || !seen.insert(e.get()).second ||
        rolled_chain(e, kMaxUnrolledTerms) || reads_.reads(e, ir::Variable::Score)) {
      return;
    }
    const int keys = key_granularity(e);
    if (keys >= 8 && keys != kNoKeys && ir::reads_arrays(e)) {
      group_terms_.push_back(e);
      group_keys_ = group_keys_ == 0 ? keys : std::min(group_keys_, keys);
      return;
    }
    for (int i = 0; i < ir::operand_count(e.kind()); ++i)
      find_group_terms(ir::operand(e, i), seen);
  }

  std::string stem_;
  std::string lower_;
  VariableReads reads_;
  std::unordered_map<const ir::ExprNode*, int> granularity_;
  std::vector<ir::Expr> group_terms_;
  int group_keys_ = 0;
  std::string group_fields_;
  std::string group_code_;
  std::string grouped_code_;
  std::string grouped_value_;
  std::unordered_set<const ir::ExprNode*> visited_;
  std::unordered_set<const ir::ExprNode*> term_set_;
  std::vector<ir::Expr> terms_[kElement];
  std::string fields_[kElement];
  std::string code_[kLevels];
  std::string element_value_;
  int element_operations_ = 0;
  bool element_loop_ = false;
  bool key_terms_loop_ = false;
  bool element_load_ = false;
  bool float_modulo_ = false;
};

}  // namespace

namespace {

// The mask and score as the hooks split them: a missing mask is false; score hooks take tanh
// from the special function unit (StatementWriter::approximate_tanh) and convert positions
// apart (SplitPositionDifferences).
ir::Expr hook_mask(const Variant& variant) {
  return variant.mask.defined() ? variant.mask : ir::BoolImm::make(false);
}
ir::Expr hook_score(const Variant& variant) {
  return variant.has_score()
             ? ir::eliminate_common_subexpressions(SplitPositionDifferences().mutate(variant.score))
             : ir::Var::make(ir::Variable::Score);
}

// The score's key-uniform tiles (VariantBase::score_kv_uniform), for a score that is s plus or
// minus a term T that does not read s: a per-tile test that every part of T reading kv has one
// value over the tile's keys, from the intervals of the parts that can collapse to a point (a
// min or max that saturates, a division, a comparison that holds throughout, ...). Where it
// holds, the kernels compute T once per row at one key and add it to each element
// (score_and_mask): T5's `bias[h, clamp(q - kv, 0, 255)]` reads its table once per row and
// tile instead of once per element in the tiles more than 255 keys below the diagonal. A part
// is uniform when its interval over the tile is a point, or when every operand reading kv is;
// kv itself is not. Written only where it saves much per element: the parts reading kv load
// from an array, call a math function, or take four operations or more.
class KvUniformCheck {
 public:
  explicit KvUniformCheck(const ir::Expr& score) : writer_(true, "u") {
    writer_.range_heads();
    const std::optional<ir::Expr> term = added_term(score, reads_);
    condition_ = term ? uniform(*term) : "false";
  }

  bool worthwhile() const {
    return condition_ != "false" && (saves_load_or_math_ || kv_operations_ >= 4);
  }

  std::string hook() const {
    return fmt::format(
        "  // Whether the score reads kv only through parts with one value over keys kv, for\n"
        "  // queries q of heads h: the kernels then evaluate it at one key for the tile.\n"
        "  __device__ __forceinline__ bool score_kv_uniform(const fj::MaskParams& p, int b, "
        "fj::Interval h, fj::Interval q, fj::Interval kv) const {{\n"
        "{}"
        "    return {};\n"
        "  }}\n",
        writer_.code(), condition_);
  }

 private:
  // T of a score s + T, T + s or s - T where T does not read s: the score is then s plus its
  // value at s = 0, exactly (but for the sign of a zero).
  static std::optional<ir::Expr> added_term(const ir::Expr& score, VariableReads& reads) {
    const bool add = score.kind() == ir::ExprKind::Add;
    if (score.type() != ir::Type::Float || (!add && score.kind() != ir::ExprKind::Sub)) {
      return std::nullopt;
    }
    const auto is_s = [](const ir::Expr& e) {
      return e.kind() == ir::ExprKind::Var && e.as<ir::Var>()->variable == ir::Variable::Score;
    };
    const ir::Expr a = ir::operand(score, 0);
    const ir::Expr b = ir::operand(score, 1);
    if (is_s(a) && !reads.reads(b, ir::Variable::Score)) return b;
    if (add && is_s(b) && !reads.reads(a, ir::Variable::Score)) return a;
    return std::nullopt;
  }

  static bool collapses(ir::ExprKind kind) {
    switch (kind) {
      case ir::ExprKind::Add:
      case ir::ExprKind::Sub:
      case ir::ExprKind::Mul:
      case ir::ExprKind::Mod:  // a point only where its operand is one
      case ir::ExprKind::Neg:
      case ir::ExprKind::Abs:
      case ir::ExprKind::ToInt:
      case ir::ExprKind::Load:
      case ir::ExprKind::Var:
        return false;
      default:
        return true;
    }
  }

  // A C++ condition (or "true", "false") for "e has one value over the tile".
  std::string uniform(const ir::Expr& e) {
    if (!reads_.reads(e, ir::Variable::KV)) return "true";
    if (ir::operand_count(e.kind()) == 0) return "false";  // kv itself
    const auto found = conditions_.find(e.get());
    if (found != conditions_.end()) return found->second;
    ++kv_operations_;
    if (e.kind() == ir::ExprKind::Load || ir::operation_typing(e.kind()) == ops::Typing::Math) {
      saves_load_or_math_ = true;
    }
    std::string operands = "true";
    for (int i = 0; i < ir::operand_count(e.kind()); ++i) {
      const std::string operand = uniform(ir::operand(e, i));
      if (operand == "false" || operands == "false") {
        operands = "false";
      } else if (operand != "true") {
        operands = operands == "true" ? operand : fmt::format("({} && {})", operands, operand);
      }
    }
    std::string result = operands;
    if (e.type() != ir::Type::Float && collapses(e.kind())) {
      const std::string point = fmt::format("{}.is_point()", writer_.value_of(e));
      result = operands == "false" ? point : fmt::format("({} || {})", point, operands);
    }
    conditions_.emplace(e.get(), result);
    return result;
  }

  StatementWriter writer_;
  std::string condition_;
  bool saves_load_or_math_ = false;
  int kv_operations_ = 0;
  VariableReads reads_;
  std::unordered_map<const ir::ExprNode*, std::string> conditions_;
};

// Elements that tiles of 64 and of 128 keys compute of `mask` (MaskAnalysis::computed_elements)
// on a probe of 4k queries and keys where every runtime parameter is `value` (arrays filled with
// it, 4k long along q and kv, 64 along other dimensions; a float's is value.0), at 16 query
// positions per tile: the kernel's 128 rows hold 128 / group positions, and the widest GQA group
// (8) shows the most sparsity a 64-key tile keeps (image2d's 15-key bands within 128-key image
// rows: equal at 64 positions per tile, half Empty at 16 or 32).
struct ProbedElements {
  int64_t narrow = 0, wide = 0;
  // Whether 128-key tiles compute more than `num / den` times what 64-key tiles do; false where
  // the probe shows nothing (its structure is in its parameters: a runtime window of 0).
  bool wide_exceeds(int64_t num, int64_t den) const {
    return narrow > 0 && wide * den > narrow * num;
  }
};
ProbedElements probe_key_tiles(const Variant& variant, const ir::Expr& mask, int32_t value) {
  constexpr int32_t kProbe = 4096, kRows = 16, kOtherDim = 64;
  const auto bits = [&](dsl::Type type) {
    return type == dsl::Type::Float ? std::bit_cast<int32_t>(static_cast<float>(value)) : value;
  };
  std::vector<HostArray> arrays;
  for (const RuntimeParam& array : variant.arrays) {
    HostArray filled;
    std::vector<int32_t> dims;
    for (const std::string& dim : array.dims)
      dims.push_back(dim == "q" || dim == "kv" ? kProbe : kOtherDim);
    filled.rows = dims.empty() ? 0 : dims[0];
    filled.cols = dims.size() > 1 ? dims[1] : 1;
    // Two position dimensions (bits[q, kv]) would be 64M elements: left empty (unknown).
    if (int64_t{filled.rows} * filled.cols > int64_t{kProbe} * kOtherDim) {
      filled.rows = filled.cols = 0;
    }
    filled.bits.assign(static_cast<size_t>(filled.rows) * filled.cols, bits(array.type));
    arrays.push_back(std::move(filled));
  }
  std::vector<int32_t> scalars(variant.scalars.size(), value);
  for (const RuntimeParam& scalar : variant.scalars) {
    if (scalar.slot >= 0 && static_cast<size_t>(scalar.slot) < scalars.size()) {
      scalars[scalar.slot] = bits(scalar.type);
    }
  }
  Variant structure = variant;
  structure.mask = mask;
  const HostParams params(structure, std::move(scalars), std::move(arrays));
  const MaskAnalysis analysis(structure);
  return {analysis.computed_elements(kProbe, kRows, 64, &params.params()),
          analysis.computed_elements(kProbe, kRows, 128, &params.params())};
}

// The Hopper kernel's keys per K/V tile (docs/hopper.md#tile-width). A wider tile halves the
// barriers, row-max shuffles and softmax bookkeeping per MMA, but it computes more of a mask
// whose visible keys come in narrow bands or periodic columns (a window's edges, fixed's summary
// columns: a 128-key tile is computed where one of its 64-key halves was Empty), and an element
// part that loads per element holds twice the loads in flight, in more Partial tiles.
//
// Head dim 128 (kWideKeyTiles, 64 keys by default): 128 keys where nothing loads per element
// and the mask computes at most 1/32 more elements with them on the probe at 0.
//
// Head dim 64 (kNarrowKeyTilesHd64, 128 keys by default): there a 64-key tile's bookkeeping
// costs about as much as its MMAs, so 64 keys only where 128 compute more than 1/4 more, on the
// probe at 0 and on the probe at 1024 too (a runtime window of 0 shows only the diagonal, which
// a window a model would use does not: sliding, head windows and R-SWA ran 3-14% slower at 64
// keys), or where the element part loads and they compute more than 1/32 more (BigBird's block
// table: 64 keys made it 2.1 times faster, random bits' 4% slower). H200, page 16, 8k:
// strided 0.92 -> 0.62 ms, fixed 1.18 -> 0.77, image2d 0.66 -> 0.56 at 64 keys; dilated (1.06
// times the elements) and longformer (1.11) 0-4% slower (bench/history/2026-11-29-hd64-tiles.md).
KeyTileHints key_tile_width(const Variant& variant, const ir::Expr& mask, bool element_load,
                            int element_operations) {
  KeyTileHints hints;
  hints.element_operations = element_operations;
  const ProbedElements at_zero = probe_key_tiles(variant, mask, 0);
  hints.wide_key_tiles = !element_load && at_zero.narrow > 0 && !at_zero.wide_exceeds(33, 32);
  if (element_load) {
    hints.narrow_key_tiles_hd64 = at_zero.wide_exceeds(33, 32);
  } else if (at_zero.wide_exceeds(5, 4)) {
    hints.narrow_key_tiles_hd64 = probe_key_tiles(variant, mask, 1024).wide_exceeds(5, 4);
  }
  return hints;
}

// A score's loads count as per element unless its term is key-uniform where it can be
// (score_kv_uniform): then they are per row in the tiles away from the band where it is not.
KeyTileHints key_tile_hints_of(const Variant& variant, const ir::Expr& mask,
                               const SplitHook& mask_hook, const SplitHook& score_hook,
                               bool score_kv_uniform) {
  const bool element_load =
      mask_hook.element_load() || (score_hook.element_load() && !score_kv_uniform);
  return key_tile_width(variant, mask, element_load,
                        mask_hook.element_operations() + score_hook.element_operations());
}

// Whether a variant's score takes score_kv_uniform (KvUniformCheck).
bool score_kv_uniform(const Variant& variant, const KvUniformCheck& check) {
  return variant.has_score() && check.worthwhile();
}

}  // namespace

std::string emit_cuda_variant(const Variant& variant, std::string_view struct_name,
                              KeyTileHints* key_tiles) {
  const ir::Expr mask = hook_mask(variant);

  const SplitHook mask_hook(mask, "Mask", false);
  const NarrowingPlans narrowing = plan_narrowing(mask);
  StatementWriter interval(true, "t", &narrowing);
  const std::string class_value = interval.value_of(mask);

  std::string provenance = fmt::format("mask `{}`", variant.mask_name);
  std::string score_comment;
  if (variant.has_score()) {
    provenance += fmt::format(", score `{}`", variant.score_name);
    score_comment = fmt::format("// score: {}\n", ir::to_string(variant.score));
  }
  const ir::Expr score = hook_score(variant);
  const SplitHook score_hook(score, "Score", true);
  const KvUniformCheck kv_uniform(score);
  const bool uniform = score_kv_uniform(variant, kv_uniform);
  const KeyTileHints key_tile = key_tile_hints_of(variant, mask, mask_hook, score_hook, uniform);
  if (key_tiles != nullptr) *key_tiles = key_tile;

  StatementWriter kv_writer(true, "r");
  const std::string kv_bound = KvRangeWriter(kv_writer).bound_of(plan_kv_range(mask));

  // The constants that differ from VariantBase's (documented there).
  const std::string base = fmt::format("fj::VariantBase<{}>", struct_name);
  std::string constants;
  const auto constant = [&](const char* type, const char* name, auto value, auto fallback) {
    if (value != fallback)
      constants += fmt::format("  static constexpr {} {} = {};\n", type, name, value);
  };
  constant("bool", "kHasScore", variant.has_score(), false);
  constant("bool", "kUsesHead", variant.uses_head, false);
  constant("bool", "kDiagonal", ir::translation_invariant(mask), false);
  constant("int", "kElementOperations", key_tile.element_operations, 0);
  constant("bool", "kKeyTermsLoad", mask_hook.key_terms_load() || score_hook.key_terms_load(),
           false);
  constant("bool", "kRolledMask", mask_hook.element_loop(), false);
  constant("bool", "kWideKeyTiles", key_tile.wide_key_tiles, false);
  constant("bool", "kNarrowKeyTilesHd64", key_tile.narrow_key_tiles_hd64, false);
  constant("bool", "kKeyTermsLoop", mask_hook.key_terms_loop() || score_hook.key_terms_loop(),
           false);
  constant("bool", "kScoreKvUniform", uniform, false);
  constant("int", "kMaskGroupKeys", mask_hook.group_keys(), 0);
  constant("bool", "kFloatModulo", mask_hook.float_modulo() || score_hook.float_modulo(), false);
  // Each array's summary axis (host_params.h), by slot: which bound the interval reads take.
  std::vector<int> axes(fj::kMaxArrayParams, fj::kSummaryNone);
  bool summarised = false;
  for (const RuntimeParam& array : variant.arrays) {
    if (array.slot < 0 || array.slot >= fj::kMaxArrayParams) continue;
    axes[array.slot] = static_cast<int>(summary_axis(array));
    summarised = summarised || axes[array.slot] != fj::kSummaryNone;
  }
  if (summarised) {
    constants +=
        fmt::format("  static constexpr int kArraySummaryAxes[fj::kMaxArrayParams] = {{{}}};\n",
                    fmt::join(axes, ", "));
  }

  std::string ranges;
  if (ir::uses_variable(mask, ir::Variable::Q)) {
    ranges += "    const fj::Interval q = fj::Interval::range(q0, (fj::i64)q1 - 1);\n";
  }
  if (ir::uses_variable(mask, ir::Variable::KV)) {
    ranges += "    const fj::Interval kv = fj::Interval::range(k0, (fj::i64)k1 - 1);\n";
  }

  return fmt::format(
      "// generated by flexjit from variant `{name}` ({provenance})\n"
      "// mask: {mask_ir}\n"
      "{score_comment}"
      "struct {struct_name} : {base} {{\n"
      "{constants}"
      "\n"
      "{mask_hooks}"
      "\n"
      "{score_hooks}"
      "  // q in [q0, q1), kv in [k0, k1), half-open; empty range => Empty\n"
      "  __device__ __forceinline__ fj::TileClass classify(const fj::MaskParams& p, int b, int h, "
      "int q0, int q1, int k0, int k1) const {{\n"
      "    if (q0 >= q1 || k0 >= k1) return fj::TileClass::Empty;\n"
      "{ranges}"
      "{class_code}"
      "    return fj::tile_class({class_value});\n"
      "  }}\n"
      "\n"
      "  // keys [lo, hi) that queries [q0, q1) may see\n"
      "  __device__ __forceinline__ fj::KvRange kv_range(const fj::MaskParams& p, int b, int h, "
      "int q0, int q1) const {{\n"
      "    if (q0 >= q1) return {{0, 0}};\n"
      "    [[maybe_unused]] const fj::Interval q = fj::Interval::range(q0, (fj::i64)q1 - 1);\n"
      "{kv_code}"
      "    return fj::kvr::to_range({kv_bound});\n"
      "  }}\n"
      "}};\n",
      fmt::arg("name", variant.name), fmt::arg("provenance", provenance),
      fmt::arg("mask_ir", ir::to_string(mask)), fmt::arg("score_comment", score_comment),
      fmt::arg("struct_name", struct_name), fmt::arg("base", base),
      fmt::arg("constants", constants),
      fmt::arg("mask_hooks", mask_hook.declarations("bool", "", base)),
      fmt::arg("score_hooks", variant.has_score()
                                  ? score_hook.declarations("float", "float s, ", base) + "\n" +
                                        (uniform ? kv_uniform.hook() + "\n" : "")
                                  : std::string()),
      fmt::arg("ranges", ranges), fmt::arg("class_code", interval.code()),
      fmt::arg("class_value", class_value), fmt::arg("kv_code", kv_writer.code()),
      fmt::arg("kv_bound", kv_bound));
}

}  // namespace flexjit
