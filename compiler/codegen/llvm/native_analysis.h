// Internal to flexjit_codegen_llvm, built only with LLVM: a mask's interval program
// (compiler/analysis/interval_tape.h, what MaskAnalysis runs) compiled to native code, the tile
// value behind HostCode::classify and the kv bound behind HostCode::kv_range.
#pragma once

#include <llvm/ExecutionEngine/JITSymbol.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "analysis/interval_tape.h"

namespace flexjit {

// void flexjit_tile_value(const fj::MaskParams* p, i32 b, i32 h, i64 q_lo, i64 q_hi,
//                         i64 kv_lo, i64 kv_hi, fj::Interval* out):
// *out = IntervalProgram::value(box).ints for the box b, h, q in [q_lo, q_hi], kv in
// [kv_lo, kv_hi] (inclusive, as TileBox) and the parameters *p (never null).
inline constexpr const char* kTileValueName = "flexjit_tile_value";
using TileValueFunction = void(const fj::MaskParams*, int32_t, int32_t, int64_t, int64_t, int64_t,
                               int64_t, fj::Interval*);

// void flexjit_kv_bound(const fj::MaskParams* p, i32 b, i32 h, i64 q_lo, i64 q_hi,
//                       fj::kvr::Bound* out):
// *out = IntervalProgram::kv_bound(box) for the box b, h, q in [q_lo, q_hi], kv the point 0
// (what MaskAnalysis::kv_range passes), the parameters *p.
inline constexpr const char* kKvBoundName = "flexjit_kv_bound";
using KvBoundFunction = void(const fj::MaskParams*, int32_t, int32_t, int64_t, int64_t,
                             fj::kvr::Bound*);

// Writes both functions of `program` into `module`, for the host CPU of `target`.
void write_analysis(llvm::Module& module, const llvm::TargetMachine& target,
                    const IntervalProgram& program);

// The wrappers the two functions call (names and addresses), for the JIT's symbol table.
std::vector<std::pair<const char*, llvm::JITTargetAddress>> analysis_functions();

}  // namespace flexjit
