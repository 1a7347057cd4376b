// The LLVM host code generator: a variant's mask and score as native row functions
// (docs/codegen.md). Each IR node becomes the LLVM instructions that compute what the
// templates/fj_ops.cuh function the evaluator calls for it computes: plain integer arithmetic
// (LLVM's is two's complement wrap-around without nsw/nuw), explicit guards where C++ or LLVM
// would have undefined behaviour (division by zero, INT_MIN / -1), IEEE float32 instructions
// without fast-math flags (never contracted), and, for the functions whose value depends on a
// math library (tanh, exp, exp2, log, log2, sigmoid) and for float modulo, a call to an
// `extern "C"` wrapper around the fj_ops.cuh function itself, bound to the JIT by address. The
// results are therefore bit-identical to the evaluator's (NaN payloads aside).
//
// A row function evaluates one query row against n consecutive keys in a loop written in IR,
// so that LLVM's O2 pipeline hoists what does not depend on the key and vectorises the rest
// where it can. Out-of-range array reads are reported through fj::ArrayParam::bad_index by a
// second copy of the loop, taken only when the caller asked for reports: a call in the loop
// would keep the common copy from being vectorised.
//
// The same module holds the mask's analysis functions (native_analysis.cpp), behind
// HostCode::classify and HostCode::kv_range.
#include "native_host_code.h"

#include <elf.h>
#include <fmt/format.h>
#include <link.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analysis/analysis.h"
#include "flexjit/compiler/cache_key.h"
#include "native_analysis.h"

// The functions generated code calls, around the very fj_ops.cuh functions that the evaluator
// calls, so that library-dependent results cannot differ. Bound to the JIT by address
// (absoluteSymbols), so they need no dynamic export.
extern "C" {
float flexjit_host_ftanh(float a) {
  return fj::ftanh(a);
}
float flexjit_host_fexp(float a) {
  return fj::fexp(a);
}
float flexjit_host_fexp2(float a) {
  return fj::fexp2(a);
}
float flexjit_host_flog(float a) {
  return fj::flog(a);
}
float flexjit_host_flog2(float a) {
  return fj::flog2(a);
}
float flexjit_host_fsigmoid(float a) {
  return fj::fsigmoid(a);
}
float flexjit_host_fmod_floor(float a, float b) {
  return fj::fmod_floor(a, b);
}
void flexjit_host_report_bad_index(const fj::ArrayParam* array, int32_t row, int32_t col) {
  fj::report_bad_index(*array, row, col);
}
}

namespace flexjit {
namespace {

// The parameter block's layout, as the host compiler lays it out: generated code addresses its
// fields by these byte offsets.
constexpr uint64_t kScalarOffset = offsetof(fj::MaskParams, scalar);
constexpr uint64_t kArrayOffset = offsetof(fj::MaskParams, array);
constexpr uint64_t kArrayStride = sizeof(fj::ArrayParam);
static_assert(sizeof(fj::i32) == 4 && sizeof(float) == 4);

constexpr const char* kMaskRowName = "flexjit_mask_row";
constexpr const char* kScoreRowName = "flexjit_score_row";
constexpr const char* kReportName = "flexjit_host_report_bad_index";

// A wrapper the generated code may call: its name in the module and its address here.
struct HostFunction {
  const char* name;
  llvm::JITTargetAddress address;
};

// The wrappers, and the C library functions LLVM's code generator may call on its own: memset
// and memcpy for loops it recognises as such (a mask that is always true fills its row with
// memset), floorf and ceilf for llvm.floor / llvm.ceil on CPUs without SSE4.1. Nothing else is
// resolved: an unexpected call fails the lookup (an error) rather than binding to whatever the
// process happens to export.
std::vector<HostFunction> host_functions() {
  using llvm::pointerToJITTargetAddress;
  return {
      {"flexjit_host_ftanh", pointerToJITTargetAddress(&flexjit_host_ftanh)},
      {"flexjit_host_fexp", pointerToJITTargetAddress(&flexjit_host_fexp)},
      {"flexjit_host_fexp2", pointerToJITTargetAddress(&flexjit_host_fexp2)},
      {"flexjit_host_flog", pointerToJITTargetAddress(&flexjit_host_flog)},
      {"flexjit_host_flog2", pointerToJITTargetAddress(&flexjit_host_flog2)},
      {"flexjit_host_fsigmoid", pointerToJITTargetAddress(&flexjit_host_fsigmoid)},
      {"flexjit_host_fmod_floor", pointerToJITTargetAddress(&flexjit_host_fmod_floor)},
      {kReportName, pointerToJITTargetAddress(&flexjit_host_report_bad_index)},
      {"memset", pointerToJITTargetAddress(&::memset)},
      {"memcpy", pointerToJITTargetAddress(&::memcpy)},
      {"memmove", pointerToJITTargetAddress(&::memmove)},
      {"floorf", pointerToJITTargetAddress(&::floorf)},
      {"ceilf", pointerToJITTargetAddress(&::ceilf)},
  };
}

// The wrapper that computes a library-dependent operation, or null for the others.
const char* wrapper_of(ir::ExprKind kind) {
  switch (kind) {
    case ir::ExprKind::Tanh:
      return "flexjit_host_ftanh";
    case ir::ExprKind::Exp:
      return "flexjit_host_fexp";
    case ir::ExprKind::Exp2:
      return "flexjit_host_fexp2";
    case ir::ExprKind::Log:
      return "flexjit_host_flog";
    case ir::ExprKind::Log2:
      return "flexjit_host_flog2";
    case ir::ExprKind::Sigmoid:
      return "flexjit_host_fsigmoid";
    case ir::ExprKind::Mod:
      return "flexjit_host_fmod_floor";
    default:
      return nullptr;
  }
}

std::string error_text(llvm::Error error) {
  return llvm::toString(std::move(error));
}

// Which row function is being written: the mask's (key positions in, 0/1 bytes out) or the
// score's (scores in and out).
enum class RowKind { Mask, Score };

// Writes one row function:
//   void name(const fj::MaskParams* p, i32 b, i32 h, i32 q, i32 kv0, i32 n, out)
// with `out` a uint8_t* (mask) or float* (score, read and written).
class RowWriter {
 public:
  RowWriter(llvm::Module& module, RowKind kind, ir::Expr expr)
      : module_(module),
        context_(module.getContext()),
        kind_(kind),
        expr_(std::move(expr)),
        i8_(llvm::Type::getInt8Ty(context_)),
        i32_(llvm::Type::getInt32Ty(context_)),
        i64_(llvm::Type::getInt64Ty(context_)),
        f32_(llvm::Type::getFloatTy(context_)),
        ptr_(llvm::PointerType::get(context_, 0)) {}

  llvm::Function* write(const char* name, const llvm::TargetMachine& target) {
    scan(expr_);
    llvm::FunctionType* type = llvm::FunctionType::get(
        llvm::Type::getVoidTy(context_), {ptr_, i32_, i32_, i32_, i32_, i32_, ptr_}, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module_);
    function_->setDoesNotThrow();
    // The host's CPU and features, so that the vectoriser's cost model and the code generator
    // use its vector units.
    function_->addFnAttr("target-cpu", target.getTargetCPU());
    function_->addFnAttr("target-features", target.getTargetFeatureString());
    // The contract of HostCode: the output overlaps neither the parameter block nor the arrays.
    function_->addParamAttr(0, llvm::Attribute::NoAlias);
    function_->addParamAttr(0, llvm::Attribute::ReadOnly);
    function_->addParamAttr(0, llvm::Attribute::NoCapture);
    function_->addParamAttr(6, llvm::Attribute::NoAlias);
    function_->addParamAttr(6, llvm::Attribute::NoCapture);
    llvm::Argument* args = function_->arg_begin();
    params_ = args + 0;
    b_ = args + 1;
    h_ = args + 2;
    q_ = args + 3;
    kv0_ = args + 4;
    n_ = args + 5;
    out_ = args + 6;

    llvm::BasicBlock* entry = llvm::BasicBlock::Create(context_, "entry", function_);
    exit_ = llvm::BasicBlock::Create(context_, "exit", function_);
    llvm::IRBuilder<> builder(entry);
    read_params(builder);
    llvm::BasicBlock* start = llvm::BasicBlock::Create(context_, "start", function_);
    builder.CreateCondBr(builder.CreateICmpSGT(n_, builder.getInt32(0)), start, exit_);
    builder.SetInsertPoint(start);

    llvm::BasicBlock* fast = llvm::BasicBlock::Create(context_, "fast", function_);
    if (arrays_.empty()) {
      builder.CreateBr(fast);
    } else {
      // Reports asked for by any array read: the loop that makes them.
      llvm::Value* reporting = builder.getFalse();
      for (const auto& [slot, array] : arrays_) {
        reporting =
            builder.CreateOr(reporting, builder.CreateIsNotNull(array.bad_index, "reporting"));
      }
      llvm::BasicBlock* checked = llvm::BasicBlock::Create(context_, "checked", function_);
      builder.CreateCondBr(reporting, checked, fast);
      write_loop(checked, /*hoist=*/false, /*report=*/true);
    }
    write_loop(fast, /*hoist=*/true, /*report=*/false);

    builder.SetInsertPoint(exit_);
    builder.CreateRetVoid();
    return function_;
  }

 private:
  // One array's descriptor fields, read once on entry.
  struct ArrayFields {
    llvm::Value* descriptor = nullptr;  // &p->array[slot], for reports
    llvm::Value* data = nullptr;
    llvm::Value* rows = nullptr;
    llvm::Value* cols = nullptr;
    llvm::Value* row_stride = nullptr;
    llvm::Value* bad_index = nullptr;
  };

  // Records which scalars and arrays the body reads, and which nodes vary along the row (read
  // kv, or, in a score, the score); each node once.
  bool scan(const ir::Expr& e) {
    const auto found = varies_.find(e.get());
    if (found != varies_.end()) return found->second;
    bool varies = false;
    if (const ir::Var* var = e.as<ir::Var>()) {
      varies = var->variable == ir::Variable::KV ||
               (var->variable == ir::Variable::Score && kind_ == RowKind::Score);
    } else if (const ir::Param* param = e.as<ir::Param>()) {
      scalar_slots_.insert(param->slot);
    } else if (const ir::Load* load = e.as<ir::Load>()) {
      arrays_.emplace(load->slot, ArrayFields{});
    }
    for (int i = 0; i < ir::operand_count(e.kind()); ++i) {
      varies = scan(ir::operand(e, i)) || varies;
    }
    varies_.emplace(e.get(), varies);
    return varies;
  }

  llvm::Value* field(llvm::IRBuilder<>& builder, llvm::Type* type, uint64_t offset,
                     const char* name) {
    // Aligned as the data layout aligns `type`, as the host compiler laid the struct out.
    return builder.CreateLoad(type, builder.CreateConstInBoundsGEP1_64(i8_, params_, offset), name);
  }

  // The parameters are the same for every key of the row: read once, before the loops.
  void read_params(llvm::IRBuilder<>& builder) {
    for (const int slot : scalar_slots_) {
      scalars_[slot] =
          field(builder, i32_, kScalarOffset + 4 * static_cast<uint64_t>(slot), "scalar");
    }
    for (auto& [slot, array] : arrays_) {
      const uint64_t base = kArrayOffset + kArrayStride * static_cast<uint64_t>(slot);
      array.descriptor = builder.CreateConstInBoundsGEP1_64(i8_, params_, base, "array");
      array.data = field(builder, ptr_, base + offsetof(fj::ArrayParam, data), "data");
      array.rows = field(builder, i32_, base + offsetof(fj::ArrayParam, rows), "rows");
      array.cols = field(builder, i32_, base + offsetof(fj::ArrayParam, cols), "cols");
      array.row_stride =
          field(builder, i32_, base + offsetof(fj::ArrayParam, row_stride), "row_stride");
      array.bad_index =
          field(builder, ptr_, base + offsetof(fj::ArrayParam, bad_index), "bad_index");
    }
  }

  // The loop over the row's keys, entered at `preheader`. With `hoist`, nodes that do not vary
  // along the row are computed once in the preheader; with `report`, out-of-range reads are
  // reported, in the order the evaluator makes them (operands left to right, first use).
  void write_loop(llvm::BasicBlock* preheader, bool hoist, bool report) {
    values_.clear();
    hoist_ = hoist;
    report_ = report;
    llvm::BasicBlock* header = llvm::BasicBlock::Create(context_, "row", function_);
    llvm::IRBuilder<> pre(preheader);
    llvm::IRBuilder<> body(header);
    pre_ = &pre;
    body_ = &body;

    llvm::PHINode* i = body.CreatePHI(i32_, 2, "i");
    // kv0 + i wraps like the language's `+`.
    kv_ = body.CreateAdd(kv0_, i, "kv");
    llvm::Value* index = body.CreateZExt(i, i64_);
    llvm::Value* slot = body.CreateInBoundsGEP(kind_ == RowKind::Mask ? i8_ : f32_, out_, index);
    score_ = kind_ == RowKind::Score ? body.CreateAlignedLoad(f32_, slot, llvm::Align(4), "score")
                                     : nullptr;
    llvm::Value* result = value_of(expr_);
    if (kind_ == RowKind::Mask) {
      body.CreateStore(body.CreateZExt(result, i8_), slot);
    } else {
      body.CreateAlignedStore(result, slot, llvm::Align(4));
    }
    llvm::Value* next = body.CreateAdd(i, body.getInt32(1), "next", /*HasNUW=*/true,
                                       /*HasNSW=*/true);
    body.CreateCondBr(body.CreateICmpSLT(next, n_), header, exit_);
    pre.CreateBr(header);
    i->addIncoming(pre.getInt32(0), pre.GetInsertBlock());
    i->addIncoming(next, body.GetInsertBlock());
  }

  // The value of `e` in the loop being written; each node once.
  llvm::Value* value_of(const ir::Expr& e) {
    const auto found = values_.find(e.get());
    if (found != values_.end()) return found->second;
    std::vector<llvm::Value*> operands;
    for (int i = 0; i < ir::operand_count(e.kind()); ++i)
      operands.push_back(value_of(ir::operand(e, i)));
    llvm::IRBuilder<>& builder = hoist_ && !varies_.at(e.get()) ? *pre_ : *body_;
    llvm::Value* value = compute(builder, e, operands);
    values_.emplace(e.get(), value);
    return value;
  }

  llvm::Value* compute(llvm::IRBuilder<>& builder, const ir::Expr& e,
                       const std::vector<llvm::Value*>& operands) {
    switch (e.kind()) {
      case ir::ExprKind::IntImm:
        return builder.getInt32(static_cast<uint32_t>(e.as<ir::IntImm>()->value));
      case ir::ExprKind::FloatImm:
        return llvm::ConstantFP::get(context_, llvm::APFloat(e.as<ir::FloatImm>()->value));
      case ir::ExprKind::BoolImm:
        return builder.getInt1(e.as<ir::BoolImm>()->value);
      case ir::ExprKind::Var:
        return variable(e.as<ir::Var>()->variable);
      case ir::ExprKind::Param:
        return param(builder, e.as<ir::Param>());
      case ir::ExprKind::Load:
        return load(builder, e.as<ir::Load>(), operands[0], operands[1]);
      default:
        break;
    }
    const bool is_select = e.kind() == ir::ExprKind::Select;
    const ir::Type operand_type = ir::operand(e, is_select ? 1 : 0).type();
    if (operand_type == ir::Type::Float) return float_operation(builder, e.kind(), operands);
    return int_operation(builder, e.kind(), operand_type, operands);
  }

  llvm::Value* variable(ir::Variable variable) {
    switch (variable) {
      case ir::Variable::B:
        return b_;
      case ir::Variable::H:
        return h_;
      case ir::Variable::Q:
        return q_;
      case ir::Variable::KV:
        return kv_;
      case ir::Variable::Score:
        // evaluate_mask evaluates a mask with score 0.0 should one read it.
        return score_ != nullptr ? score_ : llvm::ConstantFP::get(f32_, 0.0);
    }
    return nullptr;
  }

  llvm::Value* param(llvm::IRBuilder<>& builder, const ir::Param* param) {
    llvm::Value* bits = scalars_.at(param->slot);
    switch (param->type) {
      case ir::Type::Bool:
        return builder.CreateICmpNE(bits, builder.getInt32(0));
      case ir::Type::Float:
        return builder.CreateBitCast(bits, f32_);
      case ir::Type::Int:
        break;
    }
    return bits;
  }

  // fj::load_int / fj::load_float: the element, or 0 (reported) outside the array. The read
  // sits in a block of its own, taken only in range: `data` may be null for an empty array.
  llvm::Value* load(llvm::IRBuilder<>& builder, const ir::Load* op, llvm::Value* row,
                    llvm::Value* col) {
    const ArrayFields& array = arrays_.at(op->slot);
    llvm::Type* type = op->type == ir::Type::Float ? f32_ : i32_;
    // fj::array_offset's signed tests, as written (a negative extent puts every index out).
    llvm::Value* outside =
        builder.CreateOr(builder.CreateOr(builder.CreateICmpSLT(row, builder.getInt32(0)),
                                          builder.CreateICmpSGE(row, array.rows)),
                         builder.CreateOr(builder.CreateICmpSLT(col, builder.getInt32(0)),
                                          builder.CreateICmpSGE(col, array.cols)));
    llvm::BasicBlock* from = builder.GetInsertBlock();
    llvm::BasicBlock* inside_block = llvm::BasicBlock::Create(context_, "read", function_);
    llvm::BasicBlock* outside_block =
        report_ ? llvm::BasicBlock::Create(context_, "bad_index", function_) : nullptr;
    llvm::BasicBlock* done = llvm::BasicBlock::Create(context_, "read_done", function_);
    builder.CreateCondBr(outside, report_ ? outside_block : done, inside_block);

    builder.SetInsertPoint(inside_block);
    llvm::Value* offset =
        builder.CreateAdd(builder.CreateMul(builder.CreateSExt(row, i64_),
                                            builder.CreateSExt(array.row_stride, i64_)),
                          builder.CreateSExt(col, i64_));
    llvm::Value* element = builder.CreateAlignedLoad(
        type, builder.CreateInBoundsGEP(type, array.data, offset), llvm::Align(4), "element");
    builder.CreateBr(done);

    if (report_) {
      builder.SetInsertPoint(outside_block);
      builder.CreateCall(report_function(), {array.descriptor, row, col});
      builder.CreateBr(done);
    }

    builder.SetInsertPoint(done);
    llvm::PHINode* value = builder.CreatePHI(type, 2, "load");
    value->addIncoming(element, inside_block);
    value->addIncoming(llvm::Constant::getNullValue(type), report_ ? outside_block : from);
    return value;
  }

  // Int and Bool operands (Bools are i1 and compare as such).
  llvm::Value* int_operation(llvm::IRBuilder<>& builder, ir::ExprKind kind, ir::Type operand_type,
                             const std::vector<llvm::Value*>& v) {
    llvm::Value* zero = builder.getInt32(0);
    switch (kind) {
      case ir::ExprKind::Add:
        return builder.CreateAdd(v[0], v[1]);
      case ir::ExprKind::Sub:
        return builder.CreateSub(v[0], v[1]);
      case ir::ExprKind::Mul:
        return builder.CreateMul(v[0], v[1]);
      case ir::ExprKind::Div:
        return floor_divide(builder, v[0], v[1], /*modulo=*/false);
      case ir::ExprKind::Mod:
        return floor_divide(builder, v[0], v[1], /*modulo=*/true);
      case ir::ExprKind::Min:
        return builder.CreateSelect(builder.CreateICmpSLT(v[0], v[1]), v[0], v[1]);
      case ir::ExprKind::Max:
        return builder.CreateSelect(builder.CreateICmpSLT(v[0], v[1]), v[1], v[0]);
      case ir::ExprKind::Abs:
        return builder.CreateSelect(builder.CreateICmpSLT(v[0], zero),
                                    builder.CreateSub(zero, v[0]), v[0]);
      case ir::ExprKind::Neg:
        return builder.CreateSub(zero, v[0]);
      case ir::ExprKind::EQ:
        return builder.CreateICmpEQ(v[0], v[1]);
      case ir::ExprKind::NE:
        return builder.CreateICmpNE(v[0], v[1]);
      case ir::ExprKind::LT:
        return builder.CreateICmpSLT(v[0], v[1]);
      case ir::ExprKind::LE:
        return builder.CreateICmpSLE(v[0], v[1]);
      case ir::ExprKind::GT:
        return builder.CreateICmpSGT(v[0], v[1]);
      case ir::ExprKind::GE:
        return builder.CreateICmpSGE(v[0], v[1]);
      case ir::ExprKind::And:
        return builder.CreateAnd(v[0], v[1]);
      case ir::ExprKind::Or:
        return builder.CreateOr(v[0], v[1]);
      case ir::ExprKind::Not:
        return builder.CreateNot(v[0]);
      case ir::ExprKind::Select:
        return builder.CreateSelect(v[0], v[1], v[2]);
      case ir::ExprKind::BitAnd:
        return builder.CreateAnd(v[0], v[1]);
      case ir::ExprKind::BitOr:
        return builder.CreateOr(v[0], v[1]);
      case ir::ExprKind::BitXor:
        return builder.CreateXor(v[0], v[1]);
      case ir::ExprKind::BitNot:
        return builder.CreateNot(v[0]);
      case ir::ExprKind::Shl: {
        // fj::shl: counts outside [0, 31] give 0. LLVM's shl by 32 or more is poison, so the
        // shift takes the count's low 5 bits and the select discards it for the others.
        llvm::Value* in_range = builder.CreateICmpULT(v[1], builder.getInt32(32));
        llvm::Value* shifted = builder.CreateShl(v[0], builder.CreateAnd(v[1], 31));
        return builder.CreateSelect(in_range, shifted, zero);
      }
      case ir::ExprKind::Shr: {
        // fj::shr: counts outside [0, 31] (unsigned: negatives too) shift by 31.
        llvm::Value* in_range = builder.CreateICmpULT(v[1], builder.getInt32(32));
        return builder.CreateAShr(v[0], builder.CreateSelect(in_range, v[1], builder.getInt32(31)));
      }
      case ir::ExprKind::ToInt:  // of a Bool: 0 or 1 (of an Int, not built: itself)
        return operand_type == ir::Type::Bool ? builder.CreateZExt(v[0], i32_) : v[0];
      case ir::ExprKind::ToFloat:
        return operand_type == ir::Type::Bool
                   ? builder.CreateSelect(v[0], llvm::ConstantFP::get(f32_, 1.0),
                                          llvm::ConstantFP::get(f32_, 0.0))
                   : builder.CreateSIToFP(v[0], f32_);  // round to nearest even, as (float)a
      default:
        break;
    }
    return nullptr;
  }

  // fj::floordiv / fj::floormod. LLVM's sdiv and srem are undefined for a zero divisor and for
  // INT_MIN / -1, so both are given the divisor 1 instead, and the cases selected afterwards
  // (x / 0 == 0, x / -1 == -x, x % 0 == x % -1 == 0). A constant divisor folds the guards away.
  llvm::Value* floor_divide(llvm::IRBuilder<>& builder, llvm::Value* a, llvm::Value* b,
                            bool modulo) {
    llvm::Value* zero = builder.getInt32(0);
    llvm::Value* by_zero = builder.CreateICmpEQ(b, zero);
    llvm::Value* by_minus_one = builder.CreateICmpEQ(b, builder.getInt32(-1));
    llvm::Value* divisor =
        builder.CreateSelect(builder.CreateOr(by_zero, by_minus_one), builder.getInt32(1), b);
    llvm::Value* remainder = builder.CreateSRem(a, divisor);
    // A nonzero remainder whose sign differs from the divisor's: rounded toward zero, so one
    // step toward negative infinity is due.
    llvm::Value* adjust =
        builder.CreateAnd(builder.CreateICmpNE(remainder, zero),
                          builder.CreateICmpSLT(builder.CreateXor(remainder, divisor), zero));
    if (modulo) {
      llvm::Value* mod =
          builder.CreateSelect(adjust, builder.CreateAdd(remainder, divisor), remainder);
      return builder.CreateSelect(builder.CreateOr(by_zero, by_minus_one), zero, mod);
    }
    llvm::Value* quotient = builder.CreateSDiv(a, divisor);
    llvm::Value* floored =
        builder.CreateSelect(adjust, builder.CreateSub(quotient, builder.getInt32(1)), quotient);
    return builder.CreateSelect(
        by_zero, zero, builder.CreateSelect(by_minus_one, builder.CreateSub(zero, a), floored));
  }

  // Float operands. No fast-math flags anywhere: every instruction is the IEEE operation, and
  // LLVM neither reassociates nor fuses a multiply and an add without them.
  llvm::Value* float_operation(llvm::IRBuilder<>& builder, ir::ExprKind kind,
                               const std::vector<llvm::Value*>& v) {
    if (const char* wrapper = wrapper_of(kind)) return call(builder, wrapper, v);
    llvm::Value* zero = llvm::ConstantFP::get(f32_, 0.0);
    switch (kind) {
      case ir::ExprKind::Add:
        return builder.CreateFAdd(v[0], v[1]);
      case ir::ExprKind::Sub:
        return builder.CreateFSub(v[0], v[1]);
      case ir::ExprKind::Mul:
        return builder.CreateFMul(v[0], v[1]);
      case ir::ExprKind::Div:  // fj::fdiv: 0.0 for a zero divisor of either sign
        return builder.CreateSelect(builder.CreateFCmpOEQ(v[1], zero), zero,
                                    builder.CreateFDiv(v[0], v[1]));
      case ir::ExprKind::Min:
        return float_min_max(builder, v[0], v[1], /*max=*/false);
      case ir::ExprKind::Max:
        return float_min_max(builder, v[0], v[1], /*max=*/true);
      case ir::ExprKind::Abs:
        return builder.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, v[0]);
      case ir::ExprKind::Neg:
        return builder.CreateFNeg(v[0]);
      case ir::ExprKind::EQ:
        return builder.CreateFCmpOEQ(v[0], v[1]);
      case ir::ExprKind::NE:  // true when either is NaN, as C++'s !=
        return builder.CreateFCmpUNE(v[0], v[1]);
      case ir::ExprKind::LT:
        return builder.CreateFCmpOLT(v[0], v[1]);
      case ir::ExprKind::LE:
        return builder.CreateFCmpOLE(v[0], v[1]);
      case ir::ExprKind::GT:
        return builder.CreateFCmpOGT(v[0], v[1]);
      case ir::ExprKind::GE:
        return builder.CreateFCmpOGE(v[0], v[1]);
      case ir::ExprKind::Select:
        return builder.CreateSelect(v[0], v[1], v[2]);
      case ir::ExprKind::ToInt:
        // fj::float_to_int: truncation, NaN to 0, saturation at the int32 ends: exactly
        // llvm.fptosi.sat.
        return builder.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {i32_, f32_}, {v[0]});
      case ir::ExprKind::ToFloat:  // of a Float: not built, itself
        return v[0];
      // Correctly rounded, so the instruction and the C library agree.
      case ir::ExprKind::Sqrt:
        return builder.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, v[0]);
      case ir::ExprKind::Floor:
        return builder.CreateUnaryIntrinsic(llvm::Intrinsic::floor, v[0]);
      case ir::ExprKind::Ceil:
        return builder.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, v[0]);
      default:
        break;
    }
    return nullptr;
  }

  // fj::fmin / fj::fmax: a NaN operand is ignored, and of -0.0 and +0.0 min takes -0.0 and max
  // +0.0 (decided on a's sign bit, as they do).
  llvm::Value* float_min_max(llvm::IRBuilder<>& builder, llvm::Value* a, llvm::Value* b, bool max) {
    llvm::Value* a_negative =
        builder.CreateICmpSLT(builder.CreateBitCast(a, i32_), builder.getInt32(0));
    llvm::Value* tie =
        max ? builder.CreateSelect(a_negative, b, a) : builder.CreateSelect(a_negative, a, b);
    llvm::Value* ordered =
        builder.CreateSelect(builder.CreateFCmpOLT(a, b), max ? b : a,
                             builder.CreateSelect(builder.CreateFCmpOLT(b, a), max ? a : b, tie));
    return builder.CreateSelect(builder.CreateFCmpUNO(b, b), a,
                                builder.CreateSelect(builder.CreateFCmpUNO(a, a), b, ordered));
  }

  llvm::Value* call(llvm::IRBuilder<>& builder, const char* name,
                    const std::vector<llvm::Value*>& operands) {
    llvm::Function* function = module_.getFunction(name);
    if (function == nullptr) {
      std::vector<llvm::Type*> types(operands.size(), f32_);
      function = llvm::Function::Create(llvm::FunctionType::get(f32_, types, false),
                                        llvm::Function::ExternalLinkage, name, module_);
      // Pure functions of their operands, so LLVM may hoist them out of the loop and merge
      // repeated calls. (The C library may set errno on overflow; nothing here reads it.)
      function->setDoesNotAccessMemory();
      function->setDoesNotThrow();
      function->setWillReturn();
    }
    return builder.CreateCall(function, operands);
  }

  llvm::Function* report_function() {
    llvm::Function* function = module_.getFunction(kReportName);
    if (function == nullptr) {
      function = llvm::Function::Create(
          llvm::FunctionType::get(llvm::Type::getVoidTy(context_), {ptr_, i32_, i32_}, false),
          llvm::Function::ExternalLinkage, kReportName, module_);
      function->setDoesNotThrow();
    }
    return function;
  }

  llvm::Module& module_;
  llvm::LLVMContext& context_;
  const RowKind kind_;
  const ir::Expr expr_;  // the mask or the score
  llvm::Type *i8_, *i32_, *i64_, *f32_;
  llvm::PointerType* ptr_;

  // What the body reads (ordered, so that the code is the same from run to run).
  std::set<int> scalar_slots_;
  std::map<int, ArrayFields> arrays_;
  std::map<int, llvm::Value*> scalars_;
  std::unordered_map<const ir::ExprNode*, bool> varies_;

  llvm::Function* function_ = nullptr;
  llvm::Value *params_ = nullptr, *b_ = nullptr, *h_ = nullptr, *q_ = nullptr, *kv0_ = nullptr,
              *n_ = nullptr, *out_ = nullptr;
  llvm::BasicBlock* exit_ = nullptr;

  // The loop being written.
  bool hoist_ = false, report_ = false;
  llvm::IRBuilder<>* pre_ = nullptr;
  llvm::IRBuilder<>* body_ = nullptr;
  llvm::Value* kv_ = nullptr;
  llvm::Value* score_ = nullptr;
  std::unordered_map<const ir::ExprNode*, llvm::Value*> values_;
};

using MaskRowFunction = void(const fj::MaskParams*, int32_t, int32_t, int32_t, int32_t, int32_t,
                             uint8_t*);
using ScoreRowFunction = void(const fj::MaskParams*, int32_t, int32_t, int32_t, int32_t, int32_t,
                              float*);

// The compiled functions of a variant.
struct NativeFunctions {
  MaskRowFunction* mask = nullptr;
  ScoreRowFunction* score = nullptr;  // null without a score
  TileValueFunction* tile_value = nullptr;
  KvBoundFunction* kv_bound = nullptr;
};

// Owns the JIT, and with it the code: the functions live as long as this object.
class NativeHostCode final : public HostCode {
 public:
  NativeHostCode(std::unique_ptr<llvm::orc::LLJIT> jit, const NativeFunctions& functions)
      : jit_(std::move(jit)), functions_(functions) {}

  void mask_row(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv0,
                int32_t n, uint8_t* out) const override {
    functions_.mask(&params_or_zero(params), b, h, q, kv0, n, out);
  }

  void score_row(const fj::MaskParams* params, int32_t b, int32_t h, int32_t q, int32_t kv0,
                 int32_t n, float* scores) const override {
    if (functions_.score != nullptr) {
      functions_.score(&params_or_zero(params), b, h, q, kv0, n, scores);
    }
  }

  // As MaskAnalysis::classify: the empty tile decided here, the box's ranges inclusive.
  TileClass classify(const Tile& tile, const fj::MaskParams* params) const override {
    if (tile.q0 >= tile.q1 || tile.k0 >= tile.k1) return TileClass::Empty;
    fj::Interval value{};
    functions_.tile_value(&params_or_zero(params), tile.b, tile.h, tile.q0, int64_t{tile.q1} - 1,
                          tile.k0, int64_t{tile.k1} - 1, &value);
    return static_cast<TileClass>(fj::tile_class(value));
  }

  // As MaskAnalysis::kv_range.
  KvRange kv_range(int32_t b, int32_t h, int32_t q0, int32_t q1,
                   const fj::MaskParams* params) const override {
    if (q0 >= q1) return {};
    fj::kvr::Bound bound{};
    functions_.kv_bound(&params_or_zero(params), b, h, q0, int64_t{q1} - 1, &bound);
    const fj::KvRange range = fj::kvr::to_range(bound);
    return {range.lo, range.hi};
  }

  bool native() const override { return true; }

 private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  const NativeFunctions functions_;
};

// The O2 pipeline, tuned for the target machine (its vector widths and costs).
void optimize(llvm::Module& module, llvm::TargetMachine& target) {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(&target);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(module, modules);
}

// Bump when the key's fields or their encoding change (host_code_key), and with them the golden
// file of tests/compiler/golden/. Changes to the code generator need no bump: the generator's
// build ID is hashed.
constexpr uint64_t kHostCodeKeyVersion = 1;

// The GNU build ID of the binary this generator is linked into (the executable or the shared
// library), in hex: it changes whenever the generator's code may have, so an object file built
// by another flexjit is never loaded. Empty when the binary has none (linked without
// --build-id): then nothing is cached.
const std::string& generator_build_id() {
  static const std::string id = [] {
    struct Search {
      uintptr_t address;
      std::string id;
    } search{reinterpret_cast<uintptr_t>(&generator_build_id), {}};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
          auto* search = static_cast<Search*>(data);
          const auto segments = std::span(info->dlpi_phdr, info->dlpi_phnum);
          const bool ours = std::any_of(segments.begin(), segments.end(), [&](const auto& segment) {
            const uintptr_t start = info->dlpi_addr + segment.p_vaddr;
            return segment.p_type == PT_LOAD && search->address >= start &&
                   search->address - start < segment.p_memsz;
          });
          if (!ours) return 0;
          for (const auto& segment : segments) {
            if (segment.p_type != PT_NOTE) continue;
            const char* note = reinterpret_cast<const char*>(info->dlpi_addr + segment.p_vaddr);
            const char* end = note + segment.p_memsz;
            while (note + sizeof(ElfW(Nhdr)) <= end) {
              const auto* header = reinterpret_cast<const ElfW(Nhdr)*>(note);
              const char* name = note + sizeof(ElfW(Nhdr));
              const char* desc = name + ((header->n_namesz + 3) & ~3u);
              if (header->n_type == NT_GNU_BUILD_ID && header->n_namesz == 4 &&
                  std::memcmp(name, "GNU", 4) == 0) {
                for (const char byte : std::string_view(desc, header->n_descsz))
                  search->id += fmt::format("{:02x}", static_cast<unsigned char>(byte));
                return 1;
              }
              note = desc + ((header->n_descsz + 3) & ~3u);
            }
          }
          return 1;
        },
        &search);
    return search.id;
  }();
  return id;
}

// The store's key for `variant`'s object file: KeyHasher over the key version, what made the
// code (LLVM's version, the generator's build ID), what it runs on (the target triple, CPU and
// features) and the variant's IR (host_code_ir_bytes).
std::string host_code_key(const Variant& variant, const llvm::TargetMachine& target) {
  KeyHasher hasher;
  hasher.add_number(kHostCodeKeyVersion);
  hasher.add_field("host code");
  hasher.add_field(LLVM_VERSION_STRING);
  hasher.add_field(generator_build_id());
  hasher.add_field(target.getTargetTriple().str());
  hasher.add_field(target.getTargetCPU());
  hasher.add_field(target.getTargetFeatureString());
  hasher.add_field(host_code_ir_bytes(variant));
  return hasher.hex();
}

// The variant's functions as an object file for `target`: IR, verification, O2, machine code.
Result<std::string> compile_object(const Variant& variant, llvm::TargetMachine& target) {
  llvm::LLVMContext context;
  llvm::Module module("flexjit_" + variant.name, context);
  module.setDataLayout(target.createDataLayout());
  module.setTargetTriple(target.getTargetTriple().str());
  RowWriter(module, RowKind::Mask, mask_of(variant)).write(kMaskRowName, target);
  if (variant.has_score()) {
    RowWriter(module, RowKind::Score, variant.score).write(kScoreRowName, target);
  }
  // The mask's interval program, as MaskAnalysis builds it (the plans are not kept: the code
  // holds all it needs).
  write_analysis(module, target, MaskAnalysis(variant).plans()->program);
  std::string problems;
  llvm::raw_string_ostream problem_stream(problems);
  if (llvm::verifyModule(module, &problem_stream)) {
    return Error{fmt::format("LLVM: generated invalid IR for `{}`", variant.name),
                 problem_stream.str()};
  }
  optimize(module, target);
  auto object = llvm::orc::SimpleCompiler(target)(module);
  if (!object) return Error{"LLVM: " + error_text(object.takeError())};
  return std::string((*object)->getBuffer());
}

// A JIT holding `object`, its calls to the host functions bound; the functions looked up, which
// links the object, so that errors surface here, not in a call.
Result<std::shared_ptr<const HostCode>> load_object(
    const Variant& variant, const llvm::orc::JITTargetMachineBuilder& machine,
    std::string_view object) {
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(machine).create();
  if (!jit) return Error{"LLVM: cannot create the JIT: " + error_text(jit.takeError())};
  llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  for (const HostFunction& function : host_functions()) {
    symbols[mangle(function.name)] = llvm::JITEvaluatedSymbol(
        function.address, llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  }
  for (const auto& [name, address] : analysis_functions()) {
    symbols[mangle(name)] = llvm::JITEvaluatedSymbol(
        address, llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  }
  if (llvm::Error error =
          (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
    return Error{"LLVM: " + error_text(std::move(error))};
  }
  if (llvm::Error error = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(object.data(), object.size()), "flexjit_" + variant.name))) {
    return Error{"LLVM: " + error_text(std::move(error))};
  }
  NativeFunctions functions;
  std::string lookup_error;
  const auto find = [&]<class F>(F*& function, const char* name) {
    auto found = (*jit)->lookup(name);
    if (!found) {
      lookup_error = "LLVM: " + error_text(found.takeError());
      return false;
    }
    function = found->template toPtr<F*>();
    return true;
  };
  if (!find(functions.mask, kMaskRowName) || !find(functions.tile_value, kTileValueName) ||
      !find(functions.kv_bound, kKvBoundName) ||
      (variant.has_score() && !find(functions.score, kScoreRowName))) {
    return Error{lookup_error};
  }
  return std::shared_ptr<const HostCode>(
      std::make_shared<const NativeHostCode>(std::move(*jit), functions));
}

}  // namespace

Result<std::shared_ptr<const HostCode>> compile_native_host_code(const Variant& variant,
                                                                 HostCodeStore* store) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });

  auto machine_builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!machine_builder) {
    return Error{"LLVM: no host target: " + error_text(machine_builder.takeError())};
  }
  // The language never fuses a multiply and an add (fj_ops.cuh): say so to the code generator
  // too, whatever its default.
  machine_builder->getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;
  machine_builder->setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  auto target = machine_builder->createTargetMachine();
  if (!target) return Error{"LLVM: " + error_text(target.takeError())};

  bool built = false;
  const auto build = [&]() -> Result<std::string> {
    built = true;
    return compile_object(variant, **target);
  };
  if (store == nullptr || generator_build_id().empty()) {
    auto object = build();
    if (!object) return object.error();
    return load_object(variant, *machine_builder, *object);
  }
  auto object = store->object(variant.name, host_code_key(variant, **target), build);
  if (!object) return object.error();
  auto code = load_object(variant, *machine_builder, *object);
  // A stored object that does not link (its checksum held, so it was written so) is not
  // trusted further: built here instead.
  if (!code && !built) {
    object = build();
    if (!object) return object.error();
    code = load_object(variant, *machine_builder, *object);
  }
  return code;
}

}  // namespace flexjit
