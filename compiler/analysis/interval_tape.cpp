// The interval analysis compiled to tapes: compiling a mask and its plans, and running them.
#include "interval_tape.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace flexjit {

namespace {

using NarrowingPlans = std::unordered_map<const ir::ExprNode*, KvPlan>;

bool has_other(KvStep::Kind kind) {
  return kind != KvStep::Neg && kind != KvStep::Abs;
}

// One inverse step on the host, as the emitted code does it on the device; `other` is the
// value of the step's other operand (unused for Neg and Abs).
fj::kvr::Bound invert(KvStep::Kind kind, fj::kvr::Bound s, fj::Interval other) {
  switch (kind) {
    case KvStep::Add:
      return fj::kvr::addend(s, other);
    case KvStep::Minuend:
      return fj::kvr::minuend(s, other);
    case KvStep::Subtrahend:
      return fj::kvr::subtrahend(s, other);
    case KvStep::Neg:
      return fj::kvr::negated(s);
    case KvStep::Mul:
      return fj::kvr::factor(s, other);
    case KvStep::Div:
      return fj::kvr::dividend(s, other);
    case KvStep::Abs:
      return fj::kvr::abs_argument(s);
    case KvStep::Min:
      return fj::kvr::min_argument(s, other);
    case KvStep::Max:
      return fj::kvr::max_argument(s, other);
  }
  return fj::kvr::all();
}

}  // namespace

class IntervalProgram::Compiler {
 public:
  // Gives every leaf of `root` and of the plans (expressions of root's) its place at the start
  // of the frame: b, h and q, then the constants, then the scalar params.
  Compiler(IntervalProgram& program, const ir::Expr& root, const KvPlan& kv,
           const NarrowingPlans& narrowing)
      : program_(program), narrowing_(narrowing) {
    nodes_.reserve(std::min<uint64_t>(root->tree_size, 4096));
    node(root);
    declare(kv);
    for (const auto& [node, plan] : narrowing)
      declare(plan);
    // Room for about one tape's instructions per node, saving most reallocations.
    program_.code_.reserve(2 * nodes_.size());
    scratch_.reserve(nodes_.size());
    changes_.reserve(nodes_.size());
    slots_ = kConstants + static_cast<uint32_t>(program_.constants_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i]->slot = slots_++;
      program_.params_[i].slot = params_[i]->slot;
    }
  }

  // The tape of value(): `root` with narrowing, from a frame of leaves.
  Tape evaluation(const ir::Expr& root) {
    const Scope scope(*this);
    return tape(root, true);
  }

  // The plan of kv_bound(), from a frame of leaves.
  uint32_t evaluation(const KvPlan& plan) {
    const Scope scope(*this);
    return this->plan(plan);
  }

  uint32_t frame_size() const { return slots_; }

 private:
  // What the compiler knows of a node at the current point of the evaluation.
  struct Node {
    bool reads_kv = false;
    // A node without kv: its place, the same in every tape, and whether it holds the value
    // on every path to the current instruction (a leaf always does).
    uint32_t slot = kNone;
    bool computed = false;
    // A node with kv: its place in tape `tape`.
    uint32_t tape = kNone, place = 0;
  };

  // A node's `computed`, `tape` and `place` before a change, to undo it at the end of a scope.
  struct Change {
    Node* node;
    bool computed;
    uint32_t tape, place;
  };

  // What is computed inside a scope may not have run after it: a narrowed operand may be
  // skipped, a verified condition may not be evaluated. Tapes are compiled in the order they
  // run, and those that may be skipped inside a scope of their own.
  class Scope {
   public:
    explicit Scope(Compiler& compiler) : compiler_(compiler), mark_(compiler.changes_.size()) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() {
      std::vector<Change>& changes = compiler_.changes_;
      while (changes.size() > mark_) {
        const Change& change = changes.back();
        change.node->computed = change.computed;
        change.node->tape = change.tape;
        change.node->place = change.place;
        changes.pop_back();
      }
    }

   private:
    Compiler& compiler_;
    size_t mark_;
  };

  // A tape being written, to scratch_ from `start` on (a tape begun while it is written, for
  // a narrowed operand, is written after it and taken off before it goes on).
  struct Builder {
    uint32_t id = 0;
    bool narrow = false;  // its || nodes with a narrowing plan narrow
    uint32_t kv = kNone;
    size_t start = 0;
  };

  // What is known of e, first seen: a leaf other than kv is always computed.
  Node& node(const ir::Expr& e) {
    const auto [found, inserted] = nodes_.try_emplace(e.get());
    Node& node = found->second;  // stays valid as the map grows
    if (!inserted) return node;
    const int count = ir::operand_count(e.kind());
    for (int i = 0; i < count; ++i)
      node.reads_kv |= this->node(ir::operand(e, i)).reads_kv;
    if (count > 0) return node;
    const ir::Var* var = e.as<ir::Var>();
    node.reads_kv = var != nullptr && var->variable == ir::Variable::KV;
    if (!node.reads_kv) {
      node.computed = true;
      leaf(e, node);
    }
    return node;
  }

  void declare(const KvPlan& plan) {
    for (const ir::Expr* e : {&plan.condition, &plan.other})
      if (e->defined()) node(*e);
    for (const KvStep& step : plan.steps)
      if (step.other.defined()) node(step.other);
    for (const KvPlan& child : plan.children)
      declare(child);
  }

  // Places leaf `e` (not kv) in the frame.
  void leaf(const ir::Expr& e, Node& node) {
    const auto constant = [&](ir::IntervalValue value) {
      node.slot = kConstants + static_cast<uint32_t>(program_.constants_.size());
      program_.constants_.push_back(value);
    };
    switch (e.kind()) {
      case ir::ExprKind::IntImm:
        return constant({fj::Interval::point(e.as<ir::IntImm>()->value), {}});
      case ir::ExprKind::FloatImm:
        return constant({{}, fj::FloatInterval::point(e.as<ir::FloatImm>()->value)});
      case ir::ExprKind::BoolImm:
        return constant({fj::Interval::boolean(e.as<ir::BoolImm>()->value), {}});
      case ir::ExprKind::Var:
        switch (e.as<ir::Var>()->variable) {
          case ir::Variable::B:
            node.slot = kB;
            return;
          case ir::Variable::H:
            node.slot = kH;
            return;
          case ir::Variable::Q:
            node.slot = kQ;
            return;
          case ir::Variable::KV:
            return;
          case ir::Variable::Score:
            return constant({{}, fj::FloatInterval::everything()});
        }
        return;
      case ir::ExprKind::Param:
        params_.push_back(&node);  // placed after the constants
        program_.params_.push_back({0, e.as<ir::Param>()->slot, e.type()});
        return;
      default:
        return;
    }
  }

  Tape tape(const ir::Expr& root, bool narrow) {
    Builder builder;
    builder.id = tapes_++;
    builder.narrow = narrow;
    builder.start = scratch_.size();
    Tape tape;
    tape.result = emit(builder, root);
    tape.begin = static_cast<uint32_t>(program_.code_.size());
    tape.size = static_cast<uint32_t>(scratch_.size() - builder.start);
    tape.kv = builder.kv;
    program_.code_.insert(program_.code_.end(), scratch_.begin() + builder.start, scratch_.end());
    scratch_.resize(builder.start);
    return tape;
  }

  // `plan` in post order, its tapes compiled in the order evaluate_plan runs them.
  uint32_t plan(const KvPlan& plan) {
    Plan compiled;
    compiled.begin = static_cast<uint32_t>(program_.plan_nodes_.size());
    uint32_t depth = 0, deepest = 0;
    plan_nodes(plan, depth, deepest);
    compiled.size = static_cast<uint32_t>(program_.plan_nodes_.size()) - compiled.begin;
    compiled.stack = slots_;
    slots_ += deepest;
    program_.plans_.push_back(compiled);
    return static_cast<uint32_t>(program_.plans_.size() - 1);
  }

  // Appends the nodes of `plan`; `depth` is the stack's as they start, `deepest` the most
  // it holds.
  void plan_nodes(const KvPlan& plan, uint32_t& depth, uint32_t& deepest) {
    PlanNode node;
    node.kind = plan.kind;
    node.polarity = plan.polarity;
    node.op = plan.op;
    // The plans' expressions are evaluated without narrowing (they hold no && or || with kv
    // on both sides anyway: guards do not read kv, atoms read it through one chain).
    switch (plan.kind) {
      case KvPlan::All:
      case KvPlan::None:
        break;
      case KvPlan::Intersect:
      case KvPlan::Hull:
        for (const KvPlan& child : plan.children)
          plan_nodes(child, depth, deepest);
        node.count = static_cast<uint32_t>(plan.children.size());
        depth -= node.count;
        break;
      case KvPlan::Guard:
        node.value = tape(plan.condition, false);
        break;
      case KvPlan::Atom: {
        node.value = tape(plan.other, false);
        node.first = static_cast<uint32_t>(program_.plan_steps_.size());
        node.count = static_cast<uint32_t>(plan.steps.size());
        // Each step goes in as its tape is compiled: a tape without narrowing compiles no
        // plan, whose steps would come between.
        for (const KvStep& step : plan.steps) {
          const Tape other = has_other(step.kind) ? tape(step.other, false) : Tape{};
          program_.plan_steps_.push_back({step.kind, other});
        }
        const Scope verification(*this);
        node.condition = tape(plan.condition, false);
        break;
      }
    }
    program_.plan_nodes_.push_back(node);
    deepest = std::max(deepest, ++depth);
  }

  // The place of e's value in the tape, writing the instructions that compute it there.
  uint32_t emit(Builder& builder, const ir::Expr& e) {
    Node& node = this->node(e);
    if (!node.reads_kv && node.computed) return node.slot;
    if (node.reads_kv && node.tape == builder.id) return node.place;
    uint32_t place = 0;
    if (ir::operand_count(e.kind()) == 0) {  // kv, which the tape writes as it starts
      if (builder.kv == kNone) builder.kv = slots_++;
      place = builder.kv;
    } else {
      Instruction instruction = operation(builder, e);
      if (node.reads_kv) {
        place = slots_++;
      } else {
        if (node.slot == kNone) node.slot = slots_++;
        place = node.slot;
      }
      instruction.out = place;
      scratch_.push_back(instruction);
    }
    changes_.push_back({&node, node.computed, node.tape, node.place});
    if (node.reads_kv) {
      node.tape = builder.id;
      node.place = place;
    } else {
      node.computed = true;
    }
    return place;
  }

  // The instruction of operation node `e` (its place left for the caller to fill in), after
  // those of its operands.
  Instruction operation(Builder& builder, const ir::Expr& e) {
    const NarrowingPlans::const_iterator plan =
        builder.narrow ? narrowing_.find(e.get()) : narrowing_.end();
    if (plan != narrowing_.end()) return narrowed(builder, e, plan->second);
    uint32_t operands[3] = {};
    for (int i = 0; i < ir::operand_count(e.kind()); ++i)
      operands[i] = emit(builder, ir::operand(e, i));
    Instruction instruction{opcode(e), 0, operands[0], operands[1], operands[2]};
    if (e.kind() == ir::ExprKind::Load) instruction.c = e.as<ir::Load>()->slot;
    return instruction;
  }

  // fj::ival::narrowed_or of || node `e`: its left operand, then the plan of the keys where
  // that may fail, then the right operand over those keys.
  Instruction narrowed(Builder& builder, const ir::Expr& e, const KvPlan& plan) {
    const uint32_t left = emit(builder, ir::operand(e, 0));
    Narrowing narrowing;
    narrowing.plan = this->plan(plan);
    {
      const Scope right(*this);
      narrowing.right = tape(ir::operand(e, 1), true);
    }
    program_.narrowings_.push_back(narrowing);
    const uint32_t index = static_cast<uint32_t>(program_.narrowings_.size() - 1);
    return {Opcode::NarrowedOr, 0, left, index};
  }

  // The opcode of an operation node: its kind on its operands' type.
  static Opcode opcode(const ir::Expr& e) {
    const bool is_float = ir::operand(e, 0).type() == ir::Type::Float;
    const auto typed = [is_float](Opcode on_ints, Opcode on_floats) {
      return is_float ? on_floats : on_ints;
    };
    switch (e.kind()) {
      case ir::ExprKind::Load:
        return e.type() == ir::Type::Float ? Opcode::LoadFloat : Opcode::LoadInt;
      case ir::ExprKind::Add:
        return typed(Opcode::AddInt, Opcode::AddFloat);
      case ir::ExprKind::Sub:
        return typed(Opcode::SubInt, Opcode::SubFloat);
      case ir::ExprKind::Mul:
        return typed(Opcode::MulInt, Opcode::MulFloat);
      case ir::ExprKind::Div:
        return typed(Opcode::DivInt, Opcode::DivFloat);
      case ir::ExprKind::Mod:
        return typed(Opcode::ModInt, Opcode::ModFloat);
      case ir::ExprKind::Min:
        return typed(Opcode::MinInt, Opcode::MinFloat);
      case ir::ExprKind::Max:
        return typed(Opcode::MaxInt, Opcode::MaxFloat);
      case ir::ExprKind::Abs:
        return typed(Opcode::AbsInt, Opcode::AbsFloat);
      case ir::ExprKind::Neg:
        return typed(Opcode::NegInt, Opcode::NegFloat);
      case ir::ExprKind::EQ:
        return typed(Opcode::EqInt, Opcode::EqFloat);
      case ir::ExprKind::NE:
        return typed(Opcode::NeInt, Opcode::NeFloat);
      case ir::ExprKind::LT:
        return typed(Opcode::LtInt, Opcode::LtFloat);
      case ir::ExprKind::LE:
        return typed(Opcode::LeInt, Opcode::LeFloat);
      case ir::ExprKind::GT:
        return typed(Opcode::GtInt, Opcode::GtFloat);
      case ir::ExprKind::GE:
        return typed(Opcode::GeInt, Opcode::GeFloat);
      case ir::ExprKind::And:
        return Opcode::And;
      case ir::ExprKind::Or:
        return Opcode::Or;
      case ir::ExprKind::Not:
        return Opcode::Not;
      case ir::ExprKind::Select:
        return ir::operand(e, 1).type() == ir::Type::Float ? Opcode::SelectFloat
                                                           : Opcode::SelectInt;
      case ir::ExprKind::ToInt:
        return typed(Opcode::CopyInt, Opcode::FloatToInt);
      case ir::ExprKind::ToFloat:
        return Opcode::IntToFloat;
      case ir::ExprKind::Tanh:
        return Opcode::Tanh;
      case ir::ExprKind::Exp:
        return Opcode::Exp;
      case ir::ExprKind::Exp2:
        return Opcode::Exp2;
      case ir::ExprKind::Log:
        return Opcode::Log;
      case ir::ExprKind::Log2:
        return Opcode::Log2;
      case ir::ExprKind::Sqrt:
        return Opcode::Sqrt;
      case ir::ExprKind::Sigmoid:
        return Opcode::Sigmoid;
      case ir::ExprKind::Floor:
        return Opcode::Floor;
      case ir::ExprKind::Ceil:
        return Opcode::Ceil;
      case ir::ExprKind::BitAnd:
        return Opcode::BitAnd;
      case ir::ExprKind::BitOr:
        return Opcode::BitOr;
      case ir::ExprKind::BitXor:
        return Opcode::BitXor;
      case ir::ExprKind::BitNot:
        return Opcode::BitNot;
      case ir::ExprKind::Shl:
        return Opcode::Shl;
      case ir::ExprKind::Shr:
        return Opcode::Shr;
      case ir::ExprKind::IntImm:
      case ir::ExprKind::FloatImm:
      case ir::ExprKind::BoolImm:
      case ir::ExprKind::Var:
      case ir::ExprKind::Param:
        break;
    }
    std::abort();  // leaves are written before the tapes run
  }

  IntervalProgram& program_;
  const NarrowingPlans& narrowing_;
  std::vector<Node*> params_;  // the leaves of program_.params_
  std::vector<Instruction> scratch_;
  std::unordered_map<const ir::ExprNode*, Node> nodes_;
  std::vector<Change> changes_;
  uint32_t tapes_ = 0;  // tapes begun
  uint32_t slots_ = 0;  // places in the frame
};

IntervalProgram::IntervalProgram(const ir::Expr& root, const KvPlan& kv,
                                 const NarrowingPlans& narrowing) {
  Compiler compiler(*this, root, kv, narrowing);
  root_ = compiler.evaluation(root);
  root_is_float_ = root.type() == ir::Type::Float;
  kv_plan_ = compiler.evaluation(kv);
  frame_size_ = compiler.frame_size();
}

template <class F>
auto IntervalProgram::with_frame(const TileBox& box, F&& f) const {
  const auto evaluate = [&](ir::IntervalValue* frame) {
    frame[kB].ints = fj::Interval::point(box.tile.b);
    frame[kH].ints = fj::Interval::point(box.tile.h);
    frame[kQ].ints = box.q;
    for (size_t i = 0; i < constants_.size(); ++i)
      frame[kConstants + i] = constants_[i];
    for (const ScalarParam& param : params_) {
      const int32_t bits = box.params.scalar[param.param];
      ir::IntervalValue& leaf = frame[param.slot];
      switch (param.type) {
        case ir::Type::Bool:
          leaf.ints = fj::Interval::boolean(bits != 0);
          break;
        case ir::Type::Int:
          leaf.ints = fj::Interval::point(bits);
          break;
        case ir::Type::Float:
          leaf.floats = fj::FloatInterval::point(fj::bits_to_float(bits));
          break;
      }
    }
    return f(frame);
  };
  // Enough for the standard masks many times over; larger frames come from the thread's own
  // buffer, grown once.
  constexpr uint32_t kStackSlots = 256;
  if (frame_size_ <= kStackSlots) {
    // Storage of bytes, not an array of IntervalValue (whose members have defaults): an
    // aggregate's objects begin to live in it as the program writes them.
    alignas(ir::IntervalValue) std::byte stack[kStackSlots * sizeof(ir::IntervalValue)];
    return evaluate(std::launder(reinterpret_cast<ir::IntervalValue*>(stack)));
  }
  thread_local std::vector<ir::IntervalValue> buffer;
  if (buffer.size() < frame_size_) buffer.resize(frame_size_);
  return evaluate(buffer.data());
}

ir::IntervalValue IntervalProgram::value(const TileBox& box) const {
  return with_frame(box, [&](ir::IntervalValue* frame) {
    run(root_, box, box.kv, frame);
    const ir::IntervalValue& value = frame[root_.result];
    ir::IntervalValue result;
    if (root_is_float_) {
      result.floats = value.floats;
    } else {
      result.ints = value.ints;
    }
    return result;
  });
}

fj::kvr::Bound IntervalProgram::kv_bound(const TileBox& box) const {
  return with_frame(box, [&](ir::IntervalValue* frame) {
    return evaluate_plan(plans_[kv_plan_], box, box.kv, frame);
  });
}

void IntervalProgram::run(const Tape& tape, const TileBox& box, fj::Interval kv,
                          ir::IntervalValue* frame) const {
  if (tape.kv != kNone) frame[tape.kv].ints = kv;
  const Instruction* const end = code_.data() + tape.begin + tape.size;
  for (const Instruction* instruction = code_.data() + tape.begin; instruction != end;
       ++instruction) {
    const Instruction& op = *instruction;
    const auto a = [&] { return frame[op.a].ints; };
    const auto b = [&] { return frame[op.b].ints; };
    const auto fa = [&] { return frame[op.a].floats; };
    const auto fb = [&] { return frame[op.b].floats; };
    ir::IntervalValue& out = frame[op.out];
    switch (op.opcode) {
      case Opcode::LoadInt:
        out.ints = fj::ival::load_int(box.params.array[op.c], a(), b());
        break;
      case Opcode::LoadFloat:
        out.floats = fj::fival::load_float(box.params.array[op.c], a(), b());
        break;
      case Opcode::AddInt:
        out.ints = fj::ival::add(a(), b());
        break;
      case Opcode::SubInt:
        out.ints = fj::ival::sub(a(), b());
        break;
      case Opcode::MulInt:
        out.ints = fj::ival::mul(a(), b());
        break;
      case Opcode::DivInt:
        out.ints = fj::ival::div(a(), b());
        break;
      case Opcode::ModInt:
        out.ints = fj::ival::mod(a(), b());
        break;
      case Opcode::MinInt:
        out.ints = fj::ival::min(a(), b());
        break;
      case Opcode::MaxInt:
        out.ints = fj::ival::max(a(), b());
        break;
      case Opcode::AbsInt:
        out.ints = fj::ival::abs(a());
        break;
      case Opcode::NegInt:
        out.ints = fj::ival::neg(a());
        break;
      case Opcode::AddFloat:
        out.floats = fj::fival::add(fa(), fb());
        break;
      case Opcode::SubFloat:
        out.floats = fj::fival::sub(fa(), fb());
        break;
      case Opcode::MulFloat:
        out.floats = fj::fival::mul(fa(), fb());
        break;
      case Opcode::DivFloat:
        out.floats = fj::fival::div(fa(), fb());
        break;
      case Opcode::ModFloat:
        out.floats = fj::fival::mod(fa(), fb());
        break;
      case Opcode::MinFloat:
        out.floats = fj::fival::min(fa(), fb());
        break;
      case Opcode::MaxFloat:
        out.floats = fj::fival::max(fa(), fb());
        break;
      case Opcode::AbsFloat:
        out.floats = fj::fival::abs(fa());
        break;
      case Opcode::NegFloat:
        out.floats = fj::fival::neg(fa());
        break;
      case Opcode::EqInt:
        out.ints = fj::ival::eq(a(), b());
        break;
      case Opcode::NeInt:
        out.ints = fj::ival::ne(a(), b());
        break;
      case Opcode::LtInt:
        out.ints = fj::ival::lt(a(), b());
        break;
      case Opcode::LeInt:
        out.ints = fj::ival::le(a(), b());
        break;
      case Opcode::GtInt:
        out.ints = fj::ival::gt(a(), b());
        break;
      case Opcode::GeInt:
        out.ints = fj::ival::ge(a(), b());
        break;
      case Opcode::EqFloat:
        out.ints = fj::fival::eq(fa(), fb());
        break;
      case Opcode::NeFloat:
        out.ints = fj::fival::ne(fa(), fb());
        break;
      case Opcode::LtFloat:
        out.ints = fj::fival::lt(fa(), fb());
        break;
      case Opcode::LeFloat:
        out.ints = fj::fival::le(fa(), fb());
        break;
      case Opcode::GtFloat:
        out.ints = fj::fival::gt(fa(), fb());
        break;
      case Opcode::GeFloat:
        out.ints = fj::fival::ge(fa(), fb());
        break;
      case Opcode::And:
        out.ints = fj::ival::logical_and(a(), b());
        break;
      case Opcode::Or:
        out.ints = fj::ival::logical_or(a(), b());
        break;
      case Opcode::Not:
        out.ints = fj::ival::logical_not(a());
        break;
      case Opcode::NarrowedOr: {
        const Narrowing& narrowing = narrowings_[op.b];
        const fj::kvr::Bound where = evaluate_plan(plans_[narrowing.plan], box, kv, frame);
        const auto right = [&](fj::Interval keys) {
          return ints(narrowing.right, box, keys, frame);
        };
        out.ints = fj::ival::narrowed_or(a(), where, kv, right);
        break;
      }
      case Opcode::SelectInt:
        out.ints = fj::ival::select(a(), b(), frame[op.c].ints);
        break;
      case Opcode::SelectFloat:
        out.floats = fj::fival::select(a(), fb(), frame[op.c].floats);
        break;
      case Opcode::CopyInt:
        out.ints = a();
        break;
      case Opcode::FloatToInt:
        out.ints = fj::fival::to_int(fa());
        break;
      case Opcode::IntToFloat:
        out.floats = fj::fival::from_int(a());
        break;
      case Opcode::Tanh:
        out.floats = fj::fival::tanh(fa());
        break;
      case Opcode::Exp:
        out.floats = fj::fival::exp(fa());
        break;
      case Opcode::Exp2:
        out.floats = fj::fival::exp2(fa());
        break;
      case Opcode::Log:
        out.floats = fj::fival::log(fa());
        break;
      case Opcode::Log2:
        out.floats = fj::fival::log2(fa());
        break;
      case Opcode::Sqrt:
        out.floats = fj::fival::sqrt(fa());
        break;
      case Opcode::Sigmoid:
        out.floats = fj::fival::sigmoid(fa());
        break;
      case Opcode::Floor:
        out.floats = fj::fival::floor(fa());
        break;
      case Opcode::Ceil:
        out.floats = fj::fival::ceil(fa());
        break;
      case Opcode::BitAnd:
        out.ints = fj::ival::bit_and(a(), b());
        break;
      case Opcode::BitOr:
        out.ints = fj::ival::bit_or(a(), b());
        break;
      case Opcode::BitXor:
        out.ints = fj::ival::bit_xor(a(), b());
        break;
      case Opcode::BitNot:
        out.ints = fj::ival::bit_not(a());
        break;
      case Opcode::Shl:
        out.ints = fj::ival::shl(a(), b());
        break;
      case Opcode::Shr:
        out.ints = fj::ival::shr(a(), b());
        break;
    }
  }
}

fj::Interval IntervalProgram::ints(const Tape& tape, const TileBox& box, fj::Interval kv,
                                   ir::IntervalValue* frame) const {
  if (tape.size != 0 || tape.kv != kNone) run(tape, box, kv, frame);
  return frame[tape.result].ints;
}

fj::kvr::Bound IntervalProgram::evaluate_plan(const Plan& plan, const TileBox& box, fj::Interval kv,
                                              ir::IntervalValue* frame) const {
  ir::IntervalValue* const stack = frame + plan.stack;
  uint32_t depth = 0;
  const auto bound_at = [&](uint32_t i) {
    return fj::kvr::Bound{stack[i].ints.lo, stack[i].ints.hi};
  };
  const PlanNode* const end = plan_nodes_.data() + plan.begin + plan.size;
  for (const PlanNode* node = plan_nodes_.data() + plan.begin; node != end; ++node) {
    fj::kvr::Bound bound = fj::kvr::all();
    switch (node->kind) {
      case KvPlan::All:
        break;
      case KvPlan::None:
        bound = fj::kvr::none();
        break;
      case KvPlan::Intersect:
      case KvPlan::Hull:
        depth -= node->count;
        bound = bound_at(depth);
        for (uint32_t i = 1; i < node->count; ++i) {
          bound = node->kind == KvPlan::Intersect ? fj::kvr::intersect(bound, bound_at(depth + i))
                                                  : fj::kvr::hull(bound, bound_at(depth + i));
        }
        break;
      case KvPlan::Guard:
        bound = fj::kvr::guard(ints(node->value, box, kv, frame), node->polarity);
        break;
      case KvPlan::Atom: {
        bound = fj::kvr::compared_with(node->op, ints(node->value, box, kv, frame));
        for (const PlanStep* step = plan_steps_.data() + node->first;
             step != plan_steps_.data() + node->first + node->count; ++step) {
          const fj::Interval other =
              has_other(step->kind) ? ints(step->other, box, kv, frame) : fj::Interval::point(0);
          bound = invert(step->kind, bound, other);
        }
        const auto atom = [&](fj::Interval keys) {
          return ints(node->condition, box, keys, frame);
        };
        bound = fj::kvr::verified(bound, atom, node->polarity);
        break;
      }
    }
    stack[depth++].ints = {bound.lo, bound.hi};
  }
  return bound_at(0);
}

}  // namespace flexjit
