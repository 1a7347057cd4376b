// Internal to the compiler: the interval analysis of a mask compiled once into flat programs,
// so that classifying a tile or bounding the keys of a range of queries is a loop over a small
// array of values instead of a walk over the IR.
//
// A tape is an expression in post order, each instruction calling the fj::ival / fj::fival
// function of its node's kind and operand type directly (what ir::apply_operation picks), so
// every value is bit for bit the one a walk computes. Values that the analysis takes over
// other key intervals get tapes of their own, as the generated classify() and kv_range() hooks
// give them lambdas (codegen/cuda/emit_cuda.cpp): the right operand of each || that narrows it
// (evaluated over the keys its left operand leaves), and in each kv plan the condition of each
// atom (evaluated over the keys outside the atom's solution by fj::kvr::verified). The plans'
// other expressions (guards, the sides and steps of atoms) have tapes too.
//
// All the tapes of one evaluation share one frame. It begins with the leaves, written before
// any tape runs: b, h, q, the constants and the scalar params. A node that does not read kv
// has the same value in every tape, so it is computed once per evaluation: a tape reads it
// where an earlier instruction left it, unless that instruction may not have run (it sits in
// a narrowed operand or a verified condition that the code since then may have skipped). A
// node that reads kv is computed once per tape, each tape writing its kv to a place of its
// own as it starts.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "flexjit/compiler/mask.h"
#include "flexjit/compiler/semantics.h"
#include "kv_range_plan.h"

namespace flexjit {

// The box of inputs one analysis covers: concrete b, h and params, ranges of q and kv.
struct TileBox {
  const Tile& tile;  // b and h
  fj::Interval q, kv;
  const fj::MaskParams& params;
};

// An expression's interval analysis with the plans of its mask (MaskPlans, analysis.h),
// compiled. Immutable once built, so one program serves any number of threads; evaluation
// allocates nothing (its frame lives on the caller's stack, or for very large expressions in a
// buffer of the thread's).
class IntervalProgram {
 public:
  IntervalProgram() = default;
  // `root` with the || nodes of `narrowing` narrowing their right operand's keys by
  // their plan, and `kv` the plan kv_bound() evaluates.
  IntervalProgram(const ir::Expr& root, const KvPlan& kv,
                  const std::unordered_map<const ir::ExprNode*, KvPlan>& narrowing);

  // The values `root` takes over the box (sound), its || nodes narrowed.
  ir::IntervalValue value(const TileBox& box) const;
  // The kv bound of the plan `kv` for the box's queries (the box's kv is unused).
  fj::kvr::Bound kv_bound(const TileBox& box) const;

  // The program's parts are public, read only, for the LLVM host code generator
  // (compiler/codegen/llvm/), which compiles the same tapes to native code: it must run exactly
  // what run() and evaluate_plan() run.

  // One per node kind and operand type (the choice ir::apply_operation makes per node), plus
  // the narrowed ||.
  enum class Opcode : uint8_t {
    LoadInt,  // array slot c at rows a, columns b
    LoadFloat,
    AddInt,
    SubInt,
    MulInt,
    DivInt,
    ModInt,
    MinInt,
    MaxInt,
    AbsInt,
    NegInt,
    AddFloat,
    SubFloat,
    MulFloat,
    DivFloat,
    ModFloat,
    MinFloat,
    MaxFloat,
    AbsFloat,
    NegFloat,
    EqInt,  // Int and Bool operands
    NeInt,
    LtInt,
    LeInt,
    GtInt,
    GeInt,
    EqFloat,
    NeFloat,
    LtFloat,
    LeFloat,
    GtFloat,
    GeFloat,
    And,
    Or,
    Not,
    NarrowedOr,  // left operand a, narrowings_[b]
    SelectInt,   // Int and Bool values
    SelectFloat,
    CopyInt,  // int() of an Int or a Bool
    FloatToInt,
    IntToFloat,  // float() of an Int or a Bool
    Tanh,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Sigmoid,
    Floor,
    Ceil,
    BitAnd,  // Int operands, as every bitwise operation
    BitOr,
    BitXor,
    BitNot,
    Shl,
    Shr,
  };

  // A node's value in the frame is an ir::IntervalValue: `ints` for a Bool or an Int, `floats`
  // for a Float. A frame is raw storage (with_frame), so only the part of the node's type is
  // ever written: creating a frame costs nothing.

  // Writes the value of one node to frame[out]; a, b, c are the places of its operands in
  // the frame (or what the opcode says).
  struct Instruction {
    Opcode opcode;
    uint32_t out = 0, a = 0, b = 0, c = 0;
  };

  static constexpr uint32_t kNone = UINT32_MAX;

  // Instructions code_[begin, begin + size), which leave the expression's value in
  // frame[result] (a place written before when they are none), after the box's kv is written
  // to frame[kv] (kNone when the expression does not read kv).
  struct Tape {
    uint32_t begin = 0, size = 0, result = 0, kv = kNone;
  };

  // The frame begins with b, h and q, then the constants, then the scalar params.
  static constexpr uint32_t kB = 0, kH = 1, kQ = 2, kConstants = 3;

  // A scalar param leaf: param slot `param` read as `type`, written to frame[slot].
  struct ScalarParam {
    uint32_t slot = 0;
    int param = 0;
    ir::Type type = ir::Type::Int;
  };

  // A KvPlan in post order, plan_nodes_[begin, begin + size): each node leaves its bound on a
  // stack in frame[stack, stack + depth) (as an Interval), Intersect and Hull taking their
  // `count` children's off it.
  struct Plan {
    uint32_t begin = 0, size = 0, stack = 0;
  };

  // A KvPlan node. Guard: `value` is the condition's tape. Atom: `value` is the tape of the
  // side without kv, `condition` the comparison's, steps plan_steps_[first, first + count).
  // Intersect and Hull: `count` children.
  struct PlanNode {
    KvPlan::Kind kind = KvPlan::All;
    bool polarity = true;
    int op = 0;
    uint32_t first = 0, count = 0;
    Tape value, condition;
  };

  struct PlanStep {
    KvStep::Kind kind = KvStep::Add;
    Tape other;  // empty for Neg and Abs
  };

  // An || whose right operand runs over the keys that plans_[plan] allows.
  struct Narrowing {
    uint32_t plan = 0;
    Tape right;
  };

  const std::vector<ir::IntervalValue>& constants() const { return constants_; }
  const std::vector<ScalarParam>& params() const { return params_; }
  const std::vector<Instruction>& code() const { return code_; }
  const std::vector<Narrowing>& narrowings() const { return narrowings_; }
  const std::vector<Plan>& plans() const { return plans_; }
  const std::vector<PlanNode>& plan_nodes() const { return plan_nodes_; }
  const std::vector<PlanStep>& plan_steps() const { return plan_steps_; }
  const Tape& root() const { return root_; }
  bool root_is_float() const { return root_is_float_; }
  uint32_t kv_plan() const { return kv_plan_; }

 private:
  class Compiler;

  // Calls f(frame) with a frame for one evaluation over `box`, its leaves written.
  template <class F>
  auto with_frame(const TileBox& box, F&& f) const;

  // The tapes run over the box's b, h, q and params, and over keys `kv`: the box's for the
  // evaluation itself, others inside narrowed operands and verified conditions.
  void run(const Tape& tape, const TileBox& box, fj::Interval kv, ir::IntervalValue* frame) const;
  fj::Interval ints(const Tape& tape, const TileBox& box, fj::Interval kv,
                    ir::IntervalValue* frame) const;
  fj::kvr::Bound evaluate_plan(const Plan& plan, const TileBox& box, fj::Interval kv,
                               ir::IntervalValue* frame) const;

  std::vector<ir::IntervalValue> constants_;
  std::vector<ScalarParam> params_;
  std::vector<Instruction> code_;  // every tape's instructions, tape after tape
  std::vector<Narrowing> narrowings_;
  std::vector<Plan> plans_;
  std::vector<PlanNode> plan_nodes_;
  std::vector<PlanStep> plan_steps_;
  Tape root_;
  bool root_is_float_ = false;
  uint32_t kv_plan_ = 0;
  uint32_t frame_size_ = 0;
};

}  // namespace flexjit
