// A mask's interval program compiled to native code (docs/codegen.md, "Tile classes and kv
// ranges"). MaskAnalysis runs the program's tapes with an interpreter (interval_tape.cpp); this
// writes, for each tape instruction, the LLVM code that computes what the interpreter's case
// computes, in the same order over the same frame:
//  - the integer operations that are a few comparisons and selects (wrapped +, -, unary -,
//    min, max, comparisons, &&, ||, !, ?:) and division are written inline, transcribing
//    fj::ival;
//  - every other operation, and the kv plans' inverse steps, call an `extern "C"` wrapper
//    around the fj::ival / fj::fival / fj::kvr function itself (compiled here from
//    fj_ops.cuh, bound to the JIT by address), so that their results cannot differ;
//  - the control of fj::ival::narrowed_or, fj::kvr::verified and of a plan's evaluation is
//    written as branches, each tape a lambda may run being emitted where the lambda is called.
// Each frame place is an alloca of its own, which LLVM's SSA construction turns into registers:
// what remains is straight-line code with calls for the hard operations.
#include "native_analysis.h"

#include <llvm/IR/IRBuilder.h>

#include <cstddef>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>

namespace {

fj::Interval ints(int64_t lo, int64_t hi) {
  return {lo, hi};
}
fj::FloatInterval floats(float lo, float hi, int32_t nan) {
  return {lo, hi, nan != 0};
}
fj::kvr::Bound bound(int64_t lo, int64_t hi) {
  return {lo, hi};
}

}  // namespace

// The wrappers: an interval is passed as its ends (a float interval's NaN flag as an int32, to
// keep clear of bool's ABI), the result written through the last argument.
extern "C" {
#define FLEXJIT_INT_BINARY(name, function)                                              \
  void flexjit_host_ival_##name(int64_t a_lo, int64_t a_hi, int64_t b_lo, int64_t b_hi, \
                                fj::Interval* out) {                                    \
    *out = function(ints(a_lo, a_hi), ints(b_lo, b_hi));                                \
  }
#define FLEXJIT_FLOAT_BINARY(name, function, Result)                                            \
  void flexjit_host_fival_##name(float a_lo, float a_hi, int32_t a_nan, float b_lo, float b_hi, \
                                 int32_t b_nan, Result* out) {                                  \
    *out = function(floats(a_lo, a_hi, a_nan), floats(b_lo, b_hi, b_nan));                      \
  }
#define FLEXJIT_FLOAT_UNARY(name, function, Result)                                    \
  void flexjit_host_fival_##name(float a_lo, float a_hi, int32_t a_nan, Result* out) { \
    *out = function(floats(a_lo, a_hi, a_nan));                                        \
  }
#define FLEXJIT_STEP(name, function)                                                   \
  void flexjit_host_kvr_##name(int64_t s_lo, int64_t s_hi, int64_t b_lo, int64_t b_hi, \
                               fj::kvr::Bound* out) {                                  \
    *out = function(bound(s_lo, s_hi), ints(b_lo, b_hi));                              \
  }

FLEXJIT_INT_BINARY(mul, fj::ival::mul)
FLEXJIT_INT_BINARY(mod, fj::ival::mod)
FLEXJIT_INT_BINARY(bit_and, fj::ival::bit_and)
FLEXJIT_INT_BINARY(bit_or, fj::ival::bit_or)
FLEXJIT_INT_BINARY(bit_xor, fj::ival::bit_xor)
FLEXJIT_INT_BINARY(shl, fj::ival::shl)
FLEXJIT_INT_BINARY(shr, fj::ival::shr)
void flexjit_host_ival_abs(int64_t a_lo, int64_t a_hi, fj::Interval* out) {
  *out = fj::ival::abs(ints(a_lo, a_hi));
}
void flexjit_host_ival_bit_not(int64_t a_lo, int64_t a_hi, fj::Interval* out) {
  *out = fj::ival::bit_not(ints(a_lo, a_hi));
}
void flexjit_host_ival_load_int(const fj::ArrayParam* array, int64_t row_lo, int64_t row_hi,
                                int64_t col_lo, int64_t col_hi, fj::Interval* out) {
  *out = fj::ival::load_int(*array, ints(row_lo, row_hi), ints(col_lo, col_hi));
}

FLEXJIT_FLOAT_BINARY(add, fj::fival::add, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(sub, fj::fival::sub, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(mul, fj::fival::mul, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(div, fj::fival::div, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(mod, fj::fival::mod, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(min, fj::fival::min, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(max, fj::fival::max, fj::FloatInterval)
FLEXJIT_FLOAT_BINARY(eq, fj::fival::eq, fj::Interval)
FLEXJIT_FLOAT_BINARY(ne, fj::fival::ne, fj::Interval)
FLEXJIT_FLOAT_BINARY(lt, fj::fival::lt, fj::Interval)
FLEXJIT_FLOAT_BINARY(le, fj::fival::le, fj::Interval)
FLEXJIT_FLOAT_BINARY(gt, fj::fival::gt, fj::Interval)
FLEXJIT_FLOAT_BINARY(ge, fj::fival::ge, fj::Interval)
FLEXJIT_FLOAT_UNARY(abs, fj::fival::abs, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(neg, fj::fival::neg, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(tanh, fj::fival::tanh, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(exp, fj::fival::exp, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(exp2, fj::fival::exp2, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(log, fj::fival::log, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(log2, fj::fival::log2, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(sqrt, fj::fival::sqrt, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(sigmoid, fj::fival::sigmoid, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(floor, fj::fival::floor, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(ceil, fj::fival::ceil, fj::FloatInterval)
FLEXJIT_FLOAT_UNARY(to_int, fj::fival::to_int, fj::Interval)
void flexjit_host_fival_from_int(int64_t a_lo, int64_t a_hi, fj::FloatInterval* out) {
  *out = fj::fival::from_int(ints(a_lo, a_hi));
}
void flexjit_host_fival_select(int64_t c_lo, int64_t c_hi, float a_lo, float a_hi, int32_t a_nan,
                               float b_lo, float b_hi, int32_t b_nan, fj::FloatInterval* out) {
  *out = fj::fival::select(ints(c_lo, c_hi), floats(a_lo, a_hi, a_nan), floats(b_lo, b_hi, b_nan));
}
void flexjit_host_fival_load_float(const fj::ArrayParam* array, int64_t row_lo, int64_t row_hi,
                                   int64_t col_lo, int64_t col_hi, fj::FloatInterval* out) {
  *out = fj::fival::load_float(*array, ints(row_lo, row_hi), ints(col_lo, col_hi));
}

void flexjit_host_kvr_compared_with(int32_t op, int64_t e_lo, int64_t e_hi, fj::kvr::Bound* out) {
  *out = fj::kvr::compared_with(op, ints(e_lo, e_hi));
}
FLEXJIT_STEP(addend, fj::kvr::addend)
FLEXJIT_STEP(minuend, fj::kvr::minuend)
FLEXJIT_STEP(subtrahend, fj::kvr::subtrahend)
FLEXJIT_STEP(factor, fj::kvr::factor)
FLEXJIT_STEP(dividend, fj::kvr::dividend)
FLEXJIT_STEP(min_argument, fj::kvr::min_argument)
FLEXJIT_STEP(max_argument, fj::kvr::max_argument)
void flexjit_host_kvr_negated(int64_t s_lo, int64_t s_hi, fj::kvr::Bound* out) {
  *out = fj::kvr::negated(bound(s_lo, s_hi));
}
void flexjit_host_kvr_abs_argument(int64_t s_lo, int64_t s_hi, fj::kvr::Bound* out) {
  *out = fj::kvr::abs_argument(bound(s_lo, s_hi));
}
void flexjit_host_kvr_hull(int64_t a_lo, int64_t a_hi, int64_t b_lo, int64_t b_hi,
                           fj::kvr::Bound* out) {
  *out = fj::kvr::hull(bound(a_lo, a_hi), bound(b_lo, b_hi));
}

#undef FLEXJIT_INT_BINARY
#undef FLEXJIT_FLOAT_BINARY
#undef FLEXJIT_FLOAT_UNARY
#undef FLEXJIT_STEP
}

namespace flexjit {

namespace {

// The generated code reads the wrappers' results at these offsets.
static_assert(offsetof(fj::Interval, lo) == 0 && offsetof(fj::Interval, hi) == 8 &&
              sizeof(fj::Interval) == 16);
static_assert(offsetof(fj::kvr::Bound, lo) == 0 && offsetof(fj::kvr::Bound, hi) == 8 &&
              sizeof(fj::kvr::Bound) == 16);
static_assert(offsetof(fj::FloatInterval, lo) == 0 && offsetof(fj::FloatInterval, hi) == 4 &&
              offsetof(fj::FloatInterval, nan) == 8 && sizeof(bool) == 1);

constexpr int64_t kInt32Min = INT32_MIN;
constexpr int64_t kInt32Max = INT32_MAX;

#define FLEXJIT_WRAPPER(name) \
  { #name, llvm::pointerToJITTargetAddress(&name) }

// An interval's ends (i64), a float interval's ends (float) and NaN flag (i8, as bool in
// memory), and a kv bound's ends (i64), as SSA values.
struct Ints {
  llvm::Value *lo, *hi;
};
struct Floats {
  llvm::Value *lo, *hi, *nan;
};
using Bound = Ints;

using Opcode = IntervalProgram::Opcode;
using Tape = IntervalProgram::Tape;

// The wrapper of a step kind (all but Neg and Abs take the other operand's interval).
const char* step_wrapper(KvStep::Kind kind) {
  switch (kind) {
    case KvStep::Add:
      return "flexjit_host_kvr_addend";
    case KvStep::Minuend:
      return "flexjit_host_kvr_minuend";
    case KvStep::Subtrahend:
      return "flexjit_host_kvr_subtrahend";
    case KvStep::Neg:
      return "flexjit_host_kvr_negated";
    case KvStep::Mul:
      return "flexjit_host_kvr_factor";
    case KvStep::Div:
      return "flexjit_host_kvr_dividend";
    case KvStep::Abs:
      return "flexjit_host_kvr_abs_argument";
    case KvStep::Min:
      return "flexjit_host_kvr_min_argument";
    case KvStep::Max:
      return "flexjit_host_kvr_max_argument";
  }
  return nullptr;
}

bool has_other(KvStep::Kind kind) {
  return kind != KvStep::Neg && kind != KvStep::Abs;
}

// The wrapper of an opcode that has one, and how its operands pass.
enum class Shape { None, IntBinary, IntUnary, FloatBinary, FloatUnary, IntToFloat, Load };
struct Wrapped {
  const char* name = nullptr;
  Shape shape = Shape::None;
  bool float_result = false;
};

Wrapped wrapped(Opcode opcode) {
  switch (opcode) {
    case Opcode::MulInt:
      return {"flexjit_host_ival_mul", Shape::IntBinary, false};
    case Opcode::ModInt:
      return {"flexjit_host_ival_mod", Shape::IntBinary, false};
    case Opcode::AbsInt:
      return {"flexjit_host_ival_abs", Shape::IntUnary, false};
    case Opcode::BitAnd:
      return {"flexjit_host_ival_bit_and", Shape::IntBinary, false};
    case Opcode::BitOr:
      return {"flexjit_host_ival_bit_or", Shape::IntBinary, false};
    case Opcode::BitXor:
      return {"flexjit_host_ival_bit_xor", Shape::IntBinary, false};
    case Opcode::BitNot:
      return {"flexjit_host_ival_bit_not", Shape::IntUnary, false};
    case Opcode::Shl:
      return {"flexjit_host_ival_shl", Shape::IntBinary, false};
    case Opcode::Shr:
      return {"flexjit_host_ival_shr", Shape::IntBinary, false};
    case Opcode::LoadInt:
      return {"flexjit_host_ival_load_int", Shape::Load, false};
    case Opcode::LoadFloat:
      return {"flexjit_host_fival_load_float", Shape::Load, true};
    case Opcode::AddFloat:
      return {"flexjit_host_fival_add", Shape::FloatBinary, true};
    case Opcode::SubFloat:
      return {"flexjit_host_fival_sub", Shape::FloatBinary, true};
    case Opcode::MulFloat:
      return {"flexjit_host_fival_mul", Shape::FloatBinary, true};
    case Opcode::DivFloat:
      return {"flexjit_host_fival_div", Shape::FloatBinary, true};
    case Opcode::ModFloat:
      return {"flexjit_host_fival_mod", Shape::FloatBinary, true};
    case Opcode::MinFloat:
      return {"flexjit_host_fival_min", Shape::FloatBinary, true};
    case Opcode::MaxFloat:
      return {"flexjit_host_fival_max", Shape::FloatBinary, true};
    case Opcode::EqFloat:
      return {"flexjit_host_fival_eq", Shape::FloatBinary, false};
    case Opcode::NeFloat:
      return {"flexjit_host_fival_ne", Shape::FloatBinary, false};
    case Opcode::LtFloat:
      return {"flexjit_host_fival_lt", Shape::FloatBinary, false};
    case Opcode::LeFloat:
      return {"flexjit_host_fival_le", Shape::FloatBinary, false};
    case Opcode::GtFloat:
      return {"flexjit_host_fival_gt", Shape::FloatBinary, false};
    case Opcode::GeFloat:
      return {"flexjit_host_fival_ge", Shape::FloatBinary, false};
    case Opcode::AbsFloat:
      return {"flexjit_host_fival_abs", Shape::FloatUnary, true};
    case Opcode::NegFloat:
      return {"flexjit_host_fival_neg", Shape::FloatUnary, true};
    case Opcode::Tanh:
      return {"flexjit_host_fival_tanh", Shape::FloatUnary, true};
    case Opcode::Exp:
      return {"flexjit_host_fival_exp", Shape::FloatUnary, true};
    case Opcode::Exp2:
      return {"flexjit_host_fival_exp2", Shape::FloatUnary, true};
    case Opcode::Log:
      return {"flexjit_host_fival_log", Shape::FloatUnary, true};
    case Opcode::Log2:
      return {"flexjit_host_fival_log2", Shape::FloatUnary, true};
    case Opcode::Sqrt:
      return {"flexjit_host_fival_sqrt", Shape::FloatUnary, true};
    case Opcode::Sigmoid:
      return {"flexjit_host_fival_sigmoid", Shape::FloatUnary, true};
    case Opcode::Floor:
      return {"flexjit_host_fival_floor", Shape::FloatUnary, true};
    case Opcode::Ceil:
      return {"flexjit_host_fival_ceil", Shape::FloatUnary, true};
    case Opcode::FloatToInt:
      return {"flexjit_host_fival_to_int", Shape::FloatUnary, false};
    case Opcode::IntToFloat:
      return {"flexjit_host_fival_from_int", Shape::IntToFloat, true};
    default:
      return {};
  }
}

// Writes one of the two functions: its frame, and the program's tapes and plans as
// IntervalProgram::run and evaluate_plan run them.
class AnalysisWriter {
 public:
  AnalysisWriter(llvm::Module& module, const IntervalProgram& program)
      : module_(module),
        context_(module.getContext()),
        program_(program),
        builder_(context_),
        i8_(llvm::Type::getInt8Ty(context_)),
        i32_(llvm::Type::getInt32Ty(context_)),
        i64_(llvm::Type::getInt64Ty(context_)),
        f32_(llvm::Type::getFloatTy(context_)),
        ptr_(llvm::PointerType::get(context_, 0)),
        pair_(llvm::StructType::get(i64_, i64_)),
        float_triple_(llvm::StructType::get(f32_, f32_, i8_)) {}

  // flexjit_tile_value: IntervalProgram::value(box).ints.
  void write_tile_value(const llvm::TargetMachine& target) {
    begin(kTileValueName, {ptr_, i32_, i32_, i64_, i64_, i64_, i64_, ptr_}, target);
    llvm::Argument* args = function_->arg_begin();
    const Ints kv{args + 5, args + 6};
    llvm::Value* out = args + 7;
    const Tape& root = program_.root();
    run(root, kv);
    // A mask is a Bool; of a Float root value() leaves the ints as IntervalValue has them.
    const Ints value = program_.root_is_float() ? Ints{constant(kInt32Min), constant(kInt32Max)}
                                                : load_ints(root.result);
    store_pair(out, value);
    builder_.CreateRetVoid();
  }

  // flexjit_kv_bound: IntervalProgram::kv_bound(box), box.kv the point 0.
  void write_kv_bound(const llvm::TargetMachine& target) {
    begin(kKvBoundName, {ptr_, i32_, i32_, i64_, i64_, ptr_}, target);
    llvm::Argument* args = function_->arg_begin();
    const Bound result = plan(program_.plans()[program_.kv_plan()], {constant(0), constant(0)});
    store_pair(args + 5, result);
    builder_.CreateRetVoid();
  }

 private:
  // The frame's place i: its ints' ends, its floats' ends and NaN flag, each an alloca of the
  // entry block made when first used.
  struct Place {
    llvm::AllocaInst *lo = nullptr, *hi = nullptr;
    llvm::AllocaInst *float_lo = nullptr, *float_hi = nullptr, *nan = nullptr;
  };

  // The function's entry, the result buffers of the wrappers, and the frame's leaves as
  // IntervalProgram::with_frame writes them.
  void begin(const char* name, std::vector<llvm::Type*> parameters,
             const llvm::TargetMachine& target) {
    llvm::FunctionType* type =
        llvm::FunctionType::get(llvm::Type::getVoidTy(context_), parameters, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module_);
    function_->setDoesNotThrow();
    function_->addFnAttr("target-cpu", target.getTargetCPU());
    function_->addFnAttr("target-features", target.getTargetFeatureString());
    places_.clear();
    llvm::BasicBlock* entry = llvm::BasicBlock::Create(context_, "entry", function_);
    builder_.SetInsertPoint(entry);
    allocas_ = std::make_unique<llvm::IRBuilder<>>(entry);
    out_ints_ = allocas_->CreateAlloca(pair_, nullptr, "out_ints");
    out_floats_ = allocas_->CreateAlloca(float_triple_, nullptr, "out_floats");
    // Allocas go before everything else of the entry block.
    allocas_->SetInsertPoint(entry, entry->begin());

    llvm::Argument* args = function_->arg_begin();
    params_ = args + 0;
    store_ints(IntervalProgram::kB, point(builder_.CreateSExt(args + 1, i64_)));
    store_ints(IntervalProgram::kH, point(builder_.CreateSExt(args + 2, i64_)));
    store_ints(IntervalProgram::kQ, {args + 3, args + 4});
    const std::vector<ir::IntervalValue>& constants = program_.constants();
    for (size_t i = 0; i < constants.size(); ++i) {
      const uint32_t place = IntervalProgram::kConstants + static_cast<uint32_t>(i);
      store_ints(place, {constant(constants[i].ints.lo), constant(constants[i].ints.hi)});
      const fj::FloatInterval& value = constants[i].floats;
      store_floats(place, {float_constant(value.lo), float_constant(value.hi),
                           builder_.getInt8(value.nan ? 1 : 0)});
    }
    for (const IntervalProgram::ScalarParam& param : program_.params()) {
      llvm::Value* bits = builder_.CreateLoad(
          i32_,
          builder_.CreateConstInBoundsGEP1_64(
              i8_, params_,
              offsetof(fj::MaskParams, scalar) + 4 * static_cast<uint64_t>(param.param)),
          "scalar");
      switch (param.type) {
        case ir::Type::Bool: {  // fj::Interval::boolean(bits != 0)
          llvm::Value* value = builder_.CreateZExt(builder_.CreateIsNotNull(bits), i64_);
          store_ints(param.slot, {value, value});
          break;
        }
        case ir::Type::Int:
          store_ints(param.slot, point(builder_.CreateSExt(bits, i64_)));
          break;
        case ir::Type::Float: {  // fj::FloatInterval::point: a NaN is everything()
          llvm::Value* value = builder_.CreateBitCast(bits, f32_);
          llvm::Value* is_nan = builder_.CreateFCmpUNO(value, value);
          const float infinity = std::numeric_limits<float>::infinity();
          store_floats(param.slot, {builder_.CreateSelect(is_nan, float_constant(-infinity), value),
                                    builder_.CreateSelect(is_nan, float_constant(infinity), value),
                                    builder_.CreateZExt(is_nan, i8_)});
          break;
        }
      }
    }
  }

  // IntervalProgram::run: the tape over keys `kv`.
  void run(const Tape& tape, Ints kv) {
    if (tape.kv != IntervalProgram::kNone) store_ints(tape.kv, kv);
    const IntervalProgram::Instruction* first = program_.code().data() + tape.begin;
    for (const IntervalProgram::Instruction* op = first; op != first + tape.size; ++op)
      instruction(*op, kv);
  }

  // IntervalProgram::ints.
  Ints tape_ints(const Tape& tape, Ints kv) {
    if (tape.size != 0 || tape.kv != IntervalProgram::kNone) run(tape, kv);
    return load_ints(tape.result);
  }

  void instruction(const IntervalProgram::Instruction& op, Ints kv) {
    const Wrapped call = wrapped(op.opcode);
    if (call.name != nullptr) return wrapper(op, call);
    llvm::IRBuilder<>& b = builder_;
    switch (op.opcode) {
      case Opcode::AddInt: {
        const Ints x = load_ints(op.a), y = load_ints(op.b);
        return store_ints(op.out, wrap(b.CreateAdd(x.lo, y.lo), b.CreateAdd(x.hi, y.hi)));
      }
      case Opcode::SubInt: {
        const Ints x = load_ints(op.a), y = load_ints(op.b);
        return store_ints(op.out, wrap(b.CreateSub(x.lo, y.hi), b.CreateSub(x.hi, y.lo)));
      }
      case Opcode::NegInt: {
        const Ints x = load_ints(op.a);
        return store_ints(op.out, wrap(b.CreateNeg(x.hi), b.CreateNeg(x.lo)));
      }
      case Opcode::DivInt:
        return store_ints(op.out, divide(load_ints(op.a), load_ints(op.b)));
      case Opcode::MinInt:
      case Opcode::And:  // fj::ival::logical_and is min
        return store_ints(op.out, ends(load_ints(op.a), load_ints(op.b), /*max=*/false));
      case Opcode::MaxInt:
      case Opcode::Or:  // fj::ival::logical_or is max
        return store_ints(op.out, ends(load_ints(op.a), load_ints(op.b), /*max=*/true));
      case Opcode::LtInt:
        return store_ints(op.out, less(load_ints(op.a), load_ints(op.b)));
      case Opcode::GtInt:
        return store_ints(op.out, less(load_ints(op.b), load_ints(op.a)));
      case Opcode::LeInt:
        return store_ints(op.out, less_equal(load_ints(op.a), load_ints(op.b)));
      case Opcode::GeInt:
        return store_ints(op.out, less_equal(load_ints(op.b), load_ints(op.a)));
      case Opcode::EqInt:
        return store_ints(op.out, equal(load_ints(op.a), load_ints(op.b)));
      case Opcode::NeInt:
        return store_ints(op.out, logical_not(equal(load_ints(op.a), load_ints(op.b))));
      case Opcode::Not:
        return store_ints(op.out, logical_not(load_ints(op.a)));
      case Opcode::SelectInt: {  // fj::ival::select
        const Ints c = load_ints(op.a), x = load_ints(op.b), y = load_ints(op.c);
        const Ints hull{min(x.lo, y.lo), max(x.hi, y.hi)};
        llvm::Value* if_true = b.CreateICmpEQ(c.lo, constant(1));
        llvm::Value* if_false = b.CreateICmpEQ(c.hi, constant(0));
        const auto pick = [&](llvm::Value* x_end, llvm::Value* y_end, llvm::Value* hull_end) {
          return b.CreateSelect(if_true, x_end, b.CreateSelect(if_false, y_end, hull_end));
        };
        return store_ints(op.out, {pick(x.lo, y.lo, hull.lo), pick(x.hi, y.hi, hull.hi)});
      }
      case Opcode::SelectFloat: {
        const Ints c = load_ints(op.a);
        const Floats x = load_floats(op.b), y = load_floats(op.c);
        call_wrapper("flexjit_host_fival_select",
                     {c.lo, c.hi, x.lo, x.hi, nan_argument(x), y.lo, y.hi, nan_argument(y)},
                     out_floats_);
        return store_floats(op.out, read_floats());
      }
      case Opcode::CopyInt:
        return store_ints(op.out, load_ints(op.a));
      case Opcode::NarrowedOr:
        return store_ints(op.out, narrowed_or(op, kv));
      default:
        break;
    }
    std::abort();  // every opcode is handled above or has a wrapper
  }

  // An operation computed by its wrapper.
  void wrapper(const IntervalProgram::Instruction& op, const Wrapped& call) {
    std::vector<llvm::Value*> args;
    const auto add_ints = [&](uint32_t place) {
      const Ints x = load_ints(place);
      args.push_back(x.lo);
      args.push_back(x.hi);
    };
    const auto add_floats = [&](uint32_t place) {
      const Floats x = load_floats(place);
      args.push_back(x.lo);
      args.push_back(x.hi);
      args.push_back(nan_argument(x));
    };
    switch (call.shape) {
      case Shape::IntBinary:
        add_ints(op.a);
        add_ints(op.b);
        break;
      case Shape::IntUnary:
      case Shape::IntToFloat:
        add_ints(op.a);
        break;
      case Shape::FloatBinary:
        add_floats(op.a);
        add_floats(op.b);
        break;
      case Shape::FloatUnary:
        add_floats(op.a);
        break;
      case Shape::Load:  // &params.array[op.c], rows a, columns b
        args.push_back(builder_.CreateConstInBoundsGEP1_64(
            i8_, params_,
            offsetof(fj::MaskParams, array) + sizeof(fj::ArrayParam) * static_cast<uint64_t>(op.c),
            "array"));
        add_ints(op.a);
        add_ints(op.b);
        break;
      case Shape::None:
        std::abort();
    }
    if (call.float_result) {
      call_wrapper(call.name, args, out_floats_);
      store_floats(op.out, read_floats());
    } else {
      call_wrapper(call.name, args, out_ints_);
      store_ints(op.out, read_pair());
    }
  }

  // fj::ival::narrowed_or as the NarrowedOr case runs it: the plan of where the left operand
  // may fail, then the right operand's tape over those of the keys `kv`.
  Ints narrowed_or(const IntervalProgram::Instruction& op, Ints kv) {
    const IntervalProgram::Narrowing& narrowing = program_.narrowings()[op.b];
    const Bound where = plan(program_.plans()[narrowing.plan], kv);
    const Ints a = load_ints(op.a);
    llvm::IRBuilder<>& b = builder_;
    // kv.lo < 0: the right operand over kv itself; else over kv ∩ where, and true when that
    // is empty.
    const Bound keys{max(where.lo, kv.lo), min(where.hi, kv.hi)};
    llvm::Value* below_zero = b.CreateICmpSLT(kv.lo, constant(0));
    llvm::Value* none = b.CreateAnd(b.CreateNot(below_zero), b.CreateICmpSGT(keys.lo, keys.hi));
    llvm::BasicBlock* from = b.GetInsertBlock();
    llvm::BasicBlock* right = block("narrowed_right");
    llvm::BasicBlock* join = block("narrowed_join");
    b.CreateCondBr(none, join, right);
    b.SetInsertPoint(right);
    const Ints rest = tape_ints(narrowing.right, {b.CreateSelect(below_zero, kv.lo, keys.lo),
                                                  b.CreateSelect(below_zero, kv.hi, keys.hi)});
    const Ints value = ends(a, rest, /*max=*/true);
    llvm::BasicBlock* computed = b.GetInsertBlock();
    b.CreateBr(join);
    b.SetInsertPoint(join);
    return {phi({{constant(1), from}, {value.lo, computed}}),
            phi({{constant(1), from}, {value.hi, computed}})};
  }

  // IntervalProgram::evaluate_plan over keys `kv`, its stack kept as values.
  Bound plan(const IntervalProgram::Plan& plan, Ints kv) {
    std::vector<Bound> stack;
    const IntervalProgram::PlanNode* first = program_.plan_nodes().data() + plan.begin;
    for (const IntervalProgram::PlanNode* node = first; node != first + plan.size; ++node) {
      Bound result{constant(-fj::kvr::kUnbounded), constant(fj::kvr::kUnbounded)};  // all()
      switch (node->kind) {
        case KvPlan::All:
          break;
        case KvPlan::None:
          result = none();
          break;
        case KvPlan::Intersect:
        case KvPlan::Hull: {
          const size_t base = stack.size() - node->count;
          result = stack[base];
          for (uint32_t i = 1; i < node->count; ++i) {
            result = node->kind == KvPlan::Intersect ? intersect(result, stack[base + i])
                                                     : hull(result, stack[base + i]);
          }
          stack.resize(base);
          break;
        }
        case KvPlan::Guard: {  // fj::kvr::guard
          const Ints value = tape_ints(node->value, kv);
          llvm::Value* surely_not = node->polarity ? builder_.CreateICmpEQ(value.hi, constant(0))
                                                   : builder_.CreateICmpEQ(value.lo, constant(1));
          const Bound none = this->none();
          result = {builder_.CreateSelect(surely_not, none.lo, result.lo),
                    builder_.CreateSelect(surely_not, none.hi, result.hi)};
          break;
        }
        case KvPlan::Atom:
          result = atom(*node, kv);
          break;
      }
      stack.push_back(result);
    }
    return stack.front();
  }

  // An atom: its comparison solved for kv step by step, then fj::kvr::verified.
  Bound atom(const IntervalProgram::PlanNode& node, Ints kv) {
    const Ints value = tape_ints(node.value, kv);
    call_wrapper("flexjit_host_kvr_compared_with",
                 {builder_.getInt32(static_cast<uint32_t>(node.op)), value.lo, value.hi},
                 out_ints_);
    Bound s = read_pair();
    const IntervalProgram::PlanStep* first = program_.plan_steps().data() + node.first;
    for (const IntervalProgram::PlanStep* step = first; step != first + node.count; ++step) {
      std::vector<llvm::Value*> args = {s.lo, s.hi};
      if (has_other(step->kind)) {
        const Ints other = tape_ints(step->other, kv);
        args.push_back(other.lo);
        args.push_back(other.hi);
      }
      call_wrapper(step_wrapper(step->kind), args, out_ints_);
      s = read_pair();
    }
    return verified(s, node.condition, node.polarity);
  }

  // fj::kvr::verified, the atom's condition tape run over each key range it checks.
  Bound verified(Bound s, const Tape& condition, bool polarity) {
    llvm::IRBuilder<>& b = builder_;
    const Bound keys{constant(0), constant(kInt32Max)};
    const Bound candidate = intersect(s, keys);
    std::vector<std::pair<Bound, llvm::BasicBlock*>> results;
    llvm::BasicBlock* join = block("verified_join");
    // The comparison over [lo, hi] is surely false (with polarity).
    const auto surely_false = [&](llvm::Value* lo, llvm::Value* hi) {
      const Ints value = tape_ints(condition, {lo, hi});
      return polarity ? b.CreateICmpEQ(value.hi, constant(0))
                      : b.CreateICmpEQ(value.lo, constant(1));
    };
    // Branches to `next` when `condition` holds, else ends with `result`.
    const auto unless = [&](llvm::Value* condition, Bound result, const char* next_name) {
      llvm::BasicBlock* next = block(next_name);
      results.emplace_back(result, b.GetInsertBlock());
      b.CreateCondBr(condition, next, join);
      b.SetInsertPoint(next);
    };

    llvm::BasicBlock* empty = block("verified_empty");
    llvm::BasicBlock* below = block("verified_below");
    b.CreateCondBr(b.CreateICmpSGT(candidate.lo, candidate.hi), empty, below);

    b.SetInsertPoint(empty);
    {
      llvm::Value* sure = surely_false(constant(0), constant(kInt32Max));
      const Bound none = this->none();
      results.push_back(
          {{b.CreateSelect(sure, none.lo, keys.lo), b.CreateSelect(sure, none.hi, keys.hi)},
           b.GetInsertBlock()});
      b.CreateBr(join);
    }

    // Below the candidate: [0, lo - 1] when lo > 0.
    b.SetInsertPoint(below);
    llvm::BasicBlock* check_below = block("verified_check_below");
    llvm::BasicBlock* above = block("verified_above");
    b.CreateCondBr(b.CreateICmpSGT(candidate.lo, constant(0)), check_below, above);
    b.SetInsertPoint(check_below);
    unless(surely_false(constant(0), b.CreateSub(candidate.lo, constant(1))), keys,
           "verified_below_ok");
    b.CreateBr(above);

    // Above it: [hi + 1, INT32_MAX] when hi < INT32_MAX.
    b.SetInsertPoint(above);
    llvm::BasicBlock* check_above = block("verified_check_above");
    llvm::BasicBlock* confirmed = block("verified_confirmed");
    b.CreateCondBr(b.CreateICmpSLT(candidate.hi, constant(kInt32Max)), check_above, confirmed);
    b.SetInsertPoint(check_above);
    unless(surely_false(b.CreateAdd(candidate.hi, constant(1)), constant(kInt32Max)), keys,
           "verified_above_ok");
    b.CreateBr(confirmed);

    b.SetInsertPoint(confirmed);
    results.emplace_back(candidate, confirmed);
    b.CreateBr(join);

    b.SetInsertPoint(join);
    std::vector<std::pair<llvm::Value*, llvm::BasicBlock*>> los, his;
    for (const auto& [result, from] : results) {
      los.emplace_back(result.lo, from);
      his.emplace_back(result.hi, from);
    }
    return {phi(los), phi(his)};
  }

  // fj::kvr::intersect.
  Bound intersect(Bound a, Bound b) {
    return {builder_.CreateSelect(builder_.CreateICmpSGT(a.lo, b.lo), a.lo, b.lo),
            builder_.CreateSelect(builder_.CreateICmpSLT(a.hi, b.hi), a.hi, b.hi)};
  }

  Bound hull(Bound a, Bound b) {
    call_wrapper("flexjit_host_kvr_hull", {a.lo, a.hi, b.lo, b.hi}, out_ints_);
    return read_pair();
  }

  Bound none() { return {constant(1), constant(0)}; }

  // fj::Interval::wrapped(lo, hi): exact ends back in int32, or everything.
  Ints wrap(llvm::Value* lo, llvm::Value* hi) {
    llvm::IRBuilder<>& b = builder_;
    llvm::Value* in_range = b.CreateAnd(b.CreateICmpSGE(lo, constant(kInt32Min)),
                                        b.CreateICmpSLE(hi, constant(kInt32Max)));
    llvm::Value* too_wide = b.CreateICmpSGE(b.CreateSub(hi, lo), constant(0xffffffffll));
    // fj::wrap_to_i32: the int32 congruent modulo 2^32.
    llvm::Value* wrapped_lo = b.CreateSExt(b.CreateTrunc(lo, i32_), i64_);
    llvm::Value* wrapped_hi = b.CreateSExt(b.CreateTrunc(hi, i32_), i64_);
    llvm::Value* everything = b.CreateOr(too_wide, b.CreateICmpSGT(wrapped_lo, wrapped_hi));
    return {
        b.CreateSelect(in_range, lo, b.CreateSelect(everything, constant(kInt32Min), wrapped_lo)),
        b.CreateSelect(in_range, hi, b.CreateSelect(everything, constant(kInt32Max), wrapped_hi))};
  }

  // fj::ival::div: fj::ival::split_by_divisor_sign over fj::detail::div_same_sign, wrapped.
  // Written inline because the divisor is most often a constant (`q / chunk`): LLVM then folds
  // the sign cases away and divides by shifts. Both parts are computed and selected, each with
  // its divisors replaced by +-1 where it is not taken, so that no division by 0 is executed.
  Ints divide(Ints a, Ints d) {
    llvm::IRBuilder<>& b = builder_;
    llvm::Value* one = constant(1);
    llvm::Value* minus_one = constant(-1);
    llvm::Value* has_zero =
        b.CreateAnd(b.CreateICmpSLE(d.lo, constant(0)), b.CreateICmpSGE(d.hi, constant(0)));
    llvm::Value* has_positive = b.CreateICmpSGE(d.hi, one);
    llvm::Value* has_negative = b.CreateICmpSLE(d.lo, minus_one);
    const Ints positive = quotients(a, max(d.lo, one), b.CreateSelect(has_positive, d.hi, one));
    const Ints negative =
        quotients(a, b.CreateSelect(has_negative, d.lo, minus_one), min(d.hi, minus_one));
    const auto choose = [&](llvm::Value* condition, Ints x, Ints y) {
      return Ints{b.CreateSelect(condition, x.lo, y.lo), b.CreateSelect(condition, x.hi, y.hi)};
    };
    const auto hull = [&](Ints x, Ints y) { return Ints{min(x.lo, y.lo), max(x.hi, y.hi)}; };
    const Ints zero = point(constant(0));
    const Ints after_positive =
        choose(has_positive, choose(has_zero, hull(zero, positive), positive), zero);
    llvm::Value* have_result = b.CreateOr(has_zero, has_positive);
    const Ints result =
        choose(has_negative, choose(have_result, hull(after_positive, negative), negative),
               after_positive);
    return wrap(result.lo, result.hi);
  }

  // fj::detail::div_same_sign: the hull of the floor quotients at the corners.
  Ints quotients(Ints a, llvm::Value* d_lo, llvm::Value* d_hi) {
    llvm::Value* c0 = floor_divide(a.lo, d_lo);
    llvm::Value* c1 = floor_divide(a.lo, d_hi);
    llvm::Value* c2 = floor_divide(a.hi, d_lo);
    llvm::Value* c3 = floor_divide(a.hi, d_hi);
    return {min(min(c0, c1), min(c2, c3)), max(max(c0, c1), max(c2, c3))};
  }

  // fj::detail::floordiv64 (d != 0; the operands are int32 values, so no overflow).
  llvm::Value* floor_divide(llvm::Value* x, llvm::Value* d) {
    llvm::IRBuilder<>& b = builder_;
    llvm::Value* zero = constant(0);
    llvm::Value* quotient = b.CreateSDiv(x, d);
    llvm::Value* adjust =
        b.CreateAnd(b.CreateICmpNE(b.CreateSRem(x, d), zero),
                    b.CreateXor(b.CreateICmpSLT(x, zero), b.CreateICmpSLT(d, zero)));
    return b.CreateSub(quotient, b.CreateZExt(adjust, i64_));
  }

  // {min or max of the los, min or max of the his}: fj::ival::min/max, logical_and/or.
  Ints ends(Ints a, Ints b, bool max) {
    return max ? Ints{this->max(a.lo, b.lo), this->max(a.hi, b.hi)}
               : Ints{min(a.lo, b.lo), min(a.hi, b.hi)};
  }

  // A boolean interval: {1, 1} when `surely_true`, else {0, 0} when `surely_false`, else {0, 1}
  // (the if-chain of fj::ival's comparisons, as selects).
  Ints decided(llvm::Value* surely_true, llvm::Value* surely_false) {
    llvm::IRBuilder<>& b = builder_;
    return {b.CreateZExt(surely_true, i64_),
            b.CreateZExt(b.CreateOr(surely_true, b.CreateNot(surely_false)), i64_)};
  }

  Ints less(Ints a, Ints b) {  // fj::ival::lt
    return decided(builder_.CreateICmpSLT(a.hi, b.lo), builder_.CreateICmpSGE(a.lo, b.hi));
  }

  Ints less_equal(Ints a, Ints b) {  // fj::ival::le
    return decided(builder_.CreateICmpSLE(a.hi, b.lo), builder_.CreateICmpSGT(a.lo, b.hi));
  }

  Ints equal(Ints a, Ints b) {  // fj::ival::eq
    llvm::IRBuilder<>& builder = builder_;
    llvm::Value* same_point = builder.CreateAnd(
        builder.CreateAnd(builder.CreateICmpEQ(a.lo, a.hi), builder.CreateICmpEQ(b.lo, b.hi)),
        builder.CreateICmpEQ(a.lo, b.lo));
    llvm::Value* apart =
        builder.CreateOr(builder.CreateICmpSLT(a.hi, b.lo), builder.CreateICmpSLT(b.hi, a.lo));
    return decided(same_point, apart);
  }

  Ints logical_not(Ints a) {  // {1 - hi, 1 - lo}
    return {builder_.CreateSub(constant(1), a.hi), builder_.CreateSub(constant(1), a.lo)};
  }

  llvm::Value* min(llvm::Value* a, llvm::Value* b) {  // fj::detail::min64
    return builder_.CreateSelect(builder_.CreateICmpSLT(a, b), a, b);
  }
  llvm::Value* max(llvm::Value* a, llvm::Value* b) {  // fj::detail::max64
    return builder_.CreateSelect(builder_.CreateICmpSLT(a, b), b, a);
  }

  Ints point(llvm::Value* x) { return {x, x}; }

  llvm::Value* constant(int64_t value) { return builder_.getInt64(static_cast<uint64_t>(value)); }

  llvm::Value* float_constant(float value) { return llvm::ConstantFP::get(f32_, value); }

  llvm::Value* nan_argument(const Floats& x) { return builder_.CreateZExt(x.nan, i32_); }

  llvm::BasicBlock* block(const char* name) {
    return llvm::BasicBlock::Create(context_, name, function_);
  }

  llvm::Value* phi(const std::vector<std::pair<llvm::Value*, llvm::BasicBlock*>>& incoming) {
    llvm::PHINode* node = builder_.CreatePHI(i64_, static_cast<unsigned>(incoming.size()));
    for (const auto& [value, from] : incoming)
      node->addIncoming(value, from);
    return node;
  }

  // Calls wrapper `name` (void, its arguments' types, then the result pointer).
  void call_wrapper(const char* name, std::vector<llvm::Value*> args, llvm::Value* out) {
    args.push_back(out);
    llvm::Function* function = module_.getFunction(name);
    if (function == nullptr) {
      std::vector<llvm::Type*> types;
      for (llvm::Value* arg : args)
        types.push_back(arg->getType());
      function = llvm::Function::Create(
          llvm::FunctionType::get(llvm::Type::getVoidTy(context_), types, false),
          llvm::Function::ExternalLinkage, name, module_);
      function->setDoesNotThrow();
      // The result pointer is written and not kept. (Loads may report a bad index, so the
      // wrappers are not marked as touching no other memory.)
      const unsigned out_index = static_cast<unsigned>(types.size() - 1);
      function->addParamAttr(out_index, llvm::Attribute::NoCapture);
      function->addParamAttr(out_index, llvm::Attribute::NoAlias);
    }
    builder_.CreateCall(function, args);
  }

  Ints read_pair() {
    return {builder_.CreateLoad(i64_, builder_.CreateStructGEP(pair_, out_ints_, 0)),
            builder_.CreateLoad(i64_, builder_.CreateStructGEP(pair_, out_ints_, 1))};
  }

  Floats read_floats() {
    return {builder_.CreateLoad(f32_, builder_.CreateStructGEP(float_triple_, out_floats_, 0)),
            builder_.CreateLoad(f32_, builder_.CreateStructGEP(float_triple_, out_floats_, 1)),
            builder_.CreateLoad(i8_, builder_.CreateStructGEP(float_triple_, out_floats_, 2))};
  }

  void store_pair(llvm::Value* out, Ints value) {
    builder_.CreateStore(value.lo, builder_.CreateStructGEP(pair_, out, 0));
    builder_.CreateStore(value.hi, builder_.CreateStructGEP(pair_, out, 1));
  }

  Place& place(uint32_t index) { return places_[index]; }

  llvm::AllocaInst* alloca_of(llvm::AllocaInst*& slot, llvm::Type* type, const char* name) {
    if (slot == nullptr) slot = allocas_->CreateAlloca(type, nullptr, name);
    return slot;
  }

  Ints load_ints(uint32_t index) {
    Place& p = place(index);
    return {builder_.CreateLoad(i64_, alloca_of(p.lo, i64_, "lo")),
            builder_.CreateLoad(i64_, alloca_of(p.hi, i64_, "hi"))};
  }

  void store_ints(uint32_t index, Ints value) {
    Place& p = place(index);
    builder_.CreateStore(value.lo, alloca_of(p.lo, i64_, "lo"));
    builder_.CreateStore(value.hi, alloca_of(p.hi, i64_, "hi"));
  }

  Floats load_floats(uint32_t index) {
    Place& p = place(index);
    return {builder_.CreateLoad(f32_, alloca_of(p.float_lo, f32_, "float_lo")),
            builder_.CreateLoad(f32_, alloca_of(p.float_hi, f32_, "float_hi")),
            builder_.CreateLoad(i8_, alloca_of(p.nan, i8_, "nan"))};
  }

  void store_floats(uint32_t index, Floats value) {
    Place& p = place(index);
    builder_.CreateStore(value.lo, alloca_of(p.float_lo, f32_, "float_lo"));
    builder_.CreateStore(value.hi, alloca_of(p.float_hi, f32_, "float_hi"));
    builder_.CreateStore(value.nan, alloca_of(p.nan, i8_, "nan"));
  }

  llvm::Module& module_;
  llvm::LLVMContext& context_;
  const IntervalProgram& program_;
  llvm::IRBuilder<> builder_;
  llvm::Type *i8_, *i32_, *i64_, *f32_;
  llvm::PointerType* ptr_;
  llvm::StructType* pair_;          // fj::Interval, fj::kvr::Bound
  llvm::StructType* float_triple_;  // fj::FloatInterval

  // The function being written.
  llvm::Function* function_ = nullptr;
  llvm::Value* params_ = nullptr;
  std::unique_ptr<llvm::IRBuilder<>> allocas_;
  llvm::AllocaInst* out_ints_ = nullptr;
  llvm::AllocaInst* out_floats_ = nullptr;
  std::map<uint32_t, Place> places_;
};

}  // namespace

void write_analysis(llvm::Module& module, const llvm::TargetMachine& target,
                    const IntervalProgram& program) {
  AnalysisWriter(module, program).write_tile_value(target);
  AnalysisWriter(module, program).write_kv_bound(target);
}

std::vector<std::pair<const char*, llvm::JITTargetAddress>> analysis_functions() {
  return {
      FLEXJIT_WRAPPER(flexjit_host_ival_mul),
      FLEXJIT_WRAPPER(flexjit_host_ival_mod),
      FLEXJIT_WRAPPER(flexjit_host_ival_abs),
      FLEXJIT_WRAPPER(flexjit_host_ival_bit_and),
      FLEXJIT_WRAPPER(flexjit_host_ival_bit_or),
      FLEXJIT_WRAPPER(flexjit_host_ival_bit_xor),
      FLEXJIT_WRAPPER(flexjit_host_ival_bit_not),
      FLEXJIT_WRAPPER(flexjit_host_ival_shl),
      FLEXJIT_WRAPPER(flexjit_host_ival_shr),
      FLEXJIT_WRAPPER(flexjit_host_ival_load_int),
      FLEXJIT_WRAPPER(flexjit_host_fival_add),
      FLEXJIT_WRAPPER(flexjit_host_fival_sub),
      FLEXJIT_WRAPPER(flexjit_host_fival_mul),
      FLEXJIT_WRAPPER(flexjit_host_fival_div),
      FLEXJIT_WRAPPER(flexjit_host_fival_mod),
      FLEXJIT_WRAPPER(flexjit_host_fival_min),
      FLEXJIT_WRAPPER(flexjit_host_fival_max),
      FLEXJIT_WRAPPER(flexjit_host_fival_eq),
      FLEXJIT_WRAPPER(flexjit_host_fival_ne),
      FLEXJIT_WRAPPER(flexjit_host_fival_lt),
      FLEXJIT_WRAPPER(flexjit_host_fival_le),
      FLEXJIT_WRAPPER(flexjit_host_fival_gt),
      FLEXJIT_WRAPPER(flexjit_host_fival_ge),
      FLEXJIT_WRAPPER(flexjit_host_fival_abs),
      FLEXJIT_WRAPPER(flexjit_host_fival_neg),
      FLEXJIT_WRAPPER(flexjit_host_fival_tanh),
      FLEXJIT_WRAPPER(flexjit_host_fival_exp),
      FLEXJIT_WRAPPER(flexjit_host_fival_exp2),
      FLEXJIT_WRAPPER(flexjit_host_fival_log),
      FLEXJIT_WRAPPER(flexjit_host_fival_log2),
      FLEXJIT_WRAPPER(flexjit_host_fival_sqrt),
      FLEXJIT_WRAPPER(flexjit_host_fival_sigmoid),
      FLEXJIT_WRAPPER(flexjit_host_fival_floor),
      FLEXJIT_WRAPPER(flexjit_host_fival_ceil),
      FLEXJIT_WRAPPER(flexjit_host_fival_to_int),
      FLEXJIT_WRAPPER(flexjit_host_fival_from_int),
      FLEXJIT_WRAPPER(flexjit_host_fival_select),
      FLEXJIT_WRAPPER(flexjit_host_fival_load_float),
      FLEXJIT_WRAPPER(flexjit_host_kvr_compared_with),
      FLEXJIT_WRAPPER(flexjit_host_kvr_addend),
      FLEXJIT_WRAPPER(flexjit_host_kvr_minuend),
      FLEXJIT_WRAPPER(flexjit_host_kvr_subtrahend),
      FLEXJIT_WRAPPER(flexjit_host_kvr_factor),
      FLEXJIT_WRAPPER(flexjit_host_kvr_dividend),
      FLEXJIT_WRAPPER(flexjit_host_kvr_min_argument),
      FLEXJIT_WRAPPER(flexjit_host_kvr_max_argument),
      FLEXJIT_WRAPPER(flexjit_host_kvr_negated),
      FLEXJIT_WRAPPER(flexjit_host_kvr_abs_argument),
      FLEXJIT_WRAPPER(flexjit_host_kvr_hull),
  };
}

#undef FLEXJIT_WRAPPER

}  // namespace flexjit
